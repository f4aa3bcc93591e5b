#!/usr/bin/env python3
"""Reflexion's ReAct agents on HotpotQA (noahshinn/reflexion, MIT) -> $AGENT_BREAKER_CORPUS/reflexion-hotpotqa.jsonl.gz.

Source: the printed trial logs hotpotqa_runs/root/ReAct/base/100_questions_5_trials.txt (plain ReAct,
gpt-3.5/text-davinci-003 era, 100 questions, failed questions re-run in each trial) and
hotpotqa_runs/root/ReAct/reflexion/100_questions_7_trials.txt (ReAct + Reflexion: the same questions
re-run with the agent's reflections on earlier failures in the prompt). Each trial lists its agents
under CORRECT / INCORRECT / HALTED (HALTED = step limit reached without an answer).
A run is one agent block (Question ... Correct answer); a block whose text is identical to one seen
in an earlier trial of the same file (a correct agent carried over, or a deterministic re-run) is
converted once, for the first trial it appears in.

Events: `user` (the question, with the reflections when present), per step a `tool_call`
(`search` / `lookup`, args {"arg": ...}) and its `tool_result`; Finish[...] -> `final`.
ok=false when the agent's action could not be parsed ("Invalid Action ...") or the docstore raised
("Could not find that page, please try again."); other observations are ok=true.
Outcome: success = listed under CORRECT; halted runs are recorded as such.
"""

import re

from _common import Writer, blob, blob_sha, react_emit, react_steps

REPO = "noahshinn/reflexion"
COMMIT = "218cf0ef1df84b05ce379dd4a8e47f17766733a0"
FILES = [
    ("hotpotqa_runs/root/ReAct/base/100_questions_5_trials.txt", "react"),
    ("hotpotqa_runs/root/ReAct/reflexion/100_questions_7_trials.txt", "react-reflexion"),
]
TRIAL = re.compile(r"^BEGIN TRIAL (\d+)$", re.M)
SECTION = re.compile(r"^-+ BEGIN (CORRECT|INCORRECT|HALTED) AGENTS -+$", re.M)
AGENT = re.compile(r"^Question: (.*?)^Correct answer: (.*?)$", re.S | re.M)


def main():
    w = Writer("reflexion-hotpotqa")
    for path, variant in FILES:
        sha = blob_sha(REPO, COMMIT, path)
        text = blob(REPO, sha).decode("utf-8", "replace")
        w.used(REPO, COMMIT, path, sha)
        qnum = {}
        seen = set()
        trials = list(TRIAL.finditer(text))
        for ti, tm in enumerate(trials):
            tend = trials[ti + 1].start() if ti + 1 < len(trials) else len(text)
            ttext = text[tm.end() : tend]
            secs = list(SECTION.finditer(ttext))
            for si, sm in enumerate(secs):
                send = secs[si + 1].start() if si + 1 < len(secs) else len(ttext)
                status = sm.group(1).lower()
                for am in AGENT.finditer(ttext[sm.end() : send]):
                    body, gold = am.group(1), am.group(2).strip()
                    if body in seen:
                        continue
                    seen.add(body)
                    prefix, steps = react_steps(body)
                    question = prefix.split("You have attempted to answer")[0].strip()
                    q = qnum.setdefault(question, len(qnum))
                    s = w.session(f"reflexion-hotpotqa/{variant}/q{q}/trial{tm.group(1)}")
                    s.user("Question: " + prefix.strip())
                    for st in steps:
                        react_emit(s, st, error_obs=("Could not find that page",))
                    s.done(status == "correct", status=status, gold=gold, trial=int(tm.group(1)))
    w.close()


if __name__ == "__main__":
    main()
