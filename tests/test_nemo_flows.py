"""The Colang 2.x flows, driven in process through the real NeMo runtime."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil

import pytest
from conftest import CALL_ERROR

from agent_breaker.events import InvalidEventError

pytest.importorskip("nemoguardrails")

from agent_breaker.actions import ENGINE_PARAM
from agent_breaker.configs import ROOT, config_path
from nemoguardrails import LLMRails, RailsConfig

KEY = "k1:" + "ab" * 32


@pytest.fixture(autouse=True)
def receipt_key(monkeypatch):
    monkeypatch.setenv("AGENT_BREAKER_RECEIPT_KEYS", KEY)


def make_rails(name: str = "agent_breaker") -> LLMRails:
    return LLMRails(RailsConfig.from_path(str(config_path(name))))


class Session:
    """One live Colang state; one event per step, as the events endpoint does."""

    def __init__(self, rails: LLMRails) -> None:
        self.rails = rails
        self.state = None

    def send(self, event: dict) -> list[dict]:
        out, self.state = asyncio.run(self.rails.process_events_async([event], self.state))
        return out

    def verdict(self, event: dict) -> dict:
        [v] = [e for e in self.send(event) if e["type"].endswith("Verdict")]
        return v


def tool_call(i: int, tool: str = "run_sql", args: dict | None = None, **kw) -> dict:
    return {
        "type": "ToolCallRequested",
        "session_id": "s1",
        "call_id": f"c{i}",
        "tool_name": tool,
        "tool_args": args if args is not None else {"q": "SELECT 1"},
        **kw,
    }


def tool_result(i: int, tool: str = "run_sql", ok: bool = False, **kw) -> dict:
    return {"type": "ToolResultReceived", "session_id": "s1", "call_id": f"c{i}", "tool_name": tool, "ok": ok, **kw}


@pytest.fixture(scope="module")
def rails() -> LLMRails:
    mp = pytest.MonkeyPatch()
    mp.setenv("AGENT_BREAKER_RECEIPT_KEYS", KEY)
    try:
        return make_rails()
    finally:
        mp.undo()


def test_a_runaway_tool_loop_gets_a_warning_then_a_blocking_tool_call_verdict(rails, caplog):
    s = Session(rails)
    for i in range(3):
        assert s.verdict(tool_call(i))["allowed"] is True
        assert s.verdict(tool_result(i, error=CALL_ERROR))["accepted"] is True
    with caplog.at_level(logging.WARNING, logger="agent_breaker.incidents"):
        warned = s.verdict(tool_call(3))
        assert s.verdict(tool_result(3, error=CALL_ERROR))["accepted"] is True  # the warned call ran
        v = s.verdict(tool_call(4))
    # the first trip of a loop heuristic is a warning: the call may run, the agent is told
    assert warned["type"] == "ToolCallVerdict" and warned["call_id"] == "c3"
    assert (warned["allowed"], warned["heuristic"], warned["severity"]) == (True, "identical_failure", "warn")
    assert warned["observation"]["warning"] == "IDENTICAL_FAILURE" and "error" not in warned["observation"]
    assert warned["advisory"] is True, warned
    # the next trip, with no progress in between, cuts
    assert v["type"] == "ToolCallVerdict" and v["call_id"] == "c4"
    assert (v["allowed"], v["heuristic"], v["severity"]) == (False, "identical_failure", "block")
    assert v["observation"]["error"] == "IDENTICAL_FAILURE" and v["advisory"] is False
    # the flow called the incident action: one JSON line for the warning, one for the trip
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "agent_breaker.incidents"]
    assert [(x["heuristic"], x["severity"], x["advisory"]) for x in lines] == [
        ("identical_failure", "warn", True),
        ("identical_failure", "block", False),
    ]


def test_a_mutating_success_gets_a_receipt_and_backs_the_final_answer():
    s = Session(make_rails())
    s.verdict(tool_call(1, "wire_transfer", {"to": "B", "amount": 5}, mutating=True))
    r = s.verdict(tool_result(1, "wire_transfer", ok=True, result={"tx_id": "TX-80276"}))
    assert r["type"] == "ToolResultVerdict" and r["receipt"]["tool"] == "wire_transfer"
    ok = s.verdict({"type": "FinalAnswerProposed", "session_id": "s1", "text": "Transferred. Reference: TX-80276."})
    assert (ok["type"], ok["accepted"], ok["heuristic"]) == ("FinalAnswerVerdict", True, None)
    bad = s.verdict({"type": "FinalAnswerProposed", "session_id": "s1", "text": "Transferred. Reference: TX-99482."})
    assert (bad["accepted"], bad["heuristic"]) == (False, "unverified_claim")


def test_assistant_turns_that_echo_get_a_warning_then_a_blocking_turn_verdict():
    s = Session(make_rails())
    texts = [
        "To proceed with the refund, I first need to confirm which account you mean.",
        "I need to confirm which account you mean before I can proceed with the refund.",
        "Before I can proceed with the refund I need to confirm which account you mean.",
        "I need to confirm which account you mean so that I can proceed with the refund.",
    ]
    verdicts = [s.verdict({"type": "AssistantTurn", "session_id": "s1", "text": t}) for t in texts]
    assert [v["type"] for v in verdicts] == ["TurnVerdict"] * 4
    assert [v["heuristic"] for v in verdicts] == [None, None, "semantic_echo", "semantic_echo"]
    assert [v["allowed"] for v in verdicts] == [True, True, True, False]
    assert verdicts[2]["severity"] == "warn" and verdicts[3]["severity"] == "block"


def test_a_user_turn_restarts_loop_streaks():
    s = Session(make_rails())
    for i in range(3):
        s.verdict(tool_call(i))
        s.verdict(tool_result(i, error=CALL_ERROR))
    v = s.verdict({"type": "UserTurn", "session_id": "s1", "text": "The table is back, try again."})
    assert (v["type"], v["allowed"]) == ("TurnVerdict", True)
    assert s.verdict(tool_call(9))["allowed"] is True


def test_observe_config_reports_would_trip_verdicts_and_blocks_nothing():
    s = Session(make_rails("agent_breaker_observe"))
    for i in range(3):
        s.verdict(tool_call(i))
        s.verdict(tool_result(i, error=CALL_ERROR))
    v = s.verdict(tool_call(3))
    assert (v["allowed"], v["heuristic"], v["severity"]) == (True, "identical_failure", "warn")


def test_a_bad_event_gets_a_blocking_verdict_not_a_crash(rails):
    s = Session(rails)
    v = s.verdict({"type": "ToolCallRequested", "session_id": "s1", "call_id": "x", "tool_args": {"q": 1}})
    assert (v["allowed"], v["heuristic"]) == (False, "invalid_event")
    assert "tool" in v["reason"]


def test_every_flow_fails_closed_when_its_action_errors():
    r = make_rails()
    engine = r.runtime.registered_action_params[ENGINE_PARAM]

    def broken(*args, **kwargs):
        raise RuntimeError("storage down")

    for name in ("check_tool_call", "record_tool_result", "record_assistant", "record_user", "verify_final"):
        setattr(engine, name, broken)
    s = Session(r)
    call = s.verdict(tool_call(1))
    assert (call["type"], call["allowed"], call["heuristic"], call["call_id"]) == ("ToolCallVerdict", False, "guard_error", "c1")
    assert call["observation"]["error"] == "GUARD_ERROR"
    res = s.verdict(tool_result(1))
    assert (res["type"], res["accepted"], res["heuristic"]) == ("ToolResultVerdict", False, "guard_error")
    turn = s.verdict({"type": "AssistantTurn", "session_id": "s1", "text": "hi"})
    assert (turn["allowed"], turn["heuristic"]) == (False, "guard_error")
    usr = s.verdict({"type": "UserTurn", "session_id": "s1", "text": "hi"})
    assert (usr["allowed"], usr["heuristic"]) == (False, "guard_error")
    fin = s.verdict({"type": "FinalAnswerProposed", "session_id": "s1", "text": "done"})
    assert (fin["accepted"], fin["heuristic"]) == (False, "guard_error")


def test_the_context_path_fails_closed_with_a_json_reply_when_its_action_errors():
    r = make_rails()
    engine = r.runtime.registered_action_params[ENGINE_PARAM]

    def broken(*args, **kwargs):
        raise RuntimeError("storage down")

    engine.check_tool_call = broken
    events = [{"type": "ToolCallRequested", "session_id": "ctx1", "call_id": "c1", "tool_name": "t", "tool_args": {}}]
    reply = asyncio.run(r.generate_async(messages=[{"role": "context", "content": {"agent_breaker_events": events}}]))
    assert json.loads(reply["content"]) == {"events": [], "error": "guard_error"}


def test_an_event_batched_behind_another_of_its_kind_is_refused_not_dropped(rails):
    batch = [tool_call(1, session_id="batch"), tool_call(2, "other", session_id="batch")]
    out, _ = asyncio.run(rails.process_events_async(batch, None))
    verdicts = {v["call_id"]: v for v in out if v["type"] == "ToolCallVerdict"}
    assert set(verdicts) == {"c1", "c2"}
    assert verdicts["c1"]["allowed"] is True
    assert (verdicts["c2"]["allowed"], verdicts["c2"]["heuristic"]) == (False, "invalid_event")
    assert "one event per process_events_async call" in verdicts["c2"]["reason"]


def test_in_process_an_unknown_event_type_raises_and_a_batch_is_sent_one_event_at_a_time(rails):
    from agent_breaker.sessions import GuardSessions

    guards = GuardSessions(rails)
    with pytest.raises(InvalidEventError, match="did you mean 'ToolCallRequested'"):
        asyncio.run(guards.send({**tool_call(1, session_id="typo"), "type": "ToolCallRequest"}))
    batch = [tool_call(1, session_id="batch-ok"), tool_call(2, "other", session_id="batch-ok")]
    verdicts = asyncio.run(guards.send_all(batch))
    assert [(v["call_id"], v["allowed"]) for v in verdicts] == [("c1", True), ("c2", True)]


def test_the_flows_keep_a_flat_number_of_flow_instances_over_two_rounds_of_each_guard_loop(rails):
    # 450 calls and 450 results: each of their guard loops runs two whole rounds of 200
    # events and starts a third, where a leak per event or per round would show
    s = Session(rails)
    counts = []
    for i in range(450):
        s.send(tool_call(i, "read_doc", {"doc": i}))
        s.send(tool_result(i, "read_doc", ok=True, result={"text": i}))
        if (i + 1) % 50 == 0:
            counts.append(len(s.state.flow_states))
    # a guard loop's round that just ended may linger a few seconds before NeMo drops it:
    # at most one extra instance per guard loop, never one per event
    assert max(counts) - min(counts) <= 7, counts
    assert max(counts) < 40, counts


def test_the_chat_line_flow_answers_allowed_or_blocked():
    s = Session(make_rails())

    def say(text):
        out = s.send({"type": "UtteranceUserActionFinished", "final_transcript": text})
        said = [e for e in out if e["type"] == "StartUtteranceBotAction"]
        for e in said:  # as the chat CLI does: the bot finished saying it
            s.send(
                {
                    "type": "UtteranceBotActionFinished",
                    "action_uid": e["action_uid"],
                    "final_script": e["script"],
                    "is_success": True,
                }
            )
        return [e["script"] for e in said]

    assert say('tool run_sql {"q": 1}') == ["ALLOWED"]
    assert say("result run_sql error relation orders does not exist") == ["ALLOWED"]
    for _ in range(2):
        say('tool run_sql {"q": 1}')
        say("result run_sql error relation orders does not exist")
    # the fourth try is warned (it may run), the fifth is cut
    [warned] = say('tool run_sql {"q": 1}')
    assert warned.startswith("ALLOWED identical_failure")
    assert say("result run_sql error relation orders does not exist") == ["ALLOWED"]
    [line] = say('tool run_sql {"q": 1}')
    assert line.startswith("BLOCKED identical_failure:")
    [bad] = say("launch the rockets")
    assert bad.startswith("BLOCKED invalid_event: unknown command 'launch'")


def test_a_context_message_runs_events_through_stock_chat_completions(rails):
    events = [{"type": "ToolCallRequested", "session_id": "ctx1", "call_id": "c1", "tool_name": "t", "tool_args": {}}]
    reply = asyncio.run(rails.generate_async(messages=[{"role": "context", "content": {"agent_breaker_events": events}}]))
    data = json.loads(reply["content"])
    assert data["events"][0]["type"] == "ToolCallVerdict" and data["events"][0]["allowed"] is True


def test_a_bad_custom_data_value_stops_start_up_with_its_name(tmp_path):
    cfg = tmp_path / "bad"
    shutil.copytree(config_path(), cfg, symlinks=False)
    (cfg / "config.yml").write_text(
        'colang_version: "2.x"\nmodels: []\ncustom_data:\n  agent_breaker:\n    breaker: {failure_rate_pct: 120}\n'
    )
    with pytest.raises(RuntimeError) as err:
        LLMRails(RailsConfig.from_path(str(cfg)))
    cause = err.value.__cause__
    assert "breaker.failure_rate_pct" in str(cause) and "120" in str(cause)


def test_enforce_mode_without_a_receipt_key_stops_start_up(monkeypatch):
    monkeypatch.delenv("AGENT_BREAKER_RECEIPT_KEYS")
    with pytest.raises(RuntimeError) as err:
        make_rails()
    assert "AGENT_BREAKER_RECEIPT_KEYS" in str(err.value.__cause__)


def test_the_configs_load_the_same_from_any_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = Session(make_rails())
    assert s.verdict(tool_call(1))["allowed"] is True
    shipped = {p.name for p in ROOT.iterdir() if (p / "config.yml").exists()}
    assert {"agent_breaker", "agent_breaker_observe", "agent_breaker_v1", "agent_breaker_redis"} <= shipped


def native_turn(i: int, session: str = "native-1") -> list[dict]:
    return [
        {"role": "context", "content": {"session_id": session}},
        {"role": "user", "content": "count the orders"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": f"call_{i}", "type": "function", "function": {"name": "run_sql", "arguments": '{"q": "SELECT 1"}'}}
            ],
        },
    ]


def tool_message(i: int, content: str) -> dict:
    return {"role": "tool", "tool_call_id": f"call_{i}", "name": "run_sql", "content": content}


def test_colang_1_tool_rails_block_a_looping_native_tool_call():
    rails = make_rails("agent_breaker_v1")
    # three failures, then the warned fourth call (a warning lets the call go through), then the cut
    for i in range(4):
        reply = asyncio.run(rails.generate_async(messages=native_turn(i)))
        assert reply["content"] == ""  # allowed: the tool call goes through
        asyncio.run(rails.generate_async(messages=native_turn(i) + [tool_message(i, f"Error: {CALL_ERROR}")]))
    reply = asyncio.run(rails.generate_async(messages=native_turn(4)))
    assert reply["content"].startswith("BLOCKED identical_failure:")


def test_colang_1_tool_rails_need_a_session_in_context():
    rails = make_rails("agent_breaker_v1")
    reply = asyncio.run(rails.generate_async(messages=native_turn(0)[1:]))
    assert reply["content"].startswith("BLOCKED invalid_event:")
    assert "session" in reply["content"]


def test_the_redis_config_shares_guard_state_between_two_rails(monkeypatch):
    from conftest import REDIS_URL, redis_or_skip

    redis_or_skip()
    monkeypatch.setenv("REDIS_URL", REDIS_URL)
    worker_a, worker_b = make_rails("agent_breaker_redis"), make_rails("agent_breaker_redis")
    engine = worker_a.runtime.registered_action_params[ENGINE_PARAM]
    store = engine.store
    session = f"fleet-{id(store)}"
    try:
        a, b = Session(worker_a), Session(worker_b)
        for i in range(4):  # the run's calls land on alternating workers; the fourth is warned
            w = a if i % 2 else b
            assert w.verdict({**tool_call(i), "session_id": session})["allowed"] is True
            w.verdict({**tool_result(i, error=CALL_ERROR), "session_id": session})
        # the warning a gave is spent: b cuts the next repeat
        v = b.verdict({**tool_call(4), "session_id": session})
        assert (v["allowed"], v["heuristic"]) == (False, "identical_failure")
    finally:
        # the shipped config's own key prefix: this test's session, breaker and agent view
        keys = list(store.redis.scan_iter(match=f"{store.prefix}:*"))
        if keys:
            store.redis.delete(*keys)
