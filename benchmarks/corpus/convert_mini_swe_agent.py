#!/usr/bin/env python3
"""mini-swe-agent (SWE-agent/mini-swe-agent, MIT) DeepSeek runs on SWE-bench -> $AGENT_BREAKER_CORPUS/mini-swe-agent.jsonl.gz.

Source: output/<run>/<instance>/<instance>.traj.json committed in two pull requests of the repository
(refs/pull/816/head and refs/pull/814/head; both trees carry the MIT LICENSE.md). Identical
trajectory blobs appear in both pull requests; each is converted once (first listed run).

Events: the task (first user message) -> `user`; each assistant turn -> one `tool_call` per bash action
(tool `bash`, args {"command": ...}, call_id the upstream id, thought = the assistant text, tokens
from the recorded usage, ts = response.created); the tool message -> `tool_result` with
ok = (returncode == 0 and no exception recorded); an assistant turn without an action -> `assistant`;
harness feedback sent as a user message (format errors) -> `user`; the submitted patch -> `final`.
Outcome: success = instance in resolved_ids of the SWE-bench evaluation report committed beside
the run (deepseek__deepseek-chat.<run>.json); runs without a report have success null.
"""

import re

import orjson
from _common import Writer, blob, ls_tree

REPO = "SWE-agent/mini-swe-agent"
PRS = [
    ("refs/pull/816/head", "e5e0fbca1c60561bde25fa473b78717aa4b3f9ec"),
    ("refs/pull/814/head", "41a1e33ba94bbf7a0d2410dec46f99a8690113c0"),
]
BASH = re.compile(r"```(?:bash|sh)\s*\n(.*?)\n```", re.S)
RC = re.compile(r"<returncode>(-?\d+)</returncode>")


def reports(commit, tree):
    out = {}
    for sha, _size, path in tree:
        m = re.fullmatch(r"deepseek__deepseek-[a-z]+\.(.+)\.json", path)
        if m:
            d = orjson.loads(blob(REPO, sha))
            out[m.group(1)] = (set(d.get("resolved_ids", [])), set(d.get("completed_ids", [])), path, sha)
    return out


def convert(w, sid, traj):
    s = w.session(sid)
    msgs = traj.get("messages") or []
    pending = {}  # call_id -> tool
    first_user = True
    last_action = None
    for m in msgs:
        role = m.get("role")
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(c.get("text", "") for c in content if isinstance(c, dict))
        extra = m.get("extra") or {}
        if role == "system":
            continue
        if role == "user" and first_user:
            s.user(content)
            first_user = False
            continue
        if role == "assistant":
            resp = extra.get("response") or {}
            u = resp.get("usage") or {}
            tok = {"input_tokens": u.get("prompt_tokens"), "output_tokens": u.get("completion_tokens")}
            t = resp.get("created")
            calls = []
            for tc in m.get("tool_calls") or []:
                try:
                    args = orjson.loads(tc["function"]["arguments"])
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    args = {"raw": (tc.get("function") or {}).get("arguments")}
                calls.append((tc.get("id"), tc["function"]["name"], args))
            if not calls and not m.get("tool_calls"):
                acts = BASH.findall(content or "")
                if len(acts) == 1:
                    calls.append((None, "bash", {"command": acts[0]}))
            if not calls:
                s.assistant(content or "", ts=t, **tok)
                continue
            for j, (cid, name, args) in enumerate(calls):
                ev = s.call(name, args, call_id=cid, thought=content if j == 0 else None, ts=t, **(tok if j == 0 else {}))
                pending[ev["call_id"]] = name
                last_action = ev["call_id"]
            continue
        if role == "tool" or (
            role == "user" and content and content.lstrip().startswith("<returncode>") and last_action in pending
        ):
            cid = m.get("tool_call_id") or last_action
            tool = pending.pop(cid, "bash")
            rc = extra.get("returncode")
            if rc is None:
                mm = RC.search(content or "")
                rc = int(mm.group(1)) if mm else None
            exc = extra.get("exception_info") or ""
            ok = (rc == 0 or rc is None) and not exc
            out = extra.get("raw_output") if extra.get("raw_output") is not None else content
            s.result(tool, cid, ok, output=out, error=None if ok else (exc or out), ts=extra.get("timestamp"))
            continue
        if role == "exit":
            if content:
                s.final(content)
            continue
        if role == "user":
            s.user(content or "")
    return s


def main():
    w = Writer("mini-swe-agent")
    seen = set()
    for ref, commit in PRS:
        tree = ls_tree(REPO, commit)
        rep = reports(commit, tree)
        for run, (_r, _c, path, sha) in rep.items():
            w.used(REPO, commit, path, sha, note=f"{ref}; SWE-bench report for {run}")
        for sha, size, path in tree:
            m = re.fullmatch(r"output/([^/]+)/([^/]+)/\2\.traj\.json", path)
            if not m or size is None:
                continue
            if sha in seen:
                continue
            seen.add(sha)
            run, inst = m.groups()
            traj = orjson.loads(blob(REPO, sha))
            model = (((traj.get("info") or {}).get("config") or {}).get("model") or {}).get("model_name") or "deepseek"
            model = model.split("/")[-1]
            s = convert(w, f"mini-swe/{model}/{run}/{inst}", traj)
            w.used(REPO, commit, path, sha, note=ref)
            if run in rep:
                resolved, completed, _p, _s = rep[run]
                success = inst in resolved if inst in completed else None
            else:
                success = None
            info = traj.get("info") or {}
            s.done(
                success, exit_status=info.get("exit_status"), api_calls=(info.get("model_stats") or {}).get("api_calls"), run=run
            )
    w.close()


if __name__ == "__main__":
    main()
