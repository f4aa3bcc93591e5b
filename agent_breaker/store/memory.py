"""In-process storage: the embedded default (`memory://`)."""

from __future__ import annotations

import random
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TypeVar

from ..breaker import BreakerConfig, BreakerState, BreakerStateName, Permission, Recorded, Transition
from ..breaker import core as breaker_core
from ..config import DEFAULT_MAX_SESSION_BYTES, DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_TTL_S
from .base import Reading, SessionUpdate, SpendAdd, read_each, update_each

R = TypeVar("R")

MAX_BREAKERS = 10_000
# the answer to an outcome that moved nothing, made once per state (a frozen dataclass costs ~2 us to build)
_UNMOVED = {state: Recorded(state) for state in BreakerStateName}


class MemoryStore:
    """Sessions in an LRU map with an idle TTL, a count and a byte budget; breakers in a dict.
    Thread-safe: one lock guards the maps, so every decision is atomic; a decision takes
    microseconds.

    Past `max_sessions`, `max_bytes` (each session's `weight()`), or a tenant's
    `max_sessions_per_tenant`, room is made in the heaviest tenant (the one over its quota, else
    the one holding the most bytes): its least recently used session goes first, so one tenant's
    flood evicts its own sessions, not another's. A halted (or escalated) session is compacted
    first (its halt, escalation, spend and breakers kept, its detectors' state dropped), and is
    dropped only when its tenant has nothing else left to give."""

    remote = False  # decisions take microseconds: callers need not leave their event loop

    def __init__(
        self,
        *,
        ttl_s: float = DEFAULT_SESSION_TTL_S,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        max_bytes: int = DEFAULT_MAX_SESSION_BYTES,
        max_sessions_per_tenant: int | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self.max_sessions_per_tenant = max_sessions_per_tenant
        self._sessions: OrderedDict[str, tuple[float, object]] = OrderedDict()
        self._weight: dict[str, int] = {}
        self._tenant_of: dict[str, str | None] = {}
        self._by_tenant: dict[str | None, OrderedDict[str, None]] = {}  # each tenant's sessions, LRU first
        self._tenant_bytes: dict[str | None, int] = {}
        self.bytes = 0  # the sessions' weight in all
        self._breakers: dict[str, BreakerState] = {}
        self._spend: dict[str, list[float]] = {}  # key -> [window index, tokens, cost]
        self._lock = threading.RLock()
        self._rng = rng or random.Random()
        self.evicted = 0  # sessions dropped for max_sessions or ttl_s (the sessions_evicted metric)

    # sessions
    def update_session(self, key: str, now: float, fn: Callable[[object | None], tuple[object, R]]) -> R:
        with self._lock:
            entry = self._sessions.get(key)
            state = None
            if entry is not None and now - entry[0] <= self.ttl_s:
                state = entry[1]
            new_state, result = fn(state)
            if new_state is not None:  # None: nothing to write, not even the last-used time
                self._put(key, now, new_state)
                self._evict(now, getattr(new_state, "tenant", None))
            return result

    def _put(self, key: str, now: float, state: object) -> None:
        self._sessions[key] = (now, state)
        self._sessions.move_to_end(key)
        tenant = getattr(state, "tenant", None)  # a session's key holds its tenant: it never changes
        weigh = getattr(state, "weight", None)
        weight = weigh() if callable(weigh) else 1_000
        change = weight - self._weight.get(key, 0)
        self._weight[key] = weight
        self._tenant_of[key] = tenant
        self.bytes += change
        self._tenant_bytes[tenant] = self._tenant_bytes.get(tenant, 0) + change
        order = self._by_tenant.setdefault(tenant, OrderedDict())
        order[key] = None
        order.move_to_end(key)

    def _drop(self, key: str) -> None:
        """Forget a session (its accounting with it)."""
        self._sessions.pop(key, None)
        weight = self._weight.pop(key, 0)
        tenant = self._tenant_of.pop(key, None)
        self.bytes -= weight
        left = self._tenant_bytes.get(tenant, 0) - weight
        order = self._by_tenant.get(tenant)
        if order is not None:
            order.pop(key, None)
        if order:
            self._tenant_bytes[tenant] = left
        else:
            self._by_tenant.pop(tenant, None)
            self._tenant_bytes.pop(tenant, None)

    def _evict(self, now: float, tenant: str | None = None) -> None:
        sessions = self._sessions
        # idle past ttl_s, least recently used first: stop at the first one still fresh
        while sessions:
            key, (seen, _) = next(iter(sessions.items()))
            if now - seen <= self.ttl_s:
                break
            self._drop(key)
            self.evicted += 1
        quota = self.max_sessions_per_tenant
        while quota is not None and len(self._by_tenant.get(tenant, ())) > quota:
            self._make_room_in(tenant)
        while len(sessions) > self.max_sessions or self.bytes > self.max_bytes:
            self._make_room_in(max(self._tenant_bytes, key=self._tenant_bytes.__getitem__))

    def _make_room_in(self, tenant: str | None) -> None:
        """Compact the tenant's least recently used halted session not yet compacted, else
        drop its least recently used session that is not halted, else its oldest one."""
        order = self._by_tenant[tenant]
        victim = None
        for key in order:
            state = self._sessions[key][1]
            if not _holds_a_halt(state):
                victim = key
                break
            if getattr(state, "loops", None) is not None and callable(getattr(state, "compacted", None)):
                small = state.compacted()  # type: ignore[attr-defined]
                if small.weight() < self._weight[key]:
                    self._reweigh(key, small)
                    return
        self._drop(victim if victim is not None else next(iter(order)))
        self.evicted += 1

    def _reweigh(self, key: str, state: object) -> None:
        seen = self._sessions[key][0]
        tenant = self._tenant_of[key]
        weight = state.weight()  # type: ignore[attr-defined]
        change = weight - self._weight[key]
        self._sessions[key] = (seen, state)
        self._weight[key] = weight
        self.bytes += change
        self._tenant_bytes[tenant] += change

    def peek_session(self, key: str) -> object | None:
        with self._lock:
            entry = self._sessions.get(key)
            return None if entry is None else entry[1]

    def session_count(self) -> int:
        return len(self._sessions)

    def seed_session(self, key: str, seen: float, state: object) -> None:
        """Start a session from a state known elsewhere (last used at `seen`): a shared store's
        fallback starts from its last view of the shared state instead of from nothing."""
        with self._lock:
            self._put(key, seen, state)
            self._evict(seen, getattr(state, "tenant", None))

    def forget_session(self, key: str) -> None:
        with self._lock:
            self._drop(key)

    # global spend
    def seed_spend(self, key: str, index: float, tokens: float, cost_usd: float) -> None:
        """Start `key`'s window `index` from totals known elsewhere (see seed_session)."""
        with self._lock:
            self._spend[key] = [index, tokens, cost_usd]

    def spend_window(self, key: str) -> tuple[float, float, float] | None:
        """(window index, tokens, cost) of `key`'s current window, if any."""
        with self._lock:
            entry = self._spend.get(key)
            return None if entry is None else (entry[0], entry[1], entry[2])

    def read_many(self, now: float, spends: Sequence[SpendAdd], sessions: Sequence[str], breakers: Sequence[str]) -> Reading:
        return read_each(self.add_spend, self.peek_session, self.breaker_state, now, spends, sessions, breakers)

    def update_sessions(self, now: float, updates: Sequence[SessionUpdate]) -> None:
        update_each(self.update_session, now, updates)

    def add_spend(self, key: str, tokens: float, cost_usd: float, window_s: float, now: float) -> tuple[float, float]:
        """Add one step's spend to `key`'s fixed window; return the window's totals."""
        index = now // window_s
        with self._lock:
            entry = self._spend.get(key)
            if entry is None or entry[0] != index:
                entry = self._spend[key] = [index, 0.0, 0.0]
            entry[1] += tokens
            entry[2] += cost_usd
            return entry[1], entry[2]

    # breakers
    def _breaker(self, key: str) -> BreakerState:
        st = self._breakers.get(key)
        if st is None:
            self._make_room()
            st = self._breakers[key] = BreakerState(key)
        return st

    def _make_room(self) -> None:
        if len(self._breakers) >= MAX_BREAKERS:
            # forget the oldest closed breaker: it carries no decision, only a short history
            oldest = next((k for k, b in self._breakers.items() if b.state is BreakerStateName.CLOSED), None)
            if oldest is not None:
                del self._breakers[oldest]

    def seed_breaker(self, key: str, state: BreakerState) -> None:
        """Start a breaker from a state known elsewhere (see seed_session)."""
        with self._lock:
            if key not in self._breakers:
                self._make_room()
            self._breakers[key] = state

    def breaker_acquire(self, key: str, cfg: BreakerConfig, now: float) -> Permission:
        with self._lock:
            return breaker_core.acquire(self._breaker(key), cfg, now)

    def breaker_record(
        self, key: str, cfg: BreakerConfig, now: float, *, failed: bool, slow: bool, probe: int | None, session: str | None = None
    ) -> Recorded:
        with self._lock:
            st = self._breaker(key)
            t = breaker_core.record(st, cfg, now, failed=failed, slow=slow, probe=probe, rng=self._rng, session=session)
            return _UNMOVED[st.state] if t is None else Recorded(st.state, t)

    def breaker_release(self, key: str, cfg: BreakerConfig, probe: int) -> None:
        with self._lock:
            st = self._breakers.get(key)
            if st is not None:
                breaker_core.release(st, probe)

    def breaker_force(self, key: str, cfg: BreakerConfig, now: float, state: BreakerStateName) -> Transition | None:
        with self._lock:
            return breaker_core.force(self._breaker(key), state, now, cfg)

    def breaker_state(self, key: str) -> BreakerState | None:
        with self._lock:
            return self._breakers.get(key)

    def breaker_list(self) -> list[tuple[str, BreakerState]]:
        with self._lock:
            # copies through the wire form: a reader must not share state a decision mutates
            return [(key, BreakerState.from_wire(key, st.to_wire())) for key, st in self._breakers.items()]


def _holds_a_halt(state: object) -> bool:
    return getattr(state, "halted", None) is not None or getattr(state, "escalation", None) is not None
