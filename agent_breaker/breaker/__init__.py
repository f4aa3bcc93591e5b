"""Tool circuit breakers: their settings, states, the transition table, and the pure decision core."""

from .config import BreakerConfig
from .core import BreakerState, Permission, Recorded, Transition, acquire, force, record, release
from .states import TRANSITIONS, BreakerStateName, IllegalTransition, check_transition

__all__ = [
    "TRANSITIONS",
    "BreakerConfig",
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
