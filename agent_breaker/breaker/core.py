"""The tool circuit breaker as pure functions over plain state.

`acquire` decides whether one call may run now; `record` takes its outcome. Both take the
state, the config and `now`, change the state in place and say which transition happened, if
any. Storage backends run them under a lock (memory) or mirror them in Lua (Redis).

A shared breaker (one tool's, for every session of a tenant) is told which session each
failure came from, and opens only once `min_sessions` sessions failed within its window: one
session's failures, however many, are that session's business (its own breaker, kept in its
state, stops it), not an outage to shut the tool for everyone.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

from .._windows import BucketWindow
from .config import BreakerConfig
from .states import BreakerStateName as S
from .states import check_transition

# window series: calls, failed calls, slow calls, calls failed or slow (a call counts once)


@dataclass(slots=True)
class BreakerState:
    """One tool's breaker: its state, sliding window of outcomes, open interval and probes in flight."""

    name: str
    state: S = S.CLOSED
    window: BucketWindow | None = None
    opened_at: float = 0.0
    open_interval_s: float = 0.0
    probes: list[list[float]] = field(default_factory=list)  # [probe id, admitted at] of probes in flight
    next_probe: int = 0
    probe_successes: int = 0
    consecutive_failures: int = 0
    changed_at: float = 0.0
    # a shared breaker's latest failing sessions: [session tag, last failed at], newest last
    failing: list[list[Any]] = field(default_factory=list)

    def to_wire(self) -> dict[str, Any]:
        """The one encoding of a breaker: what store/breaker.lua reads and writes, and what a
        session keeps of its own breakers."""
        return {
            "state": self.state.value,
            "window": None if self.window is None else self.window.to_wire(),
            "opened_at": self.opened_at,
            "open_interval_s": self.open_interval_s,
            "probes": self.probes,
            "next_probe": self.next_probe,
            "probe_successes": self.probe_successes,
            "consecutive_failures": self.consecutive_failures,
            "changed_at": self.changed_at,
            "failing": self.failing,
        }

    @classmethod
    def from_wire(cls, name: str, d: dict[str, Any]) -> BreakerState:
        w = d.get("window")
        return cls(
            name,
            S(d["state"]),
            BucketWindow.from_wire(w) if isinstance(w, dict) and w else None,
            d["opened_at"],
            d["open_interval_s"],
            [list(p) for p in d["probes"] or []],
            int(d["next_probe"]),
            int(d["probe_successes"]),
            int(d["consecutive_failures"]),
            d["changed_at"],
            [list(f) for f in d.get("failing") or []],  # none in a breaker stored before it existed
        )

    def failures_in_window(self, now: float) -> int:
        """Failed calls in the sliding window at `now` (reading evicts old buckets: read a copy)."""
        return 0 if self.window is None else round(self.window.read(now)[1])

    @property
    def open_until(self) -> float | None:
        """When an OPEN breaker lets its first probe through; None in any other state."""
        return self.opened_at + self.open_interval_s if self.state is S.OPEN else None

    def ensure_window(self, cfg: BreakerConfig) -> BucketWindow:
        if self.window is None or self.window.window_s != cfg.window_s or self.window.bucket_s != cfg.bucket_s:
            self.window = BucketWindow(cfg.window_s, cfg.bucket_s, 4)
        return self.window


@dataclass(frozen=True, slots=True)
class Transition:
    """A move between breaker states, with when and why (an incident when it happens)."""

    breaker: str
    src: S
    dst: S
    at: float
    reason: str
    open_interval_s: float | None = None  # into OPEN: how long until the first probe may run


@dataclass(frozen=True, slots=True)
class Recorded:
    """A store's answer to an outcome: the breaker's state right after it, and the move it
    caused, if any (read in the same atomic step)."""

    state: S
    transition: Transition | None = None


@dataclass(frozen=True, slots=True)
class Permission:
    """A breaker's answer to one call: allowed or not, its state, and a probe id in HALF_OPEN."""

    allowed: bool
    state: S
    probe: int | None = None  # the probe's id in HALF_OPEN: hand it back to record()
    retry_after_s: float | None = None
    transition: Transition | None = None
    # metrics-only breakers let calls through but say they would have refused them
    would_refuse: bool = False


