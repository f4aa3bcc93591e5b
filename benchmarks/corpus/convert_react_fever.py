#!/usr/bin/env python3
"""ReAct on FEVER (ysymyth/ReAct, MIT) -> $AGENT_BREAKER_CORPUS/react-fever.jsonl.gz.

Source: the printed output of the 500-episode cell of FEVER.ipynb (text-davinci-002, at most 7
steps). Each episode: `user` (the claim), then per step a `tool_call` (tool `search` / `lookup`,
args {"arg": ...}, thought = the Thought line) and its `tool_result`; Finish[...] accepted by the
environment -> `final`. An action the environment answered with "Invalid action: ..." is tool
`invalid` with ok=false (the environment refused it); every other observation is ok=true (the
Wikipedia tool answered, even "Could not find ..." or "No more results.").
Outcome: success = the logged reward == 1 (FEVER label exact match).
"""

import ast
import re

import orjson
from _common import Writer, blob, blob_sha, react_emit, react_steps

REPO = "ysymyth/ReAct"
COMMIT = "6bdb3a1fd38b8188fc7ba4102969fe483df8fdc9"
PATH = "FEVER.ipynb"
EP = re.compile(r"^(\d+) (Claim: .*?)\n\n\{('steps'.*?)\} \n", re.S | re.M)


def main():
    w = Writer("react-fever")
    sha = blob_sha(REPO, COMMIT, PATH)
    nb = orjson.loads(blob(REPO, sha))
    cell = max(nb["cells"], key=lambda c: sum(len("".join(o.get("text", []))) for o in c.get("outputs", [])))
    text = "".join("".join(o.get("text", [])) for o in cell["outputs"])
    w.used(REPO, COMMIT, PATH, sha, note="outputs of the 500-episode ReAct cell")
    for m in EP.finditer(text):
        idx, body, info = m.group(1), m.group(2), ast.literal_eval("{" + m.group(3) + "}")
        sid = f"react-fever/text-davinci-002/q{idx}"
        if sid in w.sessions:
            continue
        s = w.session(sid)
        prefix, steps = react_steps(body)
        s.user(prefix.strip())
        for st in steps:
            react_emit(s, st)
        s.done(
            info.get("reward") == 1,
            reward=info.get("reward"),
            steps=info.get("steps"),
            answer=info.get("answer"),
            gt_answer=info.get("gt_answer"),
        )
    w.close()


if __name__ == "__main__":
    main()
