"""Prometheus metrics of the decisions: in process (an engine's own registry) and on the real
server's GET /metrics, parsed with prometheus-client's own parser."""

from __future__ import annotations

import uuid

import pytest
from conftest import CALL_ERROR, OUTAGE, call, run
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agent_breaker import InvalidEventError
from agent_breaker.metrics import NO_METRICS, OTHER, REGISTRY, Metrics


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def decisions(found: dict, event: str, heuristic: str, verdict: str) -> float:
    key = ("agent_breaker_decisions_total", (("event", event), ("heuristic", heuristic), ("verdict", verdict)))
    return found.get(key, 0.0)


def test_a_runaway_shows_as_warned_then_blocked_decisions_by_heuristic(make_engine, clock):
    telemetry = Metrics()
    engine = make_engine(telemetry=telemetry)
    for _ in range(4):  # the fourth runs under a warning
        run(engine, clock, "run_sql", {"q": 1}, False, None, error=CALL_ERROR, input_tokens=1000, tenant="acme")
    for _ in range(2):
        assert not engine.check_tool_call(call("run_sql", {"q": 1}, tenant="acme")).allowed
    found = samples(generate_latest(telemetry.registry).decode())
    assert decisions(found, "tool_call", "none", "allowed") == 3
    assert decisions(found, "tool_call", "identical_failure", "warned") == 1
    assert decisions(found, "tool_call", "identical_failure", "blocked") == 2
    assert decisions(found, "tool_result", "none", "allowed") == 4
    assert found[("agent_breaker_decision_seconds_count", (("event", "tool_call"),))] == 6
    assert found[("agent_breaker_spend_tokens_total", (("feature", "none"), ("tenant", "acme")))] == 4000


def test_an_invalid_event_counts_as_blocked_and_still_raises(make_engine):
    telemetry = Metrics()
    engine = make_engine(telemetry=telemetry)
    with pytest.raises(InvalidEventError):
        engine.check_tool_call({"session": "s", "tool": "t", "args": "not an object"})
    found = samples(generate_latest(telemetry.registry).decode())
    assert decisions(found, "tool_call", "invalid_event", "blocked") == 1


def test_made_up_tenants_share_one_series_past_the_cap(make_engine, clock):
    telemetry = Metrics(max_label_values=3)
    engine = make_engine(telemetry=telemetry)
    for i in range(20):
        clock.advance(1)
        engine.check_tool_call(call("search", {"q": i}, session=f"s{i}", tenant=f"tenant-{uuid.uuid4().hex}", input_tokens=10))
    tenants = {
        dict(labels)["tenant"]
        for (name, labels) in samples(generate_latest(telemetry.registry).decode())
        if name == "agent_breaker_spend_tokens_total"
    }
    assert len(tenants) == 4 and OTHER in tenants  # three seen first, then one series for the rest


def test_labels_hold_no_payload_text(make_engine, clock):
    telemetry = Metrics()
    engine = make_engine(telemetry=telemetry)
    secret = "SECRET-PAYLOAD-7f3a9c"
    for _ in range(4):
        run(engine, clock, "run_sql", {"q": secret}, False, {"error": secret}, error=secret, thought=secret)
    engine.verify_final({"session": "s1", "type": "final", "text": secret})
    assert secret not in generate_latest(telemetry.registry).decode()


def test_metrics_can_be_turned_off(make_engine, clock):
    def allowed_calls() -> float:
        return decisions(samples(generate_latest(REGISTRY).decode()), "tool_call", "none", "allowed")

    before = allowed_calls()
    run(make_engine(telemetry=NO_METRICS), clock, "search", {"q": 1}, True, {"hits": [1]}, session="off")
    assert allowed_calls() == before  # nothing recorded anywhere, the process registry included
    run(make_engine(), clock, "search", {"q": 1}, True, {"hits": [1]}, session="on")
    assert allowed_calls() == before + 1  # an engine with no telemetry given reports to REGISTRY


def test_breaker_state_per_tool_and_its_transitions(make_engine, clock):
    from conftest import OUTAGE

    telemetry = Metrics()
    # configured tools: each has its series from the start (others get one when they leave closed)
    config = {"breaker": {"open_s": 10.0, "half_open_probes": 1}, "tools": {"search": {}, "fetch": {}}}
    engine = make_engine(config, telemetry=telemetry)
    run(engine, clock, "search", {"q": 1}, True, {"hits": [1]})
    for i in range(5):
        run(engine, clock, "fetch", {"n": i}, False, None, error=OUTAGE, session=f"s{i}")
    found = samples(generate_latest(telemetry.registry).decode())

    def state(tool: str, name: str) -> float:
        return found[("agent_breaker_breaker_state", (("state", name), ("tool", tool)))]

    assert (state("fetch", "open"), state("fetch", "closed")) == (1, 0)
    assert state("search", "closed") == 1
    moves = ("agent_breaker_breaker_transitions_total", (("from_state", "closed"), ("to_state", "open"), ("tool", "fetch")))
    assert found[moves] == 1
    engine.operator.force_breaker("fetch", "closed")
    found = samples(generate_latest(telemetry.registry).decode())
    assert (state("fetch", "open"), state("fetch", "closed")) == (0, 1)


def _state_series(telemetry) -> dict[str, set[str]]:
    """tool -> the states its breaker-state gauge is 1 for."""
    series: dict[str, set[str]] = {}
    for (name, labels), value in samples(generate_latest(telemetry.registry).decode()).items():
        if name == "agent_breaker_breaker_state" and value == 1:
            series.setdefault(dict(labels)["tool"], set()).add(dict(labels)["state"])
    return series


def test_made_up_tool_names_cannot_take_the_slot_of_an_opening_breaker(make_engine, clock):
    telemetry = Metrics(max_label_values=3)
    engine = make_engine({"tools": {"payments_api": {}}}, telemetry=telemetry)
    for i in range(200):  # closed breakers of made-up tools take no slot
        engine.check_tool_call(call(f"tool_{uuid.uuid4().hex}", {"n": i}, session=f"s{i}"))
    for i in range(5):  # nor do made-up tools that open, past the cap
        junk = f"junk_{i}"
        for j in range(5):
            run(engine, clock, junk, {"n": j}, False, None, session=f"j{i}-{j}", error=OUTAGE)
    for j in range(5):
        run(engine, clock, "payments_api", {"n": j}, False, None, session=f"p{j}", error=OUTAGE)
    series = _state_series(telemetry)
    assert series["payments_api"] == {"open"}  # a configured tool always has its series
    assert len([t for t in series if t.startswith("junk_")]) == 3 and not [t for t in series if t.startswith("tool_")]


def test_sessions_live_and_evicted(clock, keys):
    from agent_breaker import Engine

    telemetry = Metrics()
    config = {"sessions": {"max_sessions": 3, "ttl_s": 60.0}}
    engine = Engine(config, clock=clock, telemetry=telemetry, listeners=[], receipt_keys=keys)
    for i in range(5):
        engine.check_tool_call(call("search", {"q": i}, session=f"s{i}"))
    found = samples(generate_latest(telemetry.registry).decode())
    assert found[("agent_breaker_sessions_live", ())] == 3
    assert found[("agent_breaker_sessions_evicted_total", ())] == 2
    clock.advance(61.0)
    engine.check_tool_call(call("search", {"q": 9}, session="late"))
    found = samples(generate_latest(telemetry.registry).decode())
    assert (found[("agent_breaker_sessions_live", ())], found[("agent_breaker_sessions_evicted_total", ())]) == (1, 5)
