#!/usr/bin/env python3
"""OpenHands coding sessions (All-Hands-AI/OpenHands and OpenHands/benchmarks, both MIT) ->
$AGENT_BREAKER_CORPUS/openhands.jsonl.gz.

Three recordings of the OpenHands agent solving repository issues, with shell commands, their exit
codes, file edits and the agent's closing message:

1. `swebv-claude35`: CodeActAgent v0.15 + claude-3-5-sonnet-20241022 on 50 SWE-bench Verified
   instances (All-Hands-AI/OpenHands commit 4ce8594, removed again in d74b5f6):
   llm_completions/<instance>/*.json, one file per model call. The latest file of an instance holds the
   whole conversation (messages) and the last model response; every earlier file gives the usage and
   creation time of one model call (matched by order). The run's output.jsonl is over the 4 MiB
   snapshot limit and absent. Outcome: output.swebench_eval.md of the same run (Resolved Instances ->
   success true; unresolved / empty patch / error -> false).
2. `multiswe-llama4`: the example output.jsonl of evaluation/benchmarks/multi_swe_bench (CodeActAgent +
   llama-4-maverick, 3 ponyc instances; OpenHands v0 event history). No evaluation: success null.
3. `sdk-swebench`: OpenHands software-agent-sdk (V1) conversations on SWE-bench instances (claude),
   committed by mistake to OpenHands/benchmarks under workspace/conversations/<id>/event_service/events/
   and removed again (commits listed in SDK_COMMITS). One JSON file per event; a conversation is the
   union of its event files over those commits (event files are never rewritten). Only conversations
   whose event numbers run from 0 without a gap and hold at least 20 events are kept (the others are
   fragments). No evaluation: success null.

Events: the task (first user message) -> `user`; each tool call -> `tool_call` with the tool name and the
arguments as the model emitted them (the raw JSON of the function call: execute_bash {"command": ...},
str_replace_editor {"command": "str_replace"|"create"|"view"|..., "path": ...}); thought = the model's
text of that turn; tokens (input = prompt tokens, output = completion tokens) on the first call of a
model response; ts = the recorded time. Each tool result -> `tool_result` with
`exit_code` (an extra key; the trace format ignores unknown keys) when the command's exit code is
recorded (`[Command finished with exit code N]` in the v0.15 text, metadata.exit_code in the event
histories); ok = exit_code == 0 when recorded (-1 = still running / timed out: not ok), else ok = not an
error (ERROR: prefix of the editor, an error observation / AgentErrorEvent, is_error). The `finish`
tool's message (and the text the model wrote with it) -> `final`; a model turn without a tool call ->
`assistant`; later user / harness messages -> `user`.

Text cut: tool output and the final message are cut head + tail (the first 980 characters,
"\\n...[+N chars]...\\n", then the last characters up to 2,000 in all), so test summaries at the end of
long outputs survive; thoughts are cut to 2,000 characters (head), arguments to 4,000 (_common.cut).
"""

import re
from collections import defaultdict

import orjson
from _common import Writer, blob, cut, git, ls_tree, text_of

OH = "All-Hands-AI/OpenHands"
OH_COMMIT = "4ce8594d56a8a09b6c12d6dfd6fe746e825be644"
OH_RUN = (
    "evaluation/evaluation_outputs/outputs/princeton-nlp__SWE-bench_Verified-test/CodeActAgent/"
    "claude-3-5-sonnet-20241022_maxiter_50_N_v0.15.0-no-hint-no-condensation-run_1"
)
MSWE_COMMIT = "156d0686c46aafb0fa9d291da6421fb6f64dddc0"
MSWE_PATH = "evaluation/benchmarks/multi_swe_bench/examples/output.jsonl"

BM = "OpenHands/benchmarks"
#: every commit of OpenHands/benchmarks whose tree holds workspace/conversations, newest first
SDK_COMMITS = [
    "dab6cb96818a3fef44827b37a76e8355ea347279",
    "f5f0bde47c6f1a56a850c1a78b61fa29aada58f2",
    "c3235db7f13d28e539e81bcbaa9b1134d6e16716",
    "c03b7e73599fe3338fbe02d4800f1cd44501671e",
    "36cfef5fa923f65bb9257c67b7c3fef432fbc8aa",
    "c138e3568c2445e4d80b73a466196a79709cf8ea",
    "8acc621c63ccb8e565b27567e1475aef0a189108",
]
SDK_MIN_EVENTS = 20

