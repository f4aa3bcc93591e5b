"""Modes (enforce / observe / off, per heuristic and per tenant) and incidents."""

from __future__ import annotations

import json
import logging

from conftest import FakeClock, call, examples, final, result, run, user
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agent_breaker import Engine, Incident, MemoryStore
from agent_breaker._canonical import Fingerprinter


def loop_until_cut(engine, clock, session="s1"):
    """The same failing call until enforce mode cuts it: three failures, a fourth that trips
    (enforce mode only warns: it runs, and fails again), and the verdict on the fifth."""
    for _ in range(4):
        run(engine, clock, "run_sql", {"q": "SELECT 1"}, False, None, session=session)
    return engine.check_tool_call(call("run_sql", {"q": "SELECT 1"}, session=session))


def test_observe_mode_reports_the_trip_but_blocks_nothing(make_engine, clock, incidents):
    engine = make_engine({"mode": "observe"})
    v = loop_until_cut(engine, clock)
    # the call enforce mode cuts (identical_failure, its warning spent) runs, the trip reported
    assert v.allowed and (v.heuristic, v.severity, v.advisory) == ("identical_failure", "warn", False)
    assert [(i.heuristic, i.severity, i.advisory) for i in incidents] == [
        ("identical_failure", "warn", True),  # the warning enforce mode gives too
        ("identical_failure", "warn", False),  # the cut, only reported
    ]


def test_off_mode_decides_nothing(make_engine, clock, incidents):
    engine = make_engine({"mode": "off"})
    v = loop_until_cut(engine, clock)
    assert v.allowed and v.heuristic is None
    assert incidents == []


def test_one_heuristic_can_be_observed_while_the_rest_enforce(make_engine, clock):
    engine = make_engine({"modes": {"identical_failure": "observe"}})
    for _ in range(3):
        run(engine, clock, "run_sql", {"q": "SELECT 1"}, False, None)
    warned = run(engine, clock, "run_sql", {"q": "SELECT 1"}, False, None)
    assert warned.allowed and warned.advisory
    v = engine.check_tool_call(call("run_sql", {"q": "SELECT 1"}))
    # identical_failure only reports, so the enforcing heuristics in line decide: failing calls
    # alike are a near_duplicate chain (and identical_call's four runs); warned at the fourth
    # call, the pattern is cut at the fifth all the same
    assert not v.allowed and v.heuristic in ("near_duplicate", "identical_call"), v


def test_a_heuristic_switched_off_never_fires(make_engine, clock):
    engine = make_engine({"modes": {"identical_failure": "off", "identical_call": "off", "near_duplicate": "off"}})
    assert loop_until_cut(engine, clock).allowed


def test_modes_can_differ_per_tenant(make_engine, clock):
    engine = make_engine({"overrides": [{"tenant": "beta", "settings": {"mode": "observe"}}]})
    assert not loop_until_cut(engine, clock, session="a").allowed
    for _ in range(4):
        run(engine, clock, "run_sql", {"q": 1}, False, None, session="b", tenant="beta")
    v = engine.check_tool_call(call("run_sql", {"q": 1}, session="b", tenant="beta"))
    assert v.allowed and v.severity == "warn"  # the fifth call, cut for the default tenant, runs


def test_every_trip_emits_a_typed_incident_with_counters_and_spend(make_engine, clock, incidents):
    engine = make_engine()
    for _ in range(4):  # the fourth is warned of, and runs
        run(engine, clock, "run_sql", {"q": 1}, False, None, tenant="acme", feature="ops", input_tokens=100, cost_usd=0.5)
    engine.check_tool_call(call("run_sql", {"q": 1}, tenant="acme", feature="ops", input_tokens=100, cost_usd=0.5))
    [warning, incident] = incidents
    assert isinstance(warning, Incident) and isinstance(incident, Incident)
    assert (warning.heuristic, warning.severity, warning.advisory, warning.tool) == ("identical_failure", "warn", True, "run_sql")
    assert warning.counters == {"failures": 3, "max_failures": 3}
    assert warning.tokens_so_far == 400 and warning.cost_usd_so_far == 2.0
    assert warning.to_dict()["advisory"] is True
    assert (incident.tenant, incident.feature, incident.session) == ("acme", "ops", "s1")
    assert (incident.heuristic, incident.severity, incident.advisory, incident.scope, incident.tool) == (
        "identical_failure",
        "block",
        False,
        "session",
        "run_sql",
    )
    assert incident.counters == {"failures": 4, "max_failures": 3}
    assert incident.tokens_so_far == 500 and incident.cost_usd_so_far == 2.5
    assert incident.to_dict()["advisory"] is False
    # a halted session's later blocks are not new incidents
    engine.check_tool_call(call("run_sql", {"q": 2}))
    assert len(incidents) == 2


