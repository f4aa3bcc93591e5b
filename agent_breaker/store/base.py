"""The storage interface the engine reaches all state through.

A backend keeps two kinds of state: per-session state (trajectory, spend) and per-tool breaker
state shared by every session. It runs the engine's pure decision functions atomically on that
state: under a lock in memory, in one Lua script or one compare-and-set on Redis.
"""

from __future__ import annotations

from typing import Callable, Protocol, TypeVar

from ..breaker import BreakerState, BreakerStateName, Permission, Recorded, Transition
from ..config import BreakerConfig

R = TypeVar("R")


class StorageError(RuntimeError):
    """A backend failed (connection lost, timeout); the engine applies its failure policy."""


class Store(Protocol):
    #: whether update_session may run its function more than once (compare-and-set retries):
    #: side effects outside the session state must then happen after it returns
    retries_updates: bool

    def update_session(self, key: str, now: float, fn: Callable[[object | None], tuple[object, R]]) -> R:
        """Run fn(state or None) atomically for one session; fn returns (new state, result).
        A new state of None writes nothing (an event refused before it changed anything)."""

    def peek_session(self, key: str) -> object | None:
        """The session's state as stored (tests, inspection); None if unknown or evicted."""

    def add_spend(self, key: str, tokens: float, cost_usd: float, window_s: float, now: float) -> tuple[float, float]:
        """Atomically add spend to a fixed window shared by every worker; the window's totals."""

    def breaker_acquire(self, key: str, cfg: BreakerConfig, now: float) -> Permission: ...

    def breaker_record(
        self, key: str, cfg: BreakerConfig, now: float, *, failed: bool, slow: bool, probe: int | None
    ) -> Recorded: ...

    def breaker_force(self, key: str, cfg: BreakerConfig, now: float, state: BreakerStateName) -> Transition | None: ...

    def breaker_state(self, key: str) -> BreakerState | None: ...
