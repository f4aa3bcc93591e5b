#!/usr/bin/env python3
"""MedAgentBench runs in AgentBench (THUDM/AgentBench, Apache-2.0) -> $AGENT_BREAKER_CORPUS/medagentbench.jsonl.gz.

Source: outputs/Jan17v1/<model>/medagentbench-std/runs.jsonl (+ overall.json for the graded
outcome) committed in pull request 171 of the repository (refs/pull/171/head; the tree carries
the Apache-2.0 LICENSE). Five models, 100 FHIR tasks each (gemini-2.0 has no overall.json).

Events: the first user message (instructions + task) -> `user`; each agent message "GET url" /
"POST url\n{payload}" -> `tool_call` (tool `fhir_get` / `fhir_post`, args {"url", "payload"}) and the
next user message -> its `tool_result` (ok=false when it reports an error instead of "Here is the
response" / "POST request accepted"); "FINISH([...])" -> `final`; any other agent text -> `assistant`.
Outcome: success = overall.json status completedCorrect.
"""

import re

import orjson
from _common import Writer, blob, ls_tree

REPO = "THUDM/AgentBench"
REF, COMMIT = "refs/pull/171/head", "624acfa0e7ea9abfba19a56143da1ff47648db7b"
OK = ("Here is the response from the GET request", "POST request accepted")


def main():
    w = Writer("medagentbench")
    tree = {p: sha for sha, _s, p in ls_tree(REPO, COMMIT, "outputs")}
    for path, sha in sorted(tree.items()):
        m = re.fullmatch(r"outputs/Jan17v1/([^/]+)/medagentbench-std/runs\.jsonl", path)
        if not m:
            continue
        model = m.group(1)
        w.used(REPO, COMMIT, path, sha, note=REF)
        graded = {}
        ov = path.replace("runs.jsonl", "overall.json")
        if ov in tree:
            w.used(REPO, COMMIT, ov, tree[ov], note=REF)
            for r in orjson.loads(blob(REPO, tree[ov]))["custom"]["raw_results"]:
                graded[r["index"]] = r["status"]
        for line in blob(REPO, sha).splitlines():
            if not line.strip():
                continue
            row = orjson.loads(line)
            out = row.get("output") or {}
            idx = row.get("index", out.get("index"))
            hist = out.get("history") or []
            s = w.session(f"medagentbench/{model}/task{idx}")
            pending = None
            for i, h in enumerate(hist):
                c = h.get("content") or ""
                if h["role"] == "user":
                    if i == 0:
                        s.user(c)
                    elif pending:
                        ok = c.startswith(OK)
                        s.result(pending[0], pending[1], ok, output=c)
                        pending = None
                    else:
                        s.user(c)
                    continue
                t = c.strip()
                if t.startswith("GET ") or t.startswith("POST "):
                    verb, _, rest = t.partition(" ")
                    url, _, payload = rest.partition("\n")
                    args = {"url": url.strip()}
                    if payload.strip():
                        try:
                            args["payload"] = orjson.loads(payload)
                        except orjson.JSONDecodeError:
                            args["payload"] = payload.strip()
                    tool = "fhir_" + verb.lower()
                    ev = s.call(tool, args)
                    pending = (tool, ev["call_id"])
                elif t.startswith("FINISH("):
                    s.final(t)
                else:
                    s.assistant(c)
            st = graded.get(idx)
            s.done(None if st is None else st == "completedCorrect", status=st or out.get("status"))
    w.close()


if __name__ == "__main__":
    main()