def _move(st: BreakerState, dst: S, now: float, reason: str) -> Transition:
    check_transition(st.name, st.state, dst)
    t = Transition(st.name, st.state, dst, now, reason)
    st.state = dst
    st.changed_at = now
    return t


def _open(st: BreakerState, cfg: BreakerConfig, now: float, interval_s: float, reason: str, rng: random.Random) -> Transition:
    if cfg.jitter_pct:
        spread = interval_s * cfg.jitter_pct / 100.0
        interval_s = min(max(0.001, interval_s + rng.uniform(-spread, spread)), cfg.max_open_s)
    t = _move(st, S.OPEN, now, reason)
    st.opened_at = now
    st.open_interval_s = interval_s
    st.probes.clear()
    st.probe_successes = 0
    return replace(t, open_interval_s=interval_s)


# the answers that depend on the state alone, made once: a frozen dataclass costs ~2 us to build
_CLOSED = Permission(True, S.CLOSED)
_DISABLED = Permission(True, S.DISABLED)
_FORCED_OPEN = Permission(False, S.FORCED_OPEN)


def acquire(st: BreakerState, cfg: BreakerConfig, now: float) -> Permission:
    state = st.state
    if state is S.CLOSED:
        return _CLOSED
    if state is S.DISABLED:
        return _DISABLED
    if state is S.METRICS_ONLY:
        # sessions named with the failures: the breaker is shared, and would refuse as it would open
        return Permission(True, state, would_refuse=_should_trip(st, cfg, now, bool(st.failing)) is not None)
    if state is S.FORCED_OPEN:
        return _FORCED_OPEN
    transition = None
    if state is S.OPEN:
        reopen_at = st.opened_at + st.open_interval_s
        if now < reopen_at:
            return Permission(False, state, retry_after_s=reopen_at - now)
        transition = _move(st, S.HALF_OPEN, now, f"open interval of {st.open_interval_s:g}s elapsed")
        st.probes.clear()
        st.probe_successes = 0
    # HALF_OPEN: probes that never reported free their slot after probe_timeout_s
    if st.probes:
        st.probes = [p for p in st.probes if now - p[1] < cfg.probe_timeout_s]
    if len(st.probes) + st.probe_successes < cfg.half_open_probes:
        probe = st.next_probe
        st.next_probe += 1
        st.probes.append([probe, now])
        return Permission(True, S.HALF_OPEN, probe=probe, transition=transition)
    oldest = min(p[1] for p in st.probes) if st.probes else now
    return Permission(False, S.HALF_OPEN, retry_after_s=max(0.0, oldest + cfg.probe_timeout_s - now), transition=transition)


def _should_trip(st: BreakerState, cfg: BreakerConfig, now: float, shared: bool) -> str | None:
    reason = _threshold_met(st, cfg, now)
    if reason is None or not shared:
        return reason
    since = now - cfg.window_s
    sessions = sum(1 for _tag, at in st.failing if at > since)
    return reason if sessions >= cfg.min_sessions else None


def _note_failing(st: BreakerState, cfg: BreakerConfig, now: float, session: str) -> None:
    """Remember `session` among the latest failing ones (as many as `min_sessions` asks for)."""
    others = [f for f in st.failing if f[0] != session and f[1] > now - cfg.window_s]
    st.failing = [*others[max(0, len(others) - cfg.min_sessions + 1) :], [session, now]]


def _threshold_met(st: BreakerState, cfg: BreakerConfig, now: float) -> str | None:
    if cfg.consecutive_failures is not None and st.consecutive_failures >= cfg.consecutive_failures:
        return f"{st.consecutive_failures} failures in a row (threshold {cfg.consecutive_failures})"
    calls, failures, _slow, failed_or_slow = st.ensure_window(cfg).read(now)
    bad = failed_or_slow if cfg.slow_calls_are_failures else failures
    if cfg.failure_threshold is not None and bad >= cfg.failure_threshold:
        return f"{bad:g} failures in {cfg.window_s:g}s (threshold {cfg.failure_threshold})"
    if cfg.failure_rate_pct is not None and calls >= cfg.min_calls and bad * 100.0 >= cfg.failure_rate_pct * calls:
        return f"failure rate {bad * 100.0 / calls:.0f}% over {calls:g} calls (threshold {cfg.failure_rate_pct:g}%)"
    return None