HEAD = 980
EXIT = re.compile(r"\[Command finished with exit code (-?\d+)\]\s*$")
EXIT_ANY = re.compile(r"\[Command finished with exit code (-?\d+)\]")
TIMEOUT = re.compile(r"Command timed out|\[Command timed out")


def raw_args(arguments):
    try:
        a = orjson.loads(arguments) if isinstance(arguments, str) else arguments
    except orjson.JSONDecodeError:
        return {"raw": arguments}
    return a if isinstance(a, dict) else {"raw": arguments}


def result_ok(tool, text, exit_code=None, error=False):
    if exit_code is not None:
        return exit_code == 0
    if error:
        return False
    t = (text or "").lstrip()
    return not (t.startswith(("ERROR", "Error:")) or TIMEOUT.search(t[-300:]))


def emit_result(s, tool, cid, text, exit_code=None, error=False, ts=None):
    ok = result_ok(tool, text, exit_code, error)
    out = cut(text, head=HEAD)
    kw = {"exit_code": exit_code} if exit_code is not None else {}
    s.result(tool, cid, ok, output=out, error=None if ok else out, ts=ts, **kw)


def final_text(content, args):
    """The closing message: the text the model wrote with the finish call and the finish message."""
    parts = []
    c = (content or "").strip()
    if c:
        parts.append(c)
    for k in ("message", "final_thought", "thought", "outputs"):
        v = args.get(k) if isinstance(args, dict) else None
        if isinstance(v, str) and v.strip() and v.strip() not in parts:
            parts.append(v.strip())
    return "\n\n".join(parts)


# --- 1. v0.15 llm_completions ---------------------------------------------------------------


def swebv_outcomes(w):
    path = f"{OH_RUN}/output.swebench_eval.md"
    sha = git(OH, "rev-parse", f"{OH_COMMIT}:{path}").decode().strip()
    w.used(OH, OH_COMMIT, path, sha, note="SWE-bench report of the run")
    md = blob(OH, sha).decode()
    out = {}
    section = None
    for line in md.splitlines():
        if line.startswith("## "):
            section = line[3:].strip().lower()
            continue
        m = re.match(r"- \[([^\]]+)\]", line)
        if m and section:
            out[m.group(1)] = section.startswith("resolved")
    return out


def convert_completions(w):
    outcome = swebv_outcomes(w)
    files = defaultdict(list)
    for sha, _size, path in ls_tree(OH, OH_COMMIT, f"{OH_RUN}/llm_completions"):
        m = re.search(r"/llm_completions/([^/]+)/.*-(\d+(?:\.\d+)?)\.json$", path)
        if m:
            files[m.group(1)].append((float(m.group(2)), path, sha))
    for inst in sorted(files):
        fl = sorted(files[inst])
        calls_meta = []
        for _t, _path, sha in fl:
            d = orjson.loads(blob(OH, sha))
            r = d.get("response") or {}
            u = r.get("usage") or {}
            calls_meta.append((r.get("created"), u.get("prompt_tokens"), u.get("completion_tokens")))
        _t, path, sha = fl[-1]
        w.used(OH, OH_COMMIT, path, sha, note=f"latest of {len(fl)} completion files")
        d = orjson.loads(blob(OH, sha))
        msgs = list(d.get("messages") or [])
        resp = ((d.get("response") or {}).get("choices") or [{}])[0].get("message") or {}
        msgs.append(resp)
        n_asst = sum(1 for m in msgs if m.get("role") == "assistant")
        if n_asst != len(calls_meta):
            calls_meta = [(None, None, None)] * n_asst
        s = w.session(f"openhands/swebv-claude35/{inst}")
        pend = {}
        k = 0
        first_user = True
        has_final = False
        for m in msgs:
            role = m.get("role")
            if role == "system":
                continue
            if role == "user":
                t = text_of(m.get("content"))
                if first_user:
                    first_user = False
                s.user(t)
                continue
            if role == "assistant":
                ts, pin, pout = calls_meta[k]
                k += 1
                tok = {"input_tokens": pin, "output_tokens": pout}
                content = text_of(m.get("content"))
                tcs = m.get("tool_calls") or []
                if not tcs:
                    s.assistant(content, ts=ts, **tok)
                    continue
                for j, tc in enumerate(tcs):
                    fn = tc.get("function") or {}
                    name = fn.get("name")
                    args = raw_args(fn.get("arguments"))
                    if name == "finish":
                        s.final(cut(final_text(content if j == 0 else "", args), head=HEAD), ts=ts, **(tok if j == 0 else {}))
                        has_final = True
                        continue
                    ev = s.call(
                        name, args, call_id=tc.get("id"), thought=content if j == 0 else None, ts=ts, **(tok if j == 0 else {})
                    )
                    pend[ev["call_id"]] = name
                continue
            if role == "tool":
                cid = m.get("tool_call_id")
                name = pend.pop(cid, m.get("name") or "tool")
                t = text_of(m.get("content"))
                mm = EXIT.search(t) or (EXIT_ANY.search(t) if name == "execute_bash" else None)
                rc = int(mm.group(1)) if mm else None
                emit_result(s, name, cid, t, exit_code=rc)
        s.done(
            outcome.get(inst),
            run="swebv-claude35",
            instance=inst,
            model="claude-3-5-sonnet-20241022",
            has_final=has_final,
            also_in="shared/traces/real-openhands-codeact.jsonl",
        )


