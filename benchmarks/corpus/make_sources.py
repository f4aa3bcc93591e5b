#!/usr/bin/env python3
"""Write $AGENT_BREAKER_CORPUS/SOURCES.md from the converters' records and the labels (stdlib + orjson).

    python benchmarks/corpus/make_sources.py

Reads $AGENT_BREAKER_CORPUS/<source>.files.jsonl (repository, commit, path, blob of every file used),
<source>.runs.jsonl, <source>.jsonl.gz (event counts) and labels.jsonl.
"""

import gzip
import os
from collections import Counter, defaultdict

import orjson
from _common import EVAL

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LICENSE = {
    "princeton-nlp/intercode": "MIT, Copyright (c) 2023 Princeton Natural Language Processing (`LICENSE.md`)",
    "sierra-research/tau2-bench": "MIT, Copyright (c) 2025 Sierra Research (`LICENSE`, the same blob f0323a3 at every commit "
    "used)",
    "sierra-research/tau-bench": "MIT, Copyright (c) 2024 Sierra (`LICENSE`)",
    "SWE-agent/mini-swe-agent": "MIT, Copyright (c) 2025 Kilian A. Lieret and Carlos E. Jimenez (`LICENSE.md`, the same blob "
    "503821c at both commits)",
    "ysymyth/ReAct": "MIT, Copyright (c) 2023 Shunyu Yao (`LICENSE`)",
    "noahshinn/reflexion": "MIT, Copyright (c) 2023 Noah Shinn (`LICENSE`)",
    "All-Hands-AI/OpenHands": "MIT for everything outside enterprise/ (`LICENSE`; the files used are outside it)",
    "OpenHands/benchmarks": "MIT, Copyright (c) 2025 All Hands AI (`LICENSE`)",
    # claude-code-heldout: MIT stated in README.md (no LICENSE file); the wording is in claude-code-heldout.files.jsonl
    **{
        r: "MIT, stated in README.md (no LICENSE file; see claude-code-heldout.files.jsonl)"
        for r in (
            "JoshuaOliphant/ClimateHome",
            "JoshuaOliphant/mochi_donut",
            "Sstobo/agent-tree-package",
            "ThomasJMcGovern/Golfgod_v1",
            "mushfoo/puka",
            "njdamstra/claude-code-config",
            "odgsully/adhs-working",
            "pleelapr/a-sdlc",
            "stevengonsalvez/claudecode-bootstrap",
            "superdisco-agents/moai-flow",
        )
    },
    "THUDM/AgentBench": "Apache-2.0 (`LICENSE`, the plain Apache License 2.0 text; no copyright line or NOTICE file in the "
    "repository)",
}

