#!/usr/bin/env python3
"""tau2-bench (sierra-research/tau2-bench, MIT) simulation results -> $AGENT_BREAKER_CORPUS/tau2.jsonl.gz.

The repository's own result files are over the 4 MiB snapshot limit; these are the smaller
simulation files committed on the `feature/gym` branch and in pull requests (refs/pull/N/head)
of the same repository (each tree carries the MIT LICENSE). Simulations are de-duplicated by id.

Events: assistant text -> `assistant` (the agent's last text message, when no tool call follows it,
-> `final`); user-simulator text -> `user`; each agent tool call -> `tool_call` (args as emitted,
call_id the upstream id, input/output tokens and cost from the model call); each tool message
answering the agent -> `tool_result` with ok = not the recorded `error` flag. Tool calls the simulated
*user* makes on their own device (telecom domain) are outside the agent: they are folded into the next
`user` event as text. ts = the recorded ISO timestamps, as unix seconds.
Outcome: success = reward_info.reward == 1.0 (tau2's pass criterion); termination_reason kept.
"""

import ast
from datetime import datetime

import orjson
from _common import Writer, blob, cut

REPO = "sierra-research/tau2-bench"
G = ("refs/heads/feature/gym", "29510b1d0d47dbe502ada30079c642bd0d172ed9")
FILES = [  # (ref, commit, path, label)
    (*G, "src/experiments/model_training/results/gpt-4.1_airline_default_gpt-4.1_1trials.json", "gpt-4.1/airline"),
    (*G, "src/experiments/model_training/results/gpt-4.1_retail_defautl_gpt-4.1_1trials.json", "gpt-4.1/retail"),
    (*G, "src/experiments/model_training/results/gpt-4.1_telecom_default_gpt-4.1_1trials.json", "gpt-4.1/telecom"),
    (*G, "src/experiments/model_training/results/gpt-4.1_telecom_no-user_gpt-4.1_1trials.json", "gpt-4.1/telecom-solo"),
    (
        *G,
        "src/experiments/model_training/results/ft:gpt-4.1-2025-04-14:sierra:tau2-full-sft:BzrYdMNm_airline_default_gpt-4.1_1trials.json",
        "ft-gpt-4.1/airline",
    ),
    (
        *G,
        "src/experiments/model_training/results/ft:gpt-4.1-2025-04-14:sierra:tau2-full-sft:BzrYdMNm_retail_default_gpt-4.1_1trials.json",
        "ft-gpt-4.1/retail",
    ),
    (
        *G,
        "src/experiments/model_training/results/ft:gpt-4.1-2025-04-14:sierra:tau2-full-sft:BzrYdMNm_telecom_default_gpt-4.1_1trials.json",
        "ft-gpt-4.1/telecom",
    ),
    (
        *G,
        "src/experiments/model_training/results/ft:gpt-4.1-2025-04-14:sierra:tau2-full-sft:BzrYdMNm_telecom_no-user_gpt-4.1_1trials.json",
        "ft-gpt-4.1/telecom-solo",
    ),
    (
        *G,
        "src/experiments/eval/data/qwen2.5-7b-retries/ollama_chat/qwen2.5:7b_airline_default_gpt-4.1-2025-04-14_1trials.json",
        "qwen2.5-7b/airline",
    ),
    (
        *G,
        "data/exp/test_run_1/gpt-4.1-2025-04-14_telecom_no-user_gpt-4.1-2025-04-14_4trials_5tasks.json",
        "gpt-4.1/telecom-solo-4trials",
    ),
    (
        *G,
        "data/exp/test_run_tool_prompt/gpt-4.1_telecom_default_gpt-4.1-2025-04-14_1trials_1tasks.json",
        "gpt-4.1/telecom-toolprompt",
    ),
    (
        *G,
        "data/exp/test_run_tool_prompt/gpt-4.1_telecom_no-user_gpt-4.1-2025-04-14_1trials_1tasks.json",
        "gpt-4.1/telecom-solo-toolprompt",
    ),
    (
        "refs/pull/17/head",
        "4b2fea6ac12db5c20001d91dddd261dbab95b61e",
        "data/simulations/2025-08-10T02:44:06.496849_telecom_llm_agent_gpt-4o_user_simulator_gpt-4o.json",
        "gpt-4o/telecom",
    ),
    (
        "refs/pull/103/head",
        "07c6aaca2241884938a700504bf621f10b886d33",
        "judge_viewer/data/simulations/azure-airline-full.json",
        "gpt-4o-azure/airline",
    ),
    ("refs/pull/448/head", "fc5144a020f3d19ec096d9ed927f8f31ab6ccc0b", "results/whissle/airline_run1.json", "whissle/airline"),
    (
        "refs/pull/73/head",
        "bfe508e486bce8484fd02e67dfd4bdead3ef5d74",
        "web/leaderboard/public/submissions/claude-sonnet-4-5_aide-platform_2025-10-31/trajectories/claude-sonnet-4-5_airline_default_gpt4.1_1trials.json",
        "claude-sonnet-4-5-aide/airline",
    ),
    (
        "refs/pull/170/head",
        "c5b53db041925efd5133c960fc6f03a44c76c894",
        "src/experiments/tau2_trace/results/e2e_airline_baseline.json",
        "gpt-4.1-mini/airline-e2e",
    ),
    (
        "refs/pull/170/head",
        "c5b53db041925efd5133c960fc6f03a44c76c894",
        "src/experiments/tau2_trace/results/e2e_retail_baseline.json",
        "gpt-4.1-mini/retail-e2e",
    ),
    (
        "refs/pull/170/head",
        "c5b53db041925efd5133c960fc6f03a44c76c894",
        "src/experiments/tau2_trace/results/e2e_telecom_baseline.json",
        "gpt-4.1-mini/telecom-e2e",
    ),
    (
        "refs/pull/170/head",
        "c5b53db041925efd5133c960fc6f03a44c76c894",
        "src/experiments/tau2_trace/results/e2e_telecom_adversarial.json",
        "gpt-4.1-mini/telecom-adversarial-e2e",
    ),
]


