"""Modes (enforce / observe / off, per heuristic and per tenant) and incidents."""

from __future__ import annotations

import json
import logging

from conftest import FakeClock, call, final, result, run, user
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agent_breaker import Engine, Incident, MemoryStore
from agent_breaker._canonical import Fingerprinter


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


# near_duplicate alone reads the call fingerprints: they are not taken when no policy of the
# config runs it.
WITHOUT_NEAR_DUPLICATE = (
    {"modes": {"near_duplicate": "off"}},
    {"mode": "observe", "modes": {"near_duplicate": "off", "unverified_claim": "off"}},
)
_TOOLS = ("run_sql", "wire_transfer")  # near_duplicate needs three similar calls to one tool
_ARGS = (
    {"q": "SELECT name FROM t WHERE region = 'EMEA';"},
    {"q": "select  name FROM t WHERE region = 'EMEA'"},
    {"q": "SELECT name FROM t WHERE region='EMEA' "},
    {"lead_id": "L-3530"},
    {"lead_id": "L-3635"},
    {"amount": 5000, "to": "landlord"},
    {"-": "."},  # no word at all: an empty fingerprint
)
_PAYLOADS = ({"rows": [1]}, {"tx_id": "TX-80276", "status": "done"}, "TX-11111 queued", None)
_THOUGHTS = ("", "Let me query the orders table again.", "I will query the orders table once more.")
_FINALS = ("I have transferred $5,000. Reference: TX-80276.", "Queued as TX-11111.")
_call = st.tuples(
    st.just("call"),
    st.sampled_from(_TOOLS),
    st.sampled_from(_ARGS),
    st.sampled_from(_THOUGHTS),
    st.booleans(),
    st.sampled_from(_PAYLOADS),
)
_steps = st.lists(
    st.one_of(
        _call,
        _call,
        _call,
        st.tuples(st.just("final"), st.sampled_from(_FINALS)),
        st.tuples(st.just("user"), st.sampled_from(("try again", "use the other account"))),
    ),
    max_size=20,
)
_RETRIED_VARIANTS = [("call", "run_sql", _ARGS[i], "", False, None) for i in (0, 1, 2, 0)]


def _replay(engine: Engine, steps: list[tuple]) -> list[tuple]:
    clock = engine.clock
    seen = []
    for step in steps:
        clock.advance(2.0)
        if step[0] == "call":
            _, tool, args, thought, ok, payload = step
            v = engine.check_tool_call(call(tool, args, thought=thought))
            seen.append((v.allowed, v.heuristic, v.reason, v.counters))
            if v.allowed:
                rv = engine.record_tool_result(result(tool, ok, payload, call_id=v.call_id))
                seen.append((rv.accepted, rv.heuristic, rv.reason, rv.receipt is not None))
        elif step[0] == "final":
            v = engine.verify_final(final(step[1]))
            seen.append((v.allowed, v.heuristic, v.reason, v.counters))
        else:
            v = engine.record_user(user(step[1]))
            seen.append((v.allowed, v.heuristic, v.reason))
    return seen


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=st.sampled_from(WITHOUT_NEAR_DUPLICATE), steps=_steps)
@example(config=WITHOUT_NEAR_DUPLICATE[0], steps=_RETRIED_VARIANTS)
def test_fingerprints_not_taken_for_near_duplicate_off_change_no_decision(keys, config, steps):
    skipping = Engine(config, clock=FakeClock(), receipt_keys=keys)
    taking = Engine(config, clock=FakeClock(), receipt_keys=keys)
    taking.policies.runs = lambda heuristic: True  # type: ignore[method-assign]
    assert skipping.policies.get(None, None, None).fingerprint_calls is False
    assert _replay(skipping, steps) == _replay(taking, steps)