ABOUT = {
    "intercode": """InterCode (Yang et al., 2023): LLM agents in interactive Bash, SQL (Spider), Python (MBPP) and CTF
environments, up to 10 (Python: 7) turns. The multi-turn and ReAct result files of the repository:
bash (8 models x 4 file-system setups), SQL (10-turn runs of 7 models, with and without the schema
"handicap"; one task in four, task_id % 4 == 0), Python (gpt-3.5, gpt-4), CTF (gpt-4). Plan-and-solve
files, 1-turn SQL files and the 15 human SQL runs are left out; `ic_bash_multiturn_gpt-3.5_10_turns_fs_2.json`
is over the 4 MiB snapshot limit and absent.
ok = the recorded `valid_action` (InterCode sets it to exit code == 0 for bash and to "ran without an
exception" for SQL / Python); the 25-turn CTF file records none, so there ok = the observation is not an
error message. Outcome: success = summary.max_reward == 1.0 (InterCode's own success rate).""",
    "tau2": """tau2-bench: customer-service agents (airline, retail, telecom; telecom also in "solo" mode without a
user simulator) with an LLM user simulator. The repository's own result files are over the 4 MiB snapshot
limit; these are the smaller simulation files committed on its `feature/gym` branch (Sierra's fine-tuning
experiments: gpt-4.1, a fine-tuned gpt-4.1, qwen2.5-7b) and in pull requests (refs/pull/N/head: gpt-4o,
"whissle", claude-sonnet-4-5 "aide-platform", gpt-4.1-mini). Simulations de-duplicated by id.
ok = not the recorded `error` flag of the tool message. Tool calls the simulated user makes on its own
phone (telecom) are folded into the next `user` event as text. ts = the recorded timestamps.
Outcome: success = reward_info.reward == 1.0 (tau2's pass criterion).""",
    "tau-bench": """tau-bench: grok-3 as the retail agent and as the user simulator, 115 tasks, from pull request 68 (a
run with injected "503 Service Unavailable" tool failures). Not the gpt-4o airline file already in
tests/traces; the other historical_trajectories files are over the 4 MiB snapshot limit and absent.
ok = the tool did not answer "Error: ...". Outcome: this run grades rewards in [0, 1] and never reaches
1.0, so no pass/fail is derived (success null; the reward is in tau-bench.runs.jsonl): no "good" runs.""",
    "mini-swe-agent": """mini-swe-agent with DeepSeek (deepseek-chat, deepseek-reasoner) on SWE-bench Lite (the first 100
test instances; the 23 dev instances, several runs), from pull requests 816 and 814
(output/<run>/<instance>/<instance>.traj.json; trajectories committed in both pull requests are
converted once). ok = returncode == 0 and no exception recorded (timeouts are failures).
Outcome: success = the instance is in resolved_ids of the SWE-bench report committed with the run
(deepseek__deepseek-chat.<run>.json); runs without a report (deepseek_lite_dev, deepseek_reasoner_dev)
have success null.""",
    "react-fever": """ReAct (Yao et al., 2023) with text-davinci-002 on 500 FEVER claims: the printed output of the
500-episode cell of FEVER.ipynb (at most 7 steps). Tools `search` / `lookup`; Finish[...] -> `final`.
ok=false only when the environment answered "Invalid action: ..." (tool `invalid`). Outcome: success =
the logged reward == 1 (label exact match).""",
    "reflexion-hotpotqa": """Reflexion (Shinn et al., 2023): ReAct agents on 100 HotpotQA questions, plain ReAct re-run
over 5 trials and ReAct + Reflexion over 7 trials (reflections on earlier failures in the prompt), from the printed trial
logs. An agent block whose text already appeared in an earlier trial of the same file is converted once.
ok=false when the action could not be parsed or the docstore raised ("Could not find that page, please
try again."). Outcome: success = listed under CORRECT (HALTED = step limit reached).""",
    "openhands": """OpenHands coding sessions on repository issues, with shell commands and their exit codes, file
edits (str_replace_editor) and the agent's closing message (`finish` -> `final`): CodeActAgent v0.15 +
claude-3-5-sonnet on 50 SWE-bench Verified instances (All-Hands-AI/OpenHands 4ce8594, llm_completions; the
same run as shared/traces/real-openhands-codeact.jsonl), CodeActAgent + llama-4-maverick on 3 Multi-SWE-bench
ponyc instances (the example output.jsonl; also in shared/traces/real-openhands.jsonl), and 29
software-agent-sdk conversations on SWE-bench instances (OpenHands/benchmarks, workspace/conversations,
committed and removed again in September 2025). ok = exit code == 0 where recorded (`exit_code` in the
result), else not an error. Outputs and finals cut head + tail (980 + marker + the end). Outcome: SWE-bench
Verified resolved (output.swebench_eval.md) for the first 50; success null for the others.""",
    "claude-code-heldout": """Held-out Claude Code sessions: the `claude-code-hooks` Stop-hook transcripts (`logs/chat.json`)
committed to 10 repositories outside the tuning set of tests/traces/real-claude-code.SOURCES.md; every version
under 4 MiB, each line once (from the largest version holding it). The last assistant text of each turn is a
`final`; ok = not is_error. Licence: MIT stated in each README (no LICENSE file). No outcome: success null.""",
    "medagentbench": """MedAgentBench inside AgentBench: gpt-4o, gpt-4o-mini, deepseek-v3, llama-3.3, gemini-2.0 on 100 FHIR
tasks each (GET / POST against a FHIR server, then FINISH), from pull request 171. Short runs (0-3 tool
calls): mostly a check that good runs are left alone. ok = the reply is "Here is the response ..." /
"POST request accepted ..." (not an error). Outcome: success = overall.json status completedCorrect
(gemini-2.0 has no overall.json: success null).""",
}


