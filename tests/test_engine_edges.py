"""Edges found in review: spend of assistant turns, per-tenant breaker keys, bounded per-tool state."""

from __future__ import annotations

from conftest import call, say, size_test

from agent_breaker.breaker import BreakerStateName as S


def test_assistant_turns_count_toward_the_shared_spend_ceiling(make_engine, clock):
    engine = make_engine({"global_budget": {"max_tokens": 3000, "window_s": 3600}, "budget": {"max_tokens": None}})
    for text in ("Reading the logs.", "The parser fails on tabs.", "Patching the tokenizer now."):
        clock.advance(1)
        assert engine.record_assistant(say(text, tenant="acme", input_tokens=1000)).allowed
    clock.advance(1)
    v = engine.check_tool_call(call("t", {"i": 1}, tenant="acme", input_tokens=100))
    assert (v.allowed, v.heuristic) == (False, "global_budget")


def test_an_operator_reaches_a_tenants_own_breaker(make_engine):
    engine = make_engine(
        {"breaker": {"key_by_tenant": False}, "overrides": [{"tenant": "acme", "settings": {"breaker": {"key_by_tenant": True}}}]}
    )
    engine.operator.force_breaker("search", "forced_open", tenant="acme")
    assert engine.operator.breaker_state("search", tenant="acme") is S.FORCED_OPEN
    assert engine.operator.breaker_state("search") is S.CLOSED  # other tenants share the plain key
    v = engine.check_tool_call(call("search", {"q": 1}, tenant="acme", session="a"))
    assert (v.allowed, v.heuristic) == (False, "circuit_open")
    assert engine.check_tool_call(call("search", {"q": 1}, tenant="globex", session="b")).allowed


@size_test
def test_per_tool_session_state_stays_bounded_however_many_tools_a_run_calls(make_engine, clock):
    engine = make_engine(share_breakers=False)
    for i in range(300):
        clock.advance(0.1)
        v = engine.check_tool_call(call(f"tool_{i}", {"i": i}, input_tokens=10, mutating=True))
        engine.record_tool_result(
            {"type": "tool_result", "session": "s1", "tool": f"tool_{i}", "ok": True, "result": {"id": i}, "call_id": v.call_id}
        )
    s = engine.store.peek_session("s1")
    assert max(len(s.spend.tool_tokens), len(s.loops.chains), len(s.ledger.mutating), len(s.breakers)) <= 256


def test_a_new_feature_label_per_call_does_not_multiply_the_tenants_ceiling(make_engine, clock):
    engine = make_engine({"global_budget": {"max_cost_usd": 1.0, "window_s": 3600}, "budget": {"max_cost_usd": None}})
    verdicts = []
    for i in range(9):
        clock.advance(1)
        verdicts.append(
            engine.check_tool_call(call("t", {"i": i}, tenant="acme", feature=f"f{i}", session=f"s{i}", cost_usd=0.3))
        )
    assert [v.allowed for v in verdicts[:3]] == [True, True, True]
    assert all(not v.allowed and v.heuristic == "global_budget" for v in verdicts[4:]), verdicts
    # another tenant has a ceiling of its own
    assert engine.check_tool_call(call("t", {"i": 0}, tenant="globex", session="g", cost_usd=0.3)).allowed


def test_a_tenants_own_ceiling_may_hold_several_features(make_engine, clock):
    engine = make_engine(
        {"global_budget": {"max_cost_usd": 1.0, "tenant_max_cost_usd": 2.0, "window_s": 3600}, "budget": {"max_cost_usd": None}}
    )
    allowed = []
    for i in range(8):
        clock.advance(1)
        v = engine.check_tool_call(call("t", {"i": i}, tenant="acme", feature=f"f{i % 2}", session=f"s{i}", cost_usd=0.3))
        allowed.append(v.allowed)
    assert allowed[:6] == [True] * 6 and allowed[7] is False


def _fetch(engine, clock, url: str, session: str, ok: bool = False):
    from conftest import OUTAGE, run

    return run(
        engine,
        clock,
        "http_get",
        {"url": url},
        ok,
        {"status": 200} if ok else None,
        session=session,
        error=None if ok else OUTAGE,
        tenant="acme",
    )


def test_failures_of_urls_the_agent_chose_open_that_host_only(make_engine, clock):
    engine = make_engine()
    for i in range(8):
        _fetch(engine, clock, f"https://down.example/page/{i}", session=f"s{i}")
    refused = engine.check_tool_call(call("http_get", {"url": "https://down.example/x"}, tenant="acme", session="t"))
    assert (refused.allowed, refused.heuristic) == (False, "circuit_open")
    # another host, and the tool for every other host, are not touched
    assert engine.check_tool_call(call("http_get", {"url": "https://api.example/v1"}, tenant="acme", session="u")).allowed
    assert engine.operator.breaker_state("http_get", tenant="acme") is S.CLOSED


def test_an_operators_switch_on_the_tool_covers_every_host(make_engine, clock):
    engine = make_engine()
    engine.operator.force_breaker("http_get", "forced_open", tenant="acme")
    v = engine.check_tool_call(call("http_get", {"url": "https://api.example/v1"}, tenant="acme", session="u"))
    assert (v.allowed, v.heuristic) == (False, "circuit_open")
    engine.operator.force_breaker("http_get", "closed", tenant="acme")
    assert engine.check_tool_call(call("http_get", {"url": "https://api.example/v1"}, tenant="acme", session="u")).allowed


def test_a_tools_dependency_argument_keys_its_breaker(make_engine, clock):
    from conftest import OUTAGE, run

    engine = make_engine({"tools": {"query_db": {"dependency_arg": "database"}}})
    for i in range(8):
        run(engine, clock, "query_db", {"database": "Billing", "q": i}, False, None, session=f"s{i}", error=OUTAGE)
    assert not engine.check_tool_call(call("query_db", {"database": "billing", "q": 99}, session="t")).allowed
    assert engine.check_tool_call(call("query_db", {"database": "crm", "q": 1}, session="u")).allowed


def test_a_refusal_says_whose_breaker_opened(make_engine, clock):
    from conftest import OUTAGE, result

    engine = make_engine({"breaker": {"min_sessions": 2}})

    def fail(session: str, i: int) -> None:
        clock.advance(1)
        v = engine.check_tool_call(call("run_sql", {"q": i}, session=session))
        assert v.allowed, v.reason
        engine.record_tool_result(result("run_sql", False, session=session, error=OUTAGE, call_id=v.call_id))

    for i in range(5):
        fail("alone", i)
    own = engine.check_tool_call(call("run_sql", {"q": 9}, session="alone"))
    assert (own.allowed, own.heuristic) == (False, "circuit_open")
    assert "failing for this session" in own.reason  # the shared breaker waits for a second session
    assert engine.operator.breaker_state("run_sql") is S.CLOSED
    fail("second", 0)  # a second session's failure: the shared breaker opens
    shared = engine.check_tool_call(call("run_sql", {"q": 9}, session="third"))
    assert (shared.allowed, shared.heuristic) == (False, "circuit_open")
    assert "failing for every session" in shared.reason
