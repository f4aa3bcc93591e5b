#!/usr/bin/env python3
"""tau-bench (sierra-research/tau-bench, MIT): grok-3 on retail -> $AGENT_BREAKER_CORPUS/tau-bench.jsonl.gz.

Source: tau_bench/tool-calling-grok-3-0.0_range_0--1_user-grok-3-llm_0921131646.json committed in
pull request 68 of the repository (refs/pull/68/head; the tree carries the MIT LICENSE). This is not
the historical_trajectories/gpt-4o-airline.json already in tests/traces (the other historical
trajectory files are over the 4 MiB snapshot limit and absent).

Events: OpenAI-format messages; user -> `user`; assistant text -> `assistant` (the last text with no
tool call after it -> `final`); each tool call -> `tool_call` (args parsed from the JSON string,
call_id the upstream id, `#n` appended when an id repeats); each tool message -> `tool_result` with
ok = the tool did not answer "Error: ..." (tau-bench tools report failures that way).
Outcome: this pull request's run reports a graded reward in [0, 1] and never 1.0, so no pass/fail
is derived: success is null and the reward is kept.
"""

import orjson
from _common import Writer, blob, blob_sha

REPO = "sierra-research/tau-bench"
REF, COMMIT = "refs/pull/68/head", "33f79e758d5ac350903db78b467ab70527697f5a"
PATH = "tau_bench/tool-calling-grok-3-0.0_range_0--1_user-grok-3-llm_0921131646.json"


def main():
    w = Writer("tau-bench")
    sha = blob_sha(REPO, COMMIT, PATH)
    w.used(REPO, COMMIT, PATH, sha, note=REF)
    for run in orjson.loads(blob(REPO, sha)):
        s = w.session(f"tau-bench/grok-3/retail/task{run['task_id']}/trial{run.get('trial', 0)}")
        traj = run.get("traj") or []
        last_text = None
        for i, m in enumerate(traj):
            if m.get("role") == "assistant" and m.get("tool_calls"):
                last_text = None
            elif m.get("role") == "assistant" and m.get("content"):
                last_text = i
        ids = {}
        names = {}
        for i, m in enumerate(traj):
            role = m.get("role")
            if role == "system":
                continue
            if role == "user":
                s.user(m.get("content") or "")
            elif role == "assistant":
                tcs = m.get("tool_calls") or []
                if not tcs:
                    if m.get("content"):
                        (s.final if i == last_text else s.assistant)(m["content"])
                    continue
                for j, tc in enumerate(tcs):
                    fn = tc.get("function") or {}
                    try:
                        args = orjson.loads(fn.get("arguments") or "{}")
                    except orjson.JSONDecodeError:
                        args = {"raw": fn.get("arguments")}
                    cid = tc.get("id") or f"c{s.calls + 1}"
                    ids[cid] = ids.get(cid, 0) + 1
                    uid = cid if ids[cid] == 1 else f"{cid}#{ids[cid]}"
                    names[cid] = (fn.get("name"), uid)
                    s.call(fn.get("name"), args, call_id=uid, thought=m.get("content") if j == 0 else None)
            elif role == "tool":
                name, uid = names.get(m.get("tool_call_id"), (m.get("name"), m.get("tool_call_id") or None))
                out = m.get("content") or ""
                s.result(name, uid, not out.startswith("Error"), output=out)
        info = run.get("info") or {}
        s.done(None, reward=run.get("reward"), error=info.get("error"))
    w.close()


if __name__ == "__main__":
    main()