def test_fingerprints_are_not_taken_when_near_duplicate_is_off(make_engine, clock, monkeypatch):
    taken: list[str] = []
    tokens, shapes = Fingerprinter.tokens, Fingerprinter.shapes
    monkeypatch.setattr(Fingerprinter, "tokens", lambda self, text: taken.append("tokens") or tokens(self, text))
    monkeypatch.setattr(Fingerprinter, "shapes", lambda self, text: taken.append("shapes") or shapes(self, text))

    def query(engine: Engine) -> None:
        run(engine, clock, "run_sql", {"q": "SELECT 1"}, True, {"rows": [1]}, thought="Count the orders.")

    query(make_engine())
    assert sorted(taken) == ["shapes", "shapes", "tokens"]  # args (words, shapes) and thought (shapes)
    taken.clear()
    query(make_engine({"modes": {"near_duplicate": "off"}}))
    assert taken == []


def test_near_duplicate_does_not_see_calls_an_engine_without_it_recorded(make_engine, clock, shared_store):
    # a fleet rolling near_duplicate out: engine A (off) and B (on) share the sessions. A's
    # calls neither start, grow nor end a chain; an empty fingerprint (args with no word)
    # matches none of them
    store = shared_store if shared_store is not None else MemoryStore()
    a = make_engine({"modes": {"near_duplicate": "off"}}, store=store)
    b = make_engine(store=store)
    for q in ("SELECT a FROM t", "SELECT b FROM t", "SELECT c FROM t"):
        run(a, clock, "run_sql", {"q": q}, False, None)
    wordless = [{"-": "."}, {"+": "."}, {"*": "."}, {"/": "."}]
    verdicts = [run(b, clock, "run_sql", args, False, None) for args in wordless]
    assert [(v.allowed, v.heuristic) for v in verdicts] == [(True, None)] * 3 + [(False, "near_duplicate")]

    variants = ["SELECT name FROM t WHERE id = 1;", "select  name FROM t WHERE id = 1", "SELECT name FROM t WHERE id=1 "]
    for q in variants[:2]:
        assert run(b, clock, "run_sql", {"q": q}, False, None, session="s2").allowed
    assert run(a, clock, "run_sql", {"q": "DROP TABLE t"}, False, None, session="s2").allowed  # unseen
    assert run(b, clock, "run_sql", {"q": variants[2]}, False, None, session="s2").allowed  # the chain's third
    v = b.check_tool_call(call("run_sql", {"q": variants[0]}, session="s2"))
    assert (v.allowed, v.heuristic) == (False, "near_duplicate")

    # progress made by a call it does not see ends the chain all the same
    for q in variants[:2]:
        assert run(b, clock, "run_sql", {"q": q}, False, None, session="s3").allowed
    assert run(a, clock, "run_sql", {"q": "SELECT count(*) FROM t"}, True, {"count": 7}, session="s3").allowed
    for q in variants[2:] + variants[:1]:
        assert run(b, clock, "run_sql", {"q": q}, False, None, session="s3").allowed
    assert b.check_tool_call(call("run_sql", {"q": variants[1]}, session="s3")).allowed


def test_overrides_that_turn_near_duplicate_on_only_together_keep_the_fingerprints(make_engine, clock):
    # neither override alone runs near_duplicate (mode off; near_duplicate off): both together do
    engine = make_engine(
        {
            "mode": "off",
            "overrides": [
                {"tenant": "t", "settings": {"mode": "enforce", "modes": {"near_duplicate": "off"}}},
                {"agent": "b", "settings": {"modes": {"near_duplicate": "enforce"}}},
            ],
        }
    )
    for q in ("SELECT name FROM t WHERE id = 1;", "select  name FROM t WHERE id = 1", "SELECT name FROM t WHERE id=1 "):
        run(engine, clock, "run_sql", {"q": q}, False, None, tenant="t", agent="b")
    v = engine.check_tool_call(call("run_sql", {"q": "SELECT name FROM t WHERE id = 1"}, tenant="t", agent="b"))
    assert (v.allowed, v.heuristic) == (False, "near_duplicate")