def main():
    with open(os.path.join(EVAL, "labels.jsonl"), "rb") as f:
        labels = [orjson.loads(line) for line in f]
    by_src = defaultdict(Counter)
    for lab in labels:
        c = by_src[lab["source"]]
        c["runs"] += 1
        c[lab["kind"]] += 1
        c["holdout"] += lab["split"] == "holdout"
        if lab["split"] == "holdout":
            c["holdout_" + lab["kind"]] += 1
        c["clause_" + lab["clause"].split(":")[0]] += 1
    out = []
    out.append("""# Evaluation corpus of real agent runs (labelled, with a held-out split)

**Holdout rule.** A session is in the *holdout* split when
`int(hashlib.sha256(session_id.encode()).hexdigest(), 16) % 10 < 3` (about 30 %), else in *dev*.
Holdout sessions must never be used to tune a detector (thresholds, rules, configs, tests): tune on
`--split dev` and run `--split holdout` only to report. The split is in `labels.jsonl` (`split`).

Public agent runs from permissively licensed GitHub repositories (MIT, Apache-2.0), converted to the trace
format of `shared/spec/traces.md` by `benchmarks/corpus/convert_<source>.py` (reading the fetched
repository snapshots), labelled by `benchmarks/corpus/label.py` under the written rule of
`benchmarks/corpus/LABELS.md`, scored by `python -m benchmarks.bench_detection`. None of these runs is
in the older `tests/traces/real-*` files (other files of the same repositories at most). Tool output,
thoughts and texts are cut to 2,000 characters (`...[+N chars]`), tool arguments to 4,000.

Files: `<source>.jsonl.gz` (the trace; `zcat X.jsonl.gz > X.jsonl` for `agent-breaker replay X.jsonl`),
`<source>.runs.jsonl` (each session's recorded outcome: `success` true / false / null, reward, status),
`<source>.files.jsonl` (every upstream file used: repository, commit, path, blob), `labels.jsonl`
(session, source, kind loop | good | other, loop_start, split, the clause of the rule that fired, success),
`labels-seen.jsonl` (the older `tests/traces/real-*` runs labelled by the same rule, split "seen"),
`LICENSES/<owner>__<repo>.LICENSE` (the upstream licence texts).

Files taken from pull-request refs (`refs/pull/N/head`) were contributed to the repository under its
licence (GitHub Terms of Service, D.6: content added to a repository carrying a licence notice is
licensed under that licence); each of those trees carries the licence file named below.
""")
    tot = Counter()
    rows = []
    for src in sorted(by_src):
        c = by_src[src]
        ev = 0
        with gzip.open(os.path.join(EVAL, f"{src}.jsonl.gz"), "rb") as f:
            for _ in f:
                ev += 1
        tot.update(
            {"runs": c["runs"], "events": ev, "loop": c["loop"], "good": c["good"], "other": c["other"], "holdout": c["holdout"]}
        )
        rows.append(f"| {src} | {c['runs']} | {ev} | {c['loop']} | {c['good']} | {c['other']} | {c['holdout']} |")
    out.append("| source | runs | events | loops | good | other | holdout |\n|---|---|---|---|---|---|---|")
    out += rows
    out.append(
        f"| **total** | {tot['runs']} | {tot['events']} | {tot['loop']} | {tot['good']} | {tot['other']} | {tot['holdout']} |\n"
    )
    for src in sorted(by_src):
        c = by_src[src]
        with open(os.path.join(EVAL, f"{src}.files.jsonl"), "rb") as fh:
            files = [orjson.loads(line) for line in fh]
        repos = sorted({f["repo"] for f in files})
        out.append(f"## {src}\n")
        out.append(ABOUT.get(src, "") + "\n")
        for repo in repos:
            fr = [f for f in files if f["repo"] == repo]
            commits = []
            for f in fr:
                ref = (f.get("note") or "").split(";")[0]
                key = (f["commit"], ref if ref.startswith("refs/") else "")
                if key not in commits:
                    commits.append(key)
            out.append(f"- repository: https://github.com/{repo}")
            out.append("- commit: " + ", ".join(f"{c}" + (f" ({r})" if r else "") for c, r in commits))
            out.append(f"- license: {LICENSE.get(repo, '?')}; text in `LICENSES/{repo.replace('/', '__')}.LICENSE`")
        clauses = ", ".join(f"{k[7:]} {v}" for k, v in sorted(c.items()) if k.startswith("clause_"))
        out.append(
            f"- runs: {c['runs']}, loops: {c['loop']}, good: {c['good']}, other: {c['other']}; "
            f"holdout: {c['holdout']} (loops {c['holdout_loop']}, good {c['holdout_good']}, other {c['holdout_other']}); "
            f"clauses: {clauses}"
        )
        out.append(f"- files (path, blob): {len(files)}")
        for f in files:
            note = f" - {f['note']}" if f.get("note") and not f["note"].startswith("refs/") else ""
            ref = (f.get("note") or "").split(";")[0]
            at = f" @ {f['commit'][:10]}" if len({x["commit"] for x in files}) > 1 else ""
            out.append(f"  - `{f['path']}` ({f['blob']}){at}{note if note else ''}")
        out.append("")
    with open(os.path.join(EVAL, "SOURCES.md"), "w") as fh:
        fh.write("\n".join(out) + "\n")
    print(f"wrote {os.path.join(EVAL, 'SOURCES.md')}: {tot}")


if __name__ == "__main__":
    main()