def test_a_failing_listener_never_breaks_a_decision(make_engine, clock, incidents, caplog):
    def broken(incident):
        raise RuntimeError("listener down")

    engine = make_engine(listeners=[broken, incidents.append])
    v = loop_until_cut(engine, clock)
    assert not v.allowed and [i.severity for i in incidents] == ["warn", "block"]
    assert "listener" in caplog.text


def test_the_default_listener_writes_one_json_line_per_incident(clock, keys, caplog):
    engine = Engine(clock=clock, receipt_keys=keys)
    with caplog.at_level(logging.WARNING, logger="agent_breaker.incidents"):
        loop_until_cut(engine, clock)
    records = [json.loads(r.getMessage()) for r in caplog.records if r.name == "agent_breaker.incidents"]
    assert [(d["heuristic"], d["session"], d["severity"], d["advisory"]) for d in records] == [
        ("identical_failure", "s1", "warn", True),
        ("identical_failure", "s1", "block", False),
    ]


def test_metrics_count_trips_per_heuristic_and_severity(make_engine, clock):
    engine = make_engine()
    loop_until_cut(engine, clock)
    assert engine.metrics() == {"identical_failure:block": 1, "identical_failure:warn": 1}


# near_duplicate alone reads the call fingerprints: they are not taken when no policy of the
# config runs it.
#: configs that run neither reader of the call fingerprints (near_duplicate; identical_failure,
#: whose failures under arguments that read alike are one retried call)
WITHOUT_NEAR_DUPLICATE = (
    {"modes": {"near_duplicate": "off", "identical_failure": "off"}},
    {"mode": "observe", "modes": {"near_duplicate": "off", "identical_failure": "off", "unverified_claim": "off"}},
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


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=st.sampled_from(WITHOUT_NEAR_DUPLICATE), steps=_steps)
@example(config=WITHOUT_NEAR_DUPLICATE[0], steps=_RETRIED_VARIANTS)
def test_fingerprints_not_taken_for_near_duplicate_off_change_no_decision(keys, config, steps):
    skipping = Engine(config, clock=FakeClock(), receipt_keys=keys)
    taking = Engine(config, clock=FakeClock(), receipt_keys=keys)
    taking.policies.runs = lambda heuristic: True  # type: ignore[method-assign]
    assert skipping.policies.get(None, None, None).fingerprint_calls is False
    assert _replay(skipping, steps) == _replay(taking, steps)


def test_fingerprints_are_not_taken_when_their_readers_are_off(make_engine, clock, monkeypatch):
    taken: list[str] = []
    tokens, shapes = Fingerprinter.tokens, Fingerprinter.shapes
    monkeypatch.setattr(Fingerprinter, "tokens", lambda self, text: taken.append("tokens") or tokens(self, text))
    monkeypatch.setattr(Fingerprinter, "shapes", lambda self, text: taken.append("shapes") or shapes(self, text))

    def query(engine: Engine) -> None:
        run(engine, clock, "run_sql", {"q": "SELECT 1"}, True, {"rows": [1]}, thought="Count the orders.")

    query(make_engine())
    assert sorted(taken) == ["shapes", "shapes", "tokens"]  # args (words, shapes) and thought (shapes)
    for readers_on in ({"near_duplicate": "off"}, {"identical_failure": "off"}):  # either reads them
        taken.clear()
        query(make_engine({"modes": readers_on}))
        assert sorted(taken) == ["shapes", "shapes", "tokens"]
    taken.clear()
    query(make_engine({"modes": {"near_duplicate": "off", "identical_failure": "off"}}))
    assert taken == []


#: near_duplicate alone decides, and at its first trip, as the tests below count its chains:
#: identical_failure, which also follows one tool's same failure under arguments that share a
#: value or read alike, is off, and near_duplicate cuts without a warning first
NEAR_DUPLICATE_ALONE = {"modes": {"identical_failure": "off"}, "warn_first": {"near_duplicate": 0}}


def test_near_duplicate_does_not_see_calls_an_engine_without_it_recorded(make_engine, clock, shared_store):
    # a fleet rolling near_duplicate out: engine A (off) and B (on) share the sessions. A's
    # calls neither start, grow nor end a chain; an empty fingerprint (args with no word)
    # matches none of them
    store = shared_store if shared_store is not None else MemoryStore()
    a = make_engine({**NEAR_DUPLICATE_ALONE, "modes": {"near_duplicate": "off", "identical_failure": "off"}}, store=store)
    b = make_engine(NEAR_DUPLICATE_ALONE, store=store)
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
            **NEAR_DUPLICATE_ALONE,
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