# --- 2. v0 event history (output.jsonl) ---------------------------------------------------


def tool_call_of(ev):
    """(function name, raw args, call id, response content, usage, created) of a v0 action event."""
    md = ev.get("tool_call_metadata") or {}
    name, cid = md.get("function_name"), md.get("tool_call_id")
    resp = md.get("model_response") or {}
    msg = ((resp.get("choices") or [{}])[0]).get("message") or {}
    args = None
    for tc in msg.get("tool_calls") or []:
        if tc.get("id") == cid:
            args = raw_args((tc.get("function") or {}).get("arguments"))
    return name, args, cid, text_of(msg.get("content")), resp.get("usage") or {}, resp.get("id"), resp.get("created")


def convert_v0(w, sid, history, success, **info):
    s = w.session(sid)
    pend = {}  # event id -> (tool, call id)
    seen_resp = set()
    has_final = False
    for ev in history:
        act, obs = ev.get("action"), ev.get("observation")
        src = ev.get("source")
        args = ev.get("args") or {}
        if act in ("system", "recall", "change_agent_state", "null") or obs in ("recall", "agent_state_changed", "null"):
            continue
        if act == "message":
            t = args.get("content") or ev.get("message") or ""
            (s.user if src == "user" else s.assistant)(t)
            continue
        if act:
            name, targs, cid, content, usage, rid, created = tool_call_of(ev)
            first = rid not in seen_resp
            seen_resp.add(rid)
            tok = {"input_tokens": usage.get("prompt_tokens"), "output_tokens": usage.get("completion_tokens")} if first else {}
            thought = args.get("thought") or (content if first else None)
            if act == "finish":
                s.final(cut(final_text(thought or "", {**args, **(targs or {})}), head=HEAD), ts=created, **tok)
                has_final = True
                continue
            if act == "think":
                name = name or "think"
            if targs is None:
                targs = {k: v for k, v in args.items() if k not in ("thought", "confirmation_state", "security_risk")}
            ce = s.call(name or act, targs, call_id=cid, thought=thought, ts=created, **tok)
            pend[ev.get("id")] = (name or act, ce["call_id"])
            continue
        if obs:
            tool, cid = pend.pop(ev.get("cause"), (None, None))
            if tool is None:
                md = ev.get("tool_call_metadata") or {}
                tool, cid = md.get("function_name") or obs, md.get("tool_call_id")
            extras = ev.get("extras") or {}
            rc = (extras.get("metadata") or {}).get("exit_code", extras.get("exit_code"))
            if obs != "run" and obs != "run_ipython":
                rc = None
            emit_result(s, tool, cid, ev.get("content") or "", exit_code=rc, error=obs == "error")
    s.done(success, has_final=has_final, **info)


def convert_multiswe(w):
    sha = git(OH, "rev-parse", f"{MSWE_COMMIT}:{MSWE_PATH}").decode().strip()
    w.used(OH, MSWE_COMMIT, MSWE_PATH, sha, note="3 runs")
    for line in blob(OH, sha).splitlines():
        if not line.strip():
            continue
        d = orjson.loads(line)
        model = ((d.get("metadata") or {}).get("llm_config") or {}).get("model")
        convert_v0(
            w,
            f"openhands/multiswe-llama4/{d['instance_id']}",
            d.get("history") or [],
            None,
            run="multiswe-llama4",
            instance=d["instance_id"],
            model=model,
            also_in="shared/traces/real-openhands.jsonl",
        )


# --- 3. software-agent-sdk (V1) conversations ---------------------------------------------


