"""Tool circuit breakers: states, the transition table, and the pure decision core."""

from .core import BreakerState, Permission, Recorded, Transition, acquire, force, record, release
from .states import TRANSITIONS, BreakerStateName, IllegalTransition, check_transition

__all__ = [
    "TRANSITIONS",
    "BreakerState",
    "BreakerStateName",
    "IllegalTransition",
    "Permission",
    "Recorded",
    "Transition",
    "acquire",
    "check_transition",
    "force",
    "record",
    "release",
]
