"""Breaker states and the one table of legal moves between them."""

from __future__ import annotations

from enum import Enum

from .._errors import AgentBreakerError


class BreakerStateName(str, Enum):
    """The states of a breaker: the three of the pattern and three an operator sets."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"
    FORCED_OPEN = "forced_open"
    DISABLED = "disabled"
    METRICS_ONLY = "metrics_only"


S = BreakerStateName

#: the states only an operator sets (and only an operator leaves)
MANUAL_STATES = frozenset({S.FORCED_OPEN, S.DISABLED, S.METRICS_ONLY})


#: every legal (from, to) move; anything else raises IllegalTransition
TRANSITIONS: frozenset[tuple[BreakerStateName, BreakerStateName]] = frozenset(
    {
        (S.CLOSED, S.OPEN),  # failures tripped the breaker
        (S.OPEN, S.HALF_OPEN),  # the open interval elapsed
        (S.HALF_OPEN, S.CLOSED),  # K probes succeeded
        (S.HALF_OPEN, S.OPEN),  # a probe failed: open again, longer
        (S.OPEN, S.CLOSED),  # manual reset
    }
    # an operator may force, disable or meter any breaker, and reset it to closed
    | {(src, dst) for src in S for dst in MANUAL_STATES if src != dst}
    | {(src, S.CLOSED) for src in MANUAL_STATES}
)


class IllegalTransition(AgentBreakerError, RuntimeError):
    """A move the transition table does not allow; names the breaker and both states."""

    def __init__(self, breaker: str, src: BreakerStateName, dst: BreakerStateName) -> None:
        super().__init__(f"breaker {breaker!r}: illegal transition from {src.value} to {dst.value}")
        self.breaker = breaker
        self.src = src
        self.dst = dst


def check_transition(breaker: str, src: BreakerStateName, dst: BreakerStateName) -> None:
    if (src, dst) not in TRANSITIONS:
        raise IllegalTransition(breaker, src, dst)
