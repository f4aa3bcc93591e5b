#!/usr/bin/env python3
"""InterCode (princeton-nlp/intercode, MIT) recorded runs -> $AGENT_BREAKER_CORPUS/intercode.jsonl.gz.

Files: data/results/{bash,ctf,python,sql}/**.json at the commit below (the multi-turn and ReAct
runs; the plan-and-solve files, the 1-turn SQL files and the 15 human SQL runs are left out).
SQL: one task in four (task_id % 4 == 0) of each 10-turn file, to keep the corpus balanced.

Events per run: `user` (the task), then per turn a `tool_call` (tool `bash` / `sql` / `python`,
args {"command": action}; ReAct thoughts go to `thought`; the `submit` action is tool `submit`)
and its `tool_result`. ok = the recorded `valid_action` (InterCode sets it to exit code == 0 for
bash, to "the query/code ran without an exception" for SQL/Python); the CTF 25-turn file records
none, so there ok = the observation is not an error message.
Outcome: success = summary.max_reward == 1.0 (InterCode's own success measure).
"""

import re

import orjson
from _common import Writer, blob, ls_tree

REPO = "princeton-nlp/intercode"
COMMIT = "c3e46d827cfc9d4c704ec078f7abf9f41e3191d8"
ERR = re.compile(r"^(error|traceback|bash: |.*command not found|.*no such file)", re.I | re.M)
REACT = re.compile(r"^\s*execute\[(.*)\]\s*$", re.S)


def pick(path):
    name = path.rsplit("/", 1)[-1]
    if "plan_solve" in name or "/human/" in path:
        return False
    if path.startswith("data/results/sql/") and ("_1_turns" in name or "-1_turns" in name):
        return False
    return name.endswith(".json")


def run_id(path):
    parts = path.split("/")
    env = parts[2]
    name = parts[-1][:-5]
    model = parts[3] if len(parts) > 4 else "gpt-4"
    if env == "python":  # both python files sit under gpt-3.5/; the model is in the name
        model = "gpt-4" if "gpt-4" in name else "gpt-3.5"
    variant = "react" if "_react_" in name else "multiturn"
    m = re.search(r"_(\d+)_turns", name)
    if m:
        variant += f"-{m.group(1)}t"
    if name.endswith("_handicap"):
        variant += "-handicap"
    fs = re.search(r"_fs_(\d)$", name)
    if fs:
        variant += f"/fs{fs.group(1)}"
    return f"intercode-{env}/{model}/{variant}"


def main():
    w = Writer("intercode")
    tool_of = {"bash": "bash", "ctf": "bash", "sql": "sql", "python": "python"}
    for sha, _size, path in ls_tree(REPO, COMMIT, "data/results"):
        if _size is None or not pick(path):  # None: blob absent from the snapshot (over 4 MiB)
            continue
        env = path.split("/")[2]
        prefix = run_id(path)
        data = orjson.loads(blob(REPO, sha))
        w.used(REPO, COMMIT, path, sha)
        for key, rec in data.items():
            if not isinstance(rec, dict) or "turn_history" not in rec:
                continue
            tid = rec.get("task_id", key)
            if env == "sql" and int(tid) % 4 != 0:
                continue
            th = rec["turn_history"]
            s = w.session(f"{prefix}/task{tid}")
            s.user(rec.get("query", ""))
            thoughts = th.get("thoughts") or []
            valid = th.get("valid_action")
            for i, act in enumerate(th.get("actions", [])):
                obs = th["observations"][i] if i < len(th.get("observations", [])) else None
                thought = thoughts[i] if i < len(thoughts) else None
                a = act if isinstance(act, str) else orjson.dumps(act).decode()
                m = REACT.match(a)
                if m:
                    a = m.group(1)
                if a.strip().lower().startswith("submit"):
                    tool, args = "submit", ({"flag": a.strip()[6:].strip()} if env == "ctf" else {})
                else:
                    tool, args = tool_of[env], {"command": a}
                c = s.call(tool, args, thought=thought)
                out = obs if isinstance(obs, str) or obs is None else orjson.dumps(obs).decode()
                if valid is not None and i < len(valid):
                    ok = bool(valid[i])
                else:
                    ok = not (out and ERR.search(out[:300]))
                s.result(tool, c["call_id"], ok, output=out or "")
            summ = rec.get("summary") or {}
            mr = summ.get("max_reward")
            s.done(
                None if mr is None else mr == 1.0, reward=mr, turns_taken=summ.get("turns_taken"), turns_max=summ.get("turns_max")
            )
    w.close()


if __name__ == "__main__":
    main()