def ts(s):
    if not s:
        return None
    try:
        return round(datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp(), 3)
    except ValueError:
        return None


def as_dict(x):
    if isinstance(x, dict) or x is None:
        return x
    try:
        return orjson.loads(x)
    except orjson.JSONDecodeError:
        return ast.literal_eval(x)


def convert_sim(w, sid, sim):
    s = w.session(sid)
    msgs = sim.get("messages") or []
    last_text = None  # the agent's last text message, when no tool call of the agent follows it
    for i, m in enumerate(msgs):
        if m["role"] == "assistant" and m.get("tool_calls"):
            last_text = None
        elif m["role"] == "assistant" and m.get("content"):
            last_text = i
    agent_calls = {}
    unnamed = []
    pending_user = []  # text of the simulated user's own tool use, folded into the next user event
    for i, m in enumerate(msgs):
        role, t = m["role"], ts(m.get("timestamp"))
        if role == "assistant":
            u = m.get("usage") or {}
            tok = {"input_tokens": u.get("prompt_tokens"), "output_tokens": u.get("completion_tokens")}
            cost = m.get("cost") or None
            if m.get("tool_calls"):
                for j, tc in enumerate(m["tool_calls"]):
                    args = tc.get("arguments")
                    if isinstance(args, str):
                        try:
                            args = orjson.loads(args)
                        except orjson.JSONDecodeError:
                            args = {"raw": args}
                    extra = tok if j == 0 else {}
                    ev = s.call(
                        tc["name"],
                        args,
                        call_id=tc.get("id"),
                        thought=m.get("content") if j == 0 else None,
                        ts=t,
                        cost_usd=cost if j == 0 else None,
                        **extra,
                    )
                    if tc.get("id"):
                        agent_calls[tc["id"]] = (tc["name"], ev["call_id"])
                    else:  # no upstream id: paired with the next tool message that has none either
                        unnamed.append((tc["name"], ev["call_id"]))
            elif m.get("content"):
                (s.final if i == last_text else s.assistant)(m["content"], ts=t, cost_usd=cost, **tok)
        elif role == "tool":
            mine = m.get("requestor", "assistant") == "assistant"
            if mine and (m.get("id") in agent_calls or (not m.get("id") and unnamed)):
                tool, cid = agent_calls[m["id"]] if m.get("id") else unnamed.pop(0)
                err = bool(m.get("error"))
                s.result(tool, cid, not err, output=m.get("content"), ts=t)
            else:
                pending_user.append(f"[tool result] {cut(m.get('content'), 500)}")
        elif role == "user":
            if m.get("tool_calls"):
                for tc in m["tool_calls"]:
                    pending_user.append(f"[user runs {tc['name']}({orjson.dumps(tc.get('arguments')).decode()})]")
            if m.get("content"):
                text = "\n".join(pending_user + [m["content"]])
                pending_user = []
                s.user(text, ts=t)
    if pending_user:
        s.user("\n".join(pending_user))
    ri = as_dict(sim.get("reward_info")) or {}
    r = ri.get("reward")
    s.done(
        None if r is None else float(r) == 1.0,
        reward=r,
        termination=sim.get("termination_reason"),
        task_id=sim.get("task_id"),
        trial=sim.get("trial"),
    )


def main():
    w = Writer("tau2")
    seen = set()
    for ref, commit, path, label in FILES:
        from _common import blob_sha

        sha = blob_sha(REPO, commit, path)
        d = orjson.loads(blob(REPO, sha))
        sims = d.get("simulations") or []
        n = 0
        for sim in sims:
            if sim["id"] in seen:
                continue
            seen.add(sim["id"])
            sid = f"tau2/{label}/task{sim['task_id']}/trial{sim.get('trial', 0)}"
            if sid in w.sessions:
                sid += f"/{sim['id'][:8]}"
            convert_sim(w, sid, sim)
            n += 1
        if n:
            w.used(REPO, commit, path, sha, note=f"{ref}; {n} simulations")
    w.close()


if __name__ == "__main__":
    main()