def record(
    st: BreakerState,
    cfg: BreakerConfig,
    now: float,
    *,
    failed: bool,
    slow: bool = False,
    probe: int | None = None,
    rng: random.Random | None = None,
    session: str | None = None,
) -> Transition | None:
    """Take one call's outcome. `probe` is the id from its Permission: only a probe of the
    current half-open round counts there (a late or timed-out probe's result is ignored).
    `session`: the calling session's tag, when the breaker is shared (the engine always names
    it; without one, the outcome opens the breaker by the thresholds alone)."""
    state = st.state
    if state is S.DISABLED or state is S.FORCED_OPEN or state is S.OPEN:
        # open: a late result of a call admitted before the breaker opened tells nothing new
        return None
    if state is S.HALF_OPEN:
        slot = next((i for i, p in enumerate(st.probes) if p[0] == probe), None) if probe is not None else None
        if slot is None:
            return None
        del st.probes[slot]
        if failed or (slow and cfg.slow_calls_are_failures):
            interval = min(max(st.open_interval_s, cfg.open_s) * cfg.backoff_multiplier, cfg.max_open_s)
            return _open(st, cfg, now, interval, "a half-open probe failed", rng or random.Random())
        st.probe_successes += 1
        if st.probe_successes >= cfg.half_open_probes:
            _reset(st, cfg)
            return _move(st, S.CLOSED, now, f"{cfg.half_open_probes} half-open probes succeeded")
        return None
    bad = failed or (slow and cfg.slow_calls_are_failures)
    st.consecutive_failures = st.consecutive_failures + 1 if bad else 0
    st.ensure_window(cfg).add(now, 1.0, 1.0 if failed else 0.0, 1.0 if slow else 0.0, 1.0 if failed or slow else 0.0)
    if bad and session is not None:
        _note_failing(st, cfg, now, session)
    if state is S.CLOSED:
        reason = _should_trip(st, cfg, now, session is not None)
        if reason is not None:
            return _open(st, cfg, now, cfg.open_s, reason, rng or random.Random())
    return None


def release(st: BreakerState, probe: int) -> None:
    """A half-open probe admitted for a call that was then refused for another reason: its slot
    is free again (no outcome is recorded)."""
    st.probes = [p for p in st.probes if p[0] != probe]


OPERATOR_STATES = frozenset({S.CLOSED, S.FORCED_OPEN, S.DISABLED, S.METRICS_ONLY})
#: their names, sorted (what the admin route and the CLI accept)
SETTABLE_STATES = sorted(s.value for s in OPERATOR_STATES)
#: the reason of every operator move
OPERATOR = "operator"


def force(st: BreakerState, dst: S, now: float, cfg: BreakerConfig) -> Transition | None:
    """Operator moves: force open, disable, metrics-only, or reset to closed. Resetting a
    closed breaker clears its counters and is no transition; forcing the state a breaker is
    in already does nothing (an operator may repeat a command)."""
    if dst not in OPERATOR_STATES:
        raise ValueError(f"breaker {st.name!r}: an operator may set {sorted(s.value for s in OPERATOR_STATES)}, not {dst.value}")
    if dst is S.CLOSED and st.state is S.CLOSED:
        _reset(st, cfg)
        return None
    if dst is st.state:
        return None
    t = _move(st, dst, now, OPERATOR)
    if dst is S.CLOSED:
        _reset(st, cfg)
    return t


def _reset(st: BreakerState, cfg: BreakerConfig) -> None:
    st.ensure_window(cfg).clear()
    st.open_interval_s = 0.0
    st.probes.clear()
    st.probe_successes = 0
    st.consecutive_failures = 0
    st.failing.clear()
