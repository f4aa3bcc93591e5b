"""Fallback tiers (issue 12, item 2): a call its tool's breaker refuses goes to the first
alternative whose own breaker serves (arguments mapped), else to the static answer; the primary
recovers through its probes meanwhile. On both stores."""

from __future__ import annotations

import pytest
from conftest import OUTAGE, call, result, run

from agent_breaker import BreakerStateName

SECRET = "SECRET-ARG-41b7"

FALLBACK = {
    "alternatives": [
        {"tool": "enrich_v1", "args": {"domain": "company.domain"}, "constants": {"mode": "basic"}},
        {"tool": "enrich_cache"},
    ],
    "static": "Lead enrichment is down; proceed without it.",
}


def engine_with(make_engine, **fallback):
    return make_engine(
        {"tools": {"enrich": {"fallback": fallback or FALLBACK}}, "breaker": {"open_s": 60.0, "half_open_probes": 1}}
    )


def outage(engine, clock, tool: str) -> None:
    for i in range(5):
        run(engine, clock, tool, {"n": i}, False, None, error=OUTAGE, session=f"{tool}-down-{i}")
    assert engine.operator.breaker_state(tool) is BreakerStateName.OPEN


def test_an_open_primary_routes_to_the_alternative_with_mapped_arguments_then_recovers(make_engine, clock):
    engine = engine_with(make_engine)
    outage(engine, clock, "enrich")
    v = engine.check_tool_call(call("enrich", {"company": {"domain": "acme.example", "name": "Acme"}}))
    assert (v.allowed, v.heuristic) == (False, "circuit_open")
    assert v.route == {"tier": "alternative", "tool": "enrich_v1", "args": {"domain": "acme.example", "mode": "basic"}}
    assert v.observation["fallback"] == "alternative" and "call enrich_v1 instead" in v.observation["actionable_instruction"]
    assert v.to_dict()["route"] == v.route
    # the caller runs the alternative: an ordinary guarded call
    alt = engine.check_tool_call(call("enrich_v1", v.route["args"], call_id="alt"))
    assert alt.allowed
    assert not engine.record_tool_result(result("enrich_v1", True, {"lead": 1}, call_id="alt")).failed
    # the primary recovers through its probe once its open interval has passed
    clock.advance(60.0)
    probe = engine.check_tool_call(call("enrich", {"company": {"domain": "acme.example"}}, call_id="p", session="p"))
    assert probe.allowed and probe.route is None
    engine.record_tool_result(result("enrich", True, {"lead": 2}, call_id="p", session="p"))
    assert engine.operator.breaker_state("enrich") is BreakerStateName.CLOSED


def test_an_alternative_that_is_down_or_cannot_take_the_arguments_is_passed_over(make_engine, clock):
    engine = engine_with(make_engine)
    outage(engine, clock, "enrich")
    # no company.domain to map: the first alternative cannot take the call; the second takes the same arguments
    v = engine.check_tool_call(call("enrich", {"email": "a@acme.example"}))
    assert v.route == {"tier": "alternative", "tool": "enrich_cache", "args": {"email": "a@acme.example"}}
    engine.operator.force_breaker("enrich_cache", "forced_open")
    outage(engine, clock, "enrich_v1")
    v = engine.check_tool_call(call("enrich", {"company": {"domain": "acme.example"}}, call_id="c2"))
    assert v.route == {"tier": "static", "answer": "Lead enrichment is down; proceed without it."}
    assert v.observation["answer"] == "Lead enrichment is down; proceed without it."
    assert v.observation["fallback"] == "static"


def test_without_a_tier_that_serves_the_refusal_stands(make_engine, clock):
    engine = engine_with(make_engine, alternatives=[{"tool": "enrich_v1"}])
    outage(engine, clock, "enrich")
    outage(engine, clock, "enrich_v1")
    v = engine.check_tool_call(call("enrich", {"q": SECRET}))
    assert (v.allowed, v.heuristic, v.route) == (False, "circuit_open", None)
    assert "fallback" not in v.observation


def test_only_a_tool_that_is_down_is_routed(make_engine, clock, tmp_path):
    from agent_breaker.escalations import SqliteEscalations

    engine = make_engine({"tools": {"enrich": {"fallback": FALLBACK}}}, escalations=SqliteEscalations(tmp_path / "e.db"))
    for _ in range(3):  # a loop of the call's own failures: identical_failure, not an outage
        run(engine, clock, "enrich", {"q": 1}, False, None, error="invalid query")
    warned = run(engine, clock, "enrich", {"q": 1}, False, None, error="invalid query")
    assert (warned.allowed, warned.heuristic, warned.advisory, warned.route) == (True, "identical_failure", True, None)
    v = engine.check_tool_call(call("enrich", {"q": 1}))
    # the loop halt goes to a human (the escalation queue), not down the tool's tiers
    assert (v.heuristic, v.route["tier"]) == ("identical_failure", "escalate")


# ----------------------------------------------------------------------------- over HTTP


@pytest.mark.slow  # a subprocess or a server
def test_the_route_reaches_the_events_and_check_answers_of_the_real_server(tmp_path):
    import shutil

    import pytest

    pytest.importorskip("nemoguardrails")
    from _server import call as scall
    from _server import result as sresult
    from _server import start
    from agent_breaker.configs import config_path

    folder = tmp_path / "configs" / "with_fallback"
    shutil.copytree(config_path(), folder, symlinks=False)
    (folder / "config.yml").write_text(
        'colang_version: "2.x"\nmodels: []\ncustom_data:\n  agent_breaker:\n    tools:\n      enrich:\n        fallback:\n'
        "          alternatives: [{tool: enrich_v1, args: {domain: company.domain}}]\n"
        "          static: Lead enrichment is down; proceed without it.\n"
    )
    srv = start(args=("--config", str(folder.parent)))
    try:
        for i in range(5):
            down = sresult(i, "enrich", error="connection refused", error_kind="dependency")
            srv.verdicts(f"o{i}", scall(i, "enrich", {"n": i}), down, config_id="with_fallback")
        request = scall(9, "enrich", {"company": {"domain": SECRET}})
        [v] = srv.verdicts("s", request, config_id="with_fallback")
        assert (v["allowed"], v["heuristic"]) == (False, "circuit_open")
        assert v["route"] == {"tier": "alternative", "tool": "enrich_v1", "args": {"domain": SECRET}}
        event = {k: v for k, v in scall(10, "enrich", {"q": 1}).items() if k != "type"}
        r = srv.post("/v1/agent-breaker/check", {"config_id": "with_fallback", "session_id": "g", "event": event})
        assert r.status_code == 429
        assert r.json()["route"] == {"tier": "static", "answer": "Lead enrichment is down; proceed without it."}
    finally:
        srv.stop()
