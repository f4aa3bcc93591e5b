"""The budget governor: session tokens and money, soft limit, tool allocations, velocity,
step and depth ceilings."""

from __future__ import annotations

import pytest
from conftest import call, run, say


def big_call(i: int, tokens: int = 100_000, **kw):
    return call("fetch_url", {"query": f"angle {i}"}, input_tokens=tokens, output_tokens=0, **kw)


def test_cost_budget_blocks_before_the_projected_spend_passes_the_ceiling(make_engine, clock):
    engine = make_engine({"budget": {"max_cost_usd": 10.0, "max_tokens": None, "soft_limit_pct": 100}})
    verdicts = []
    for i in range(12):
        clock.advance(5)
        verdicts.append(engine.check_tool_call(big_call(i, tokens=1000, cost_usd=1.0)))
    allowed = [v.allowed for v in verdicts]
    # after step k the spend is k dollars; projected is k + 1 (one more step of the average size)
    assert allowed.index(False) == 9
    blocked = verdicts[9]
    assert blocked.heuristic == "cost_budget" and blocked.scope == "session"
    assert blocked.counters["max_cost_usd"] == 10.0
    assert "final answer" in blocked.observation["actionable_instruction"]


def test_token_budget_blocks_and_halts_the_session(make_engine, clock):
    engine = make_engine({"budget": {"max_tokens": 1_000_000, "max_cost_usd": None, "soft_limit_pct": 100}})
    heuristics = []
    for i in range(8):
        clock.advance(30)
        heuristics.append(engine.check_tool_call(big_call(i, tokens=200_000)).heuristic)
    assert heuristics[:4] == [None] * 4
    assert heuristics[4:] == ["token_budget"] * 4


def test_price_per_model_turns_tokens_into_money(make_engine, clock):
    config = {
        "budget": {
            "max_cost_usd": 1.0,
            "max_tokens": None,
            "soft_limit_pct": 100,
            "prices": {"gpt-x": {"input_per_mtok_usd": 2.0, "output_per_mtok_usd": 8.0}},
            "default_model": "gpt-x",
        }
    }
    engine = make_engine(config)
    ev = call("search", {"q": 1}, input_tokens=100_000, output_tokens=10_000)
    assert engine.step_cost_usd(engine_event(ev)) == pytest.approx(0.28)
    assert engine.check_tool_call(ev).allowed
    clock.advance(30)
    assert engine.check_tool_call(call("search", {"q": 2}, input_tokens=100_000, output_tokens=10_000)).allowed
    clock.advance(30)
    v = engine.check_tool_call(call("search", {"q": 3}, input_tokens=100_000, output_tokens=10_000))
    assert v.heuristic == "cost_budget"


def engine_event(ev):
    from agent_breaker import parse_event

    return parse_event(ev)


def test_past_the_soft_limit_only_read_only_tools_run(make_engine, clock):
    config = {
        "budget": {"max_tokens": 1_000_000, "max_cost_usd": None, "soft_limit_pct": 50},
        "tools": {"search_docs": {"read_only": True}},
    }
    engine = make_engine(config)
    clock.advance(30)
    # 400k spent: projected 800k (80%), past the soft limit, but search_docs is read-only
    assert engine.check_tool_call(call("search_docs", {"q": 1}, input_tokens=400_000)).allowed
    clock.advance(30)
    v = engine.check_tool_call(call("send_email", {"to": "a"}, input_tokens=10_000))
    assert (v.allowed, v.heuristic, v.scope) == (False, "budget_soft_limit", "call")
    clock.advance(30)
    assert engine.check_tool_call(call("search_docs", {"q": 2}, input_tokens=10_000)).allowed


