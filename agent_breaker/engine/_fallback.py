"""A call its tool's breaker refused, routed down the tool's fallback tiers: the first
alternative that is serving, else the static answer, else a human."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .. import heuristics as H
from ..breaker import BreakerState, BreakerStateName
from ..verdicts import Trip, Verdict
from ._facts import Step

#: refusals that say the tool itself is down: a tool's fallback serves these
TOOL_DOWN = frozenset({H.CIRCUIT_OPEN, H.CIRCUIT_HALF_OPEN})


def fallback(
    step: Step[Any],
    tool: str,
    verdict: Verdict,
    *,
    serving: Callable[[str], bool],
    escalate: Callable[[Trip], str | None],
) -> Verdict:
    """`serving(tool)`: would that tool's breaker let a call through now; `escalate(trip)`: hand
    the case to a human, its escalation id (None: no store)."""
    fb = step.p.cfg.tool(tool).fallback
    if fb is None:
        return verdict
    for alt in fb.alternatives:
        args = alt.mapped(step.ev.args)
        if alt.tool != tool and args is not None and serving(alt.tool):
            route = {"tier": "alternative", "tool": alt.tool, "args": args}
            return _routed(verdict, route, f"{tool} is unavailable: call {alt.tool} instead (the same request, mapped).")
    if fb.static is not None:
        route = {"tier": "static", "answer": fb.static}
        return _routed(verdict, route, f"{tool} is unavailable. Use this answer instead: {fb.static}")
    if fb.escalate:
        escalation = escalate(Trip(verdict.heuristic or H.CIRCUIT_OPEN, "tool", verdict.reason, "", dict(verdict.counters)))
        if escalation is not None:
            route = {"tier": "escalate", "escalation_id": escalation}
            return _routed(verdict, route, f"{tool} is unavailable: a human has the case ({escalation}). Stop here.")
    return verdict


def serving(st: BreakerState | None, now: float) -> bool:
    """Would a breaker in this state let a call through now (an open one whose interval is over
    lets its next call through as a probe)."""
    if st is None:
        return True
    if st.state is BreakerStateName.OPEN:
        return now >= st.opened_at + st.open_interval_s
    return st.state is not BreakerStateName.FORCED_OPEN


def _routed(verdict: Verdict, route: dict[str, Any], instruction: str) -> Verdict:
    """A refusal with the fallback taken: the route for the caller, and the observation that
    tells the agent (for the static tier, the answer itself)."""
    observation = {**(verdict.observation or {}), "actionable_instruction": instruction, "fallback": route["tier"]}
    if route["tier"] == "static":
        observation["answer"] = route["answer"]
    return replace(verdict, route=route, observation=observation)
