"""`agent-breaker demo`: the scripted agents through the real NeMo runtime."""

from __future__ import annotations

import pytest

pytest.importorskip("nemoguardrails")

from agent_breaker._demo import format_table, run_demo


def test_the_demo_cuts_the_runaways_and_leaves_the_legitimate_agents_alone():
    incidents = []
    agents, after = run_demo(listener=incidents.append)
    rows = {r["session"]: r for r in agents}
    # five HTTP 500s open the warehouse's breaker: the sixth call is refused (the session's own
    # identical_failure only warns it first) and the seventh halts the session
    assert rows["looping-agent"]["heuristic"] == "circuit_open"
    assert rows["fabricating-agent"]["heuristic"] == "unverified_claim"
    assert not rows["working-agent"]["tripped"] and not rows["polling-agent"]["tripped"]
    # "spend with" is what the incident says was spent when the guard stopped the agent
    by_session: dict = {}
    for i in incidents:
        if i.kind == "trip" and i.severity == "block":
            by_session.setdefault(i.session, i)
    for name in ("looping-agent", "fabricating-agent"):
        assert rows[name]["cost_with_usd"] == round(by_session[name].cost_usd_so_far, 6)
    assert "legitimate agents cut: 0" in format_table(list(rows.values()))


def test_after_a_trip_one_agent_is_rerouted_one_gets_the_static_answer_one_is_escalated(tmp_path, monkeypatch):
    from agent_breaker.escalations import SqliteEscalations

    db = tmp_path / "demo.db"
    monkeypatch.setenv("AGENT_BREAKER_ESCALATIONS_DB", str(db))
    _, after = run_demo()
    rows = {r["session"]: r for r in after}
    assert [(r["tool"], r["heuristic"], r["route"]) for r in after] == [
        ("enrich_lead", "circuit_open", "alternative"),
        ("score_lead", "circuit_open", "static"),
        ("sync_crm", "circuit_open", "escalate"),
    ]
    assert rows["rerouted-agent"]["then"] == "ran enrich_lead_v1{'domain': 'acme.example'}: allowed"
    assert rows["static-agent"]["then"] == "used the answer: Lead scoring is down; proceed without a score."
    escalation_id = rows["escalated-agent"]["escalation_id"]
    assert rows["escalated-agent"]["then"] == f"handed to a human ({escalation_id}); its next call is refused"
    records = {r.session: r for r in SqliteEscalations(db).list()}
    assert (records["escalated-agent"].id, records["escalated-agent"].status) == (escalation_id, "open")
    # the runaways of the first table went to a human too
    assert {s: r.heuristic for s, r in records.items()} == {
        "looping-agent": "identical_failure",
        "fabricating-agent": "unverified_claim",
        "escalated-agent": "circuit_open",
    }