def test_a_tool_allocation_stops_only_that_tool(make_engine, clock):
    engine = make_engine({"tools": {"web_search": {"max_tokens": 50_000}}})
    for i in range(2):
        clock.advance(30)
        assert engine.check_tool_call(call("web_search", {"q": i}, input_tokens=20_000)).allowed
    clock.advance(30)
    v = engine.check_tool_call(call("web_search", {"q": 9}, input_tokens=20_000))
    assert (v.allowed, v.heuristic, v.scope) == (False, "tool_token_budget", "tool")
    clock.advance(30)
    assert engine.check_tool_call(call("read_file", {"p": 1}, input_tokens=20_000)).allowed


def test_token_velocity_blocks_a_burst_and_lets_the_agent_resume_after_cooling_down(engine, clock):
    verdicts = []
    for i in range(14):
        clock.advance(0.5)
        verdicts.append(engine.check_tool_call(call("read_document", {"doc": i}, input_tokens=45_000, output_tokens=1_000)))
    first = next(i for i, v in enumerate(verdicts) if not v.allowed)
    assert first == 10  # 11 steps x 46k tokens = 506k in the last 10 s > 50k tokens/s
    assert verdicts[first].heuristic == "token_velocity"
    assert verdicts[first].observation["retry_after_s"] == 10.0
    clock.advance(30)
    assert engine.check_tool_call(call("read_document", {"doc": 99}, input_tokens=45_000)).allowed


def test_steady_heavy_work_under_the_velocity_ceiling_runs(engine, clock):
    for i in range(40):
        clock.advance(1.0)
        assert engine.check_tool_call(call("read_document", {"doc": i}, input_tokens=12_000, output_tokens=500)).allowed


def test_step_ceiling_stops_a_session_that_runs_too_long(make_engine, clock):
    engine = make_engine({"step_limit": {"max_steps": 5}})
    heuristics = [run(engine, clock, "lookup", {"i": i}, True, {"v": i}).heuristic for i in range(7)]
    assert heuristics == [None] * 5 + ["step_limit"] * 2


def test_assistant_turns_count_as_steps_and_spend(make_engine, clock):
    engine = make_engine({"step_limit": {"max_steps": 3}})
    for text in ("Let me read the logs.", "The parser fails on tabs.", "I will patch the tokenizer."):
        clock.advance(1)
        assert engine.record_assistant(say(text)).allowed
    clock.advance(1)
    assert engine.check_tool_call(call("lookup", {"i": 1})).heuristic == "step_limit"


def test_default_step_ceiling_leaves_a_long_coding_run_alone(engine, clock):
    for i in range(200):
        assert run(engine, clock, "execute_bash", {"command": f"step {i}"}, True, {"output": f"out {i}"}).allowed


def test_depth_ceiling_blocks_deep_delegation_only(engine, clock):
    depths = [1, 2, 3, 4, 5, 6]
    verdicts = [run(engine, clock, "spawn_agent", {"task": f"level {d}"}, True, {"agent_id": f"a{d}"}, depth=d) for d in depths]
    assert [v.heuristic for v in verdicts] == [None, None, None, None, "depth_limit", "depth_limit"]
    assert verdicts[4].scope == "call"
    assert run(engine, clock, "summarize", {"x": 1}, True, {"s": 1}, depth=1).allowed


def test_limits_can_differ_per_tenant_and_feature(make_engine, clock):
    config = {
        "depth_limit": {"max_depth": 4},
        "overrides": [
            {"tenant": "acme", "settings": {"depth_limit": {"max_depth": 1}}},
            {"tenant": "acme", "feature": "research", "settings": {"depth_limit": {"max_depth": 8}}},
        ],
    }
    engine = make_engine(config)
    assert engine.check_tool_call(call("spawn", {"d": 1}, depth=2, session="a", tenant="acme")).heuristic == "depth_limit"
    assert engine.check_tool_call(call("spawn", {"d": 2}, depth=6, session="b", tenant="acme", feature="research")).allowed
    assert engine.check_tool_call(call("spawn", {"d": 3}, depth=3, session="c", tenant="globex")).allowed