def sdk_events():
    """{conversation id: [(n, path, blob, commit)]} over SDK_COMMITS (first commit holding each file)."""
    files = {}
    for c in SDK_COMMITS:
        for sha, _size, path in ls_tree(BM, c, "workspace/conversations"):
            files.setdefault(path, (sha, c))
    conv = defaultdict(list)
    for path, (sha, c) in files.items():
        m = re.match(r"workspace/conversations/([0-9a-f]+)/event_service/events/event-(\d+)-", path)
        if m:
            conv[m.group(1)].append((int(m.group(2)), path, sha, c))
    return {k: sorted(v) for k, v in conv.items()}


def v1_text(x):
    if isinstance(x, list):
        return "\n".join(c.get("text", "") for c in x if isinstance(c, dict))
    return x or ""


def convert_sdk(w):
    for conv_id, evs in sorted(sdk_events().items()):
        if [n for n, *_ in evs] != list(range(len(evs))) or len(evs) < SDK_MIN_EVENTS:
            continue
        data = [orjson.loads(blob(BM, sha)) for _n, _p, sha, _c in evs]
        task = next(
            (
                v1_text((e.get("llm_message") or {}).get("content"))
                for e in data
                if e.get("kind") == "MessageEvent" and e.get("source") == "user"
            ),
            "",
        )
        m = re.search(r"/tmp/\w+/([\w.-]+)", task)
        repo = m.group(1).rstrip(".") if m else "repo"
        sid = f"openhands/sdk-swebench/{repo}-{conv_id[:8]}"
        for _n, path, sha, c in evs:
            w.used(BM, c, path, sha, note=sid)
        s = w.session(sid)
        pend = {}
        seen_resp = set()
        has_final = False
        for e in data:
            kind = e.get("kind")
            if kind == "MessageEvent":
                t = v1_text((e.get("llm_message") or {}).get("content"))
                (s.user if e.get("source") == "user" else s.assistant)(t)
            elif kind == "ActionEvent":
                a = e.get("action") or {}
                tc = e.get("tool_call") or {}
                name = e.get("tool_name") or (tc.get("function") or {}).get("name")
                args = (
                    raw_args((tc.get("function") or {}).get("arguments")) if tc else {k: v for k, v in a.items() if k != "kind"}
                )
                rid = e.get("llm_response_id")
                thought = v1_text(e.get("thought")) or None
                if rid in seen_resp:
                    thought = None
                seen_resp.add(rid)
                if a.get("kind") == "FinishAction":
                    s.final(cut(final_text(thought or "", {"message": a.get("message")}), head=HEAD))
                    has_final = True
                    continue
                ce = s.call(name, args, call_id=e.get("tool_call_id"), thought=thought)
                pend[e.get("tool_call_id")] = (name, ce["call_id"])
            elif kind in ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation"):
                o = e.get("observation") or {}
                tool, cid = pend.pop(e.get("tool_call_id"), (e.get("tool_name"), e.get("tool_call_id")))
                if o.get("kind") == "FinishObservation":
                    continue
                if kind != "ObservationEvent":
                    emit_result(s, tool, cid, e.get("error") or e.get("rejection_reason") or "", error=True)
                    continue
                text = o.get("output") if "output" in o else v1_text(o.get("content"))
                rc = (o.get("metadata") or {}).get("exit_code") if o.get("kind") == "ExecuteBashObservation" else None
                err = bool(o.get("error")) or bool(o.get("is_error"))
                if isinstance(o.get("error"), str):
                    text = o["error"] + ("\n" + text if text else "")
                if o.get("timeout"):
                    err = True
                emit_result(s, tool, cid, text, exit_code=rc, error=err)
        s.done(None, run="sdk-swebench", conversation=conv_id, repo=repo, has_final=has_final)


def main():
    w = Writer("openhands")
    w.used(OH, OH_COMMIT, "LICENSE", git(OH, "rev-parse", f"{OH_COMMIT}:LICENSE").decode().strip(), note="licence (MIT)")
    w.used(
        OH,
        MSWE_COMMIT,
        "LICENSE",
        git(OH, "rev-parse", f"{MSWE_COMMIT}:LICENSE").decode().strip(),
        note="licence (MIT outside enterprise/)",
    )
    w.used(
        BM, SDK_COMMITS[0], "LICENSE", git(BM, "rev-parse", f"{SDK_COMMITS[0]}:LICENSE").decode().strip(), note="licence (MIT)"
    )
    convert_completions(w)
    convert_multiswe(w)
    convert_sdk(w)
    w.close()


if __name__ == "__main__":
    main()
