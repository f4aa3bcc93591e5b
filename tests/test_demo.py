"""`agent-breaker demo`: the scripted agents through the real NeMo runtime."""

from __future__ import annotations

import pytest

pytest.importorskip("nemoguardrails")

from agent_breaker.demo import format_table, run_demo


def test_the_demo_cuts_the_runaways_and_leaves_the_legitimate_agents_alone():
    incidents = []
    rows = {r["session"]: r for r in run_demo(listener=incidents.append)}
    assert rows["looping-agent"]["heuristic"] == "identical_failure"
    assert rows["fabricating-agent"]["heuristic"] == "unverified_claim"
    assert not rows["working-agent"]["tripped"] and not rows["polling-agent"]["tripped"]
    # "spend with" is what the incident says was spent when the guard stopped the agent
    by_session = {i.session: i for i in incidents if i.kind == "trip"}
    for name in ("looping-agent", "fabricating-agent"):
        assert rows[name]["cost_with_usd"] == round(by_session[name].cost_usd_so_far, 6)
    assert "legitimate agents cut: 0" in format_table(list(rows.values()))
