"""Modes (enforce / observe / off, per heuristic and per tenant) and incidents."""

from __future__ import annotations

import json
import logging

from conftest import call, run

from agent_breaker import Engine, Incident


def loop_three_times(engine, clock, session="s1"):
    for _ in range(3):
        run(engine, clock, "run_sql", {"q": "SELECT 1"}, False, None, session=session)
    return engine.check_tool_call(call("run_sql", {"q": "SELECT 1"}, session=session))


def test_observe_mode_reports_the_trip_but_blocks_nothing(make_engine, clock, incidents):
    engine = make_engine({"mode": "observe"})
    v = loop_three_times(engine, clock)
    assert v.allowed and v.heuristic == "identical_failure" and v.severity == "warn"
    assert [i.severity for i in incidents] == ["warn"]


def test_off_mode_decides_nothing(make_engine, clock, incidents):
    engine = make_engine({"mode": "off"})
    v = loop_three_times(engine, clock)
    assert v.allowed and v.heuristic is None
    assert incidents == []


def test_one_heuristic_can_be_observed_while_the_rest_enforce(make_engine, clock):
    engine = make_engine({"modes": {"identical_failure": "observe"}})
    v = loop_three_times(engine, clock)
    # identical_failure only warns, so the next enforcing heuristic in line decides: three
    # failing calls alike are a near_duplicate chain (identical_call waits for four runs)
    assert not v.allowed and v.heuristic == "near_duplicate"


def test_a_heuristic_switched_off_never_fires(make_engine, clock):
    engine = make_engine({"modes": {"identical_failure": "off", "identical_call": "off", "near_duplicate": "off"}})
    assert loop_three_times(engine, clock).allowed


def test_modes_can_differ_per_tenant(make_engine, clock):
    engine = make_engine({"overrides": [{"tenant": "beta", "settings": {"mode": "observe"}}]})
    assert not loop_three_times(engine, clock, session="a").allowed
    for _ in range(3):
        run(engine, clock, "run_sql", {"q": 1}, False, None, session="b", tenant="beta")
    v = engine.check_tool_call(call("run_sql", {"q": 1}, session="b", tenant="beta"))
    assert v.allowed and v.severity == "warn"


def test_every_trip_emits_a_typed_incident_with_counters_and_spend(make_engine, clock, incidents):
    engine = make_engine()
    for _ in range(3):
        run(engine, clock, "run_sql", {"q": 1}, False, None, tenant="acme", feature="ops", input_tokens=100, cost_usd=0.5)
    engine.check_tool_call(call("run_sql", {"q": 1}, tenant="acme", feature="ops", input_tokens=100, cost_usd=0.5))
    [incident] = incidents
    assert isinstance(incident, Incident)
    assert (incident.tenant, incident.feature, incident.session) == ("acme", "ops", "s1")
    assert (incident.heuristic, incident.severity, incident.scope, incident.tool) == (
        "identical_failure",
        "block",
        "session",
        "run_sql",
    )
    assert incident.counters == {"failures": 3, "max_failures": 3}
    assert incident.tokens_so_far == 400 and incident.cost_usd_so_far == 2.0
    # a halted session's later blocks are not new incidents
    engine.check_tool_call(call("run_sql", {"q": 2}))
    assert len(incidents) == 1


def test_a_failing_listener_never_breaks_a_decision(make_engine, clock, incidents, caplog):
    def broken(incident):
        raise RuntimeError("listener down")

    engine = make_engine(listeners=[broken, incidents.append])
    v = loop_three_times(engine, clock)
    assert not v.allowed and len(incidents) == 1
    assert "listener" in caplog.text


def test_the_default_listener_writes_one_json_line(clock, keys, caplog):
    engine = Engine(clock=clock, receipt_keys=keys)
    with caplog.at_level(logging.WARNING, logger="agent_breaker.incidents"):
        loop_three_times(engine, clock)
    [record] = [r for r in caplog.records if r.name == "agent_breaker.incidents"]
    data = json.loads(record.getMessage())
    assert data["heuristic"] == "identical_failure" and data["session"] == "s1"


def test_metrics_count_trips_per_heuristic_and_severity(make_engine, clock):
    engine = make_engine()
    loop_three_times(engine, clock)
    assert engine.metrics() == {"identical_failure:block": 1}
