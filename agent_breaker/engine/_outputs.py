"""What a decision asks for outside the session, as named data: the deciders return these and
`_apply` does them, in one place. Nothing here touches a store."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from .._outcomes import Outcome
from .._state import CallFacts, SessionState
from ..breaker import BreakerStateName, Transition
from ..config import AgentBreakerConfig
from ..detectors.loops import Heard
from ..verdicts import ResultVerdict, Trip, Verdict

V = TypeVar("V", Verdict, ResultVerdict)
#: a change of a view's pseudo-session (a tool view, a tenant's effects), given it and the
#: session as the view names it (a keyed hash); False: nothing changed
ViewChange = Callable[[SessionState, int], "bool | None"]


@dataclass(frozen=True, slots=True)
class Resume:
    """A user turn with news lifted the loop halt this escalation froze: record the resume."""

    escalation_id: str


@dataclass(frozen=True, slots=True)
class RecordOutcome:
    """A call's outcome for the shared breaker it went through (`probe`: its half-open slot)."""

    bkey: str
    probe: int | None
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class ReleaseProbe:
    """A half-open probe slot whose call proved nothing, or never ran: free for another."""

    bkey: str
    probe: int


@dataclass(frozen=True, slots=True)
class UpdateView:
    """A change of a tool view, or of a tenant's effects, for the deciding session."""

    vkey: str
    change: ViewChange


@dataclass(frozen=True, slots=True)
class UpdateFamily:
    """A sub-agent's result for its family's failing streaks, kept in the session `key` (its
    parent's), which every session of the family reads."""

    key: str
    facts: CallFacts
    cfg: AgentBreakerConfig
    failed: bool
    transient: bool
    outcome: int  # the failure as the streaks count it
    heard: Heard


@dataclass(frozen=True, slots=True)
class RememberMixed:
    """The session is past its opening: no tool view to read for it from now on."""


@dataclass(frozen=True, slots=True)
class Report:
    """A trip for the listeners and the counts."""

    trip: Trip
    severity: str


@dataclass(frozen=True, slots=True)
class Escalate:
    """The trip that froze the session for a human, and the id it froze it as."""

    trip: Trip
    frozen_as: str


@dataclass(frozen=True, slots=True)
class BreakerMoved:
    """A breaker found in `state`, maybe after `transition`: the gauge, and an incident for a move."""

    transition: Transition | None
    state: BreakerStateName


Effect = Resume | RecordOutcome | ReleaseProbe | UpdateView | UpdateFamily | RememberMixed | Report | Escalate | BreakerMoved
REMEMBER_MIXED = RememberMixed()


@dataclass(slots=True)
class Decided(Generic[V]):
    """What a decider returns besides the new state: the verdict, and the effects to apply once
    the state is written (in any order: `_apply` keeps its own)."""

    verdict: V
    effects: list[Effect] = field(default_factory=list)
    frozen: str | None = None  # refused for this escalation: is it still open? (asked before any effect)
