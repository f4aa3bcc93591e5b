"""What the engine answers: a check's trip, verdicts, the synthetic observation, and incidents."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["warn", "block"]
Scope = Literal["call", "tool", "session"]


@dataclass(frozen=True, slots=True)
class Trip:
    """What a check returns when it trips: the heuristic, its scope, why, and what the agent should do."""

    heuristic: str
    scope: Scope
    reason: str
    instruction: str
    counters: dict[str, Any] = field(default_factory=dict)
    retry_after_s: float | None = None
    #: a graduated heuristic's first trips in a pattern: the call runs, the agent is warned
    advisory: bool = False
    #: the heuristic is sure (a duplicate of a call still in flight): never only a warning
    certain: bool = False
    #: which of the heuristic's patterns tripped, where it follows several (a failing call's
    #: streak): its warnings are counted apart, and given back only by that pattern's progress
    pattern: str | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """The decision on one event. `allowed` is False only for a block in enforce mode; a
    would-trip verdict in observe mode is allowed with severity "warn". `advisory`: a graduated
    heuristic's warning (severity "warn" in every mode): the call runs, the agent reads the
    observation, and the same pattern's next trip cuts."""

    allowed: bool
    heuristic: str | None = None
    severity: Severity | None = None
    scope: Scope | None = None
    reason: str = ""
    counters: dict[str, Any] = field(default_factory=dict)
    observation: dict[str, Any] | None = None
    # identifies the execution for record_tool_result when the caller has no call_id
    call_id: str | None = None
    # a refused call's fallback (tools.<name>.fallback): {"tier": "alternative", "tool", "args"},
    # {"tier": "static", "answer"} or {"tier": "escalate", "escalation_id"}
    route: dict[str, Any] | None = None
    advisory: bool = False

    @property
    def tripped(self) -> bool:
        return self.heuristic is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "allowed": self.allowed,
            "heuristic": self.heuristic,
            "severity": self.severity,
            "scope": self.scope,
            "reason": self.reason,
            "counters": dict(self.counters),
            "observation": None if self.observation is None else dict(self.observation),
            "call_id": self.call_id,
            "route": None if self.route is None else dict(self.route),
            "advisory": self.advisory,
        }


ALLOW = Verdict(True)


def verdict_for(trip: Trip, severity: Severity, tool: str | None, call_id: str | None = None) -> Verdict:
    """The verdict of a trip: blocking or a warning, with its synthetic observation."""
    return Verdict(
        allowed=severity != "block",
        heuristic=trip.heuristic,
        severity=severity,
        scope=trip.scope,
        reason=trip.reason,
        counters=trip.counters,
        observation=observation(trip.heuristic, tool, trip.reason, trip.instruction, trip.retry_after_s, advisory=trip.advisory),
        call_id=call_id,
        advisory=trip.advisory,
    )


@dataclass(frozen=True, slots=True)
class ResultVerdict:
    """The engine's answer to a tool result: recorded, and whether it looks wrong."""

    accepted: bool
    heuristic: str | None = None
    reason: str = ""
    failed: bool = False
    breaker_state: str | None = None
    receipt: dict[str, Any] | None = None
    # the observation of the warning the call was let through with: repeated beside its answer
    # for an agent that reads context only after a call (Gemini CLI)
    warning: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "heuristic": self.heuristic,
            "reason": self.reason,
            "failed": self.failed,
            "breaker_state": self.breaker_state,
            "receipt": self.receipt,
            "warning": self.warning,
        }


#: what an advisory adds to the heuristic's instruction (given before the call runs or beside
#: its answer, so it says neither)
WARNING_NOTE = "This is a warning: this call is allowed. If the pattern goes on, the next such call is refused."


def observation(
    heuristic: str, tool: str | None, message: str, instruction: str, retry_after_s: float | None, *, advisory: bool = False
) -> dict[str, Any]:
    """The structured text the agent reads instead of the tool's output (a refusal), or beside
    it (an advisory: "warning" instead of "error")."""
    if advisory:
        return {
            "warning": heuristic.upper(),
            "tool": tool,
            "message": message,
            "actionable_instruction": f"{instruction} {WARNING_NOTE}",
            "retry_after_s": None if retry_after_s is None else round(retry_after_s, 3),
        }
    return {
        "error": heuristic.upper(),
        "tool": tool,
        "message": message,
        "actionable_instruction": instruction,
        "retry_after_s": None if retry_after_s is None else round(retry_after_s, 3),
    }


@dataclass(frozen=True, slots=True)
class Incident:
    """One trip, as listeners receive it. Counters and numbers only: no payload text."""

    ts: float
    session: str
    tenant: str | None
    feature: str | None
    agent: str | None
    heuristic: str
    severity: Severity
    scope: Scope
    tool: str | None
    reason: str
    counters: dict[str, Any]
    tokens_so_far: int
    cost_usd_so_far: float
    advisory: bool = False  # a graduated heuristic's warning: the call ran

    kind = "trip"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "ts": self.ts,
            "session": self.session,
            "tenant": self.tenant,
            "feature": self.feature,
            "agent": self.agent,
            "heuristic": self.heuristic,
            "severity": self.severity,
            "scope": self.scope,
            "tool": self.tool,
            "reason": self.reason,
            "counters": dict(self.counters),
            "tokens_so_far": self.tokens_so_far,
            "cost_usd_so_far": round(self.cost_usd_so_far, 6),
            "advisory": self.advisory,
        }


#: what a breaker transition is called in incidents: `breaker_forced` is any operator move
BREAKER_OPENED = "breaker_opened"
BREAKER_HALF_OPEN = "breaker_half_open"
BREAKER_CLOSED = "breaker_closed"
BREAKER_FORCED = "breaker_forced"
_BREAKER_EVENTS = {"open": BREAKER_OPENED, "half_open": BREAKER_HALF_OPEN, "closed": BREAKER_CLOSED}


@dataclass(frozen=True, slots=True)
class BreakerIncident:
    """A tool's breaker changed state: on-call hears when a tool goes down and when it
    recovers. `forced` marks an operator's move."""

    ts: float
    tool: str
    tenant: str | None
    src: str
    dst: str
    reason: str
    forced: bool
    counters: dict[str, Any]

    kind = "breaker"

    @property
    def event(self) -> str:
        return BREAKER_FORCED if self.forced else _BREAKER_EVENTS[self.dst]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "event": self.event,
            "ts": self.ts,
            "tool": self.tool,
            "tenant": self.tenant,
            "from": self.src,
            "to": self.dst,
            "reason": self.reason,
            "counters": dict(self.counters),
        }
