"""Shared state on Redis, for agent fleets (`redis://host:port/db`; a Redis Cluster:
`redis+cluster://host:port`, see redis_client.py).

- Tool breakers: every decision is one Lua script (`breaker.lua`, registered once, EVALSHA),
  so a tool that fails in one worker is open in all of them. Transitions are published; each
  worker keeps a near-cache, so a call to a tool known CLOSED costs no round trip. The cache
  entry goes stale after `near_cache_s`, so correctness never depends on a broadcast.
- Sessions (a run's calls may land on different workers): one compact JSON value per session
  (`codec.py`, hashes and numbers only), read, decided in Python, and written back with a
  compare-and-set on its version (`session_cas.lua`): two round trips, retried on conflict.
- Keys are prefixed and hash-tagged (`{...}`) per session and per breaker, and expire. The
  caller's part of every key (session, breaker, spend key) is percent-escaped
  (`base.escape_key_part`): distinct keys never share a Redis key, and no id can close the
  hash tag early or open another one.
- Redis down or slow: every command has a timeout; on an error the store either raises
  StorageError (`on_error="raise"`, the engine then fails closed or open as configured) or
  falls back to in-process state (`on_error="local"`) and retries Redis after `retry_s`.

An outage without amnesia (`on_error="local"`):
- Mirror: the store keeps the last state it read from or wrote to Redis for the most recently
  used MIRROR_SESSIONS sessions (at most MIRROR_SESSION_BYTES of them, and a quarter of
  `max_bytes`; the last written state of WRITTEN_SESSIONS, an eighth by weight: the outage
  state gets the rest of that budget), MIRROR_BREAKERS
  breakers and MIRROR_SPEND_WINDOWS spend keys.
  During an outage a key's in-process state starts from its mirror on first use, so a halted
  session stays halted, an open breaker stays open and a spend window keeps its total. A
  breaker another worker opened (its broadcast is in the near-cache) starts open until the
  broadcast reopen time (forced open if it was forced), unless the mirror refuses as long.
- Write-back: the first operation after `retry_s` (or a call to `resync()`) first writes back
  what was done in-process, then uses Redis again:
  - sessions touched during the outage (the first OUTAGE_SESSIONS): the local state itself if
    the Redis copy is still the one the mirror had (compare-and-set), else the Redis copy plus
    the steps, tokens, cost and per-tool tokens taken locally, and a halt if either side has one;
  - breaker outcomes (the last OUTAGE_OUTCOMES), replayed in order through the breaker script
    at their own times, without probe ids (a breaker that is half-open on Redis ignores them);
  - global spend taken locally (in up to OUTAGE_SPEND_WINDOWS windows), added to the shared windows.
  Each write-back also sets a marker key (same hash tag, same TTL), so a write whose reply was
  lost is not repeated by the next attempt. If Redis fails mid-way, the write-back stops and the
  rest waits for the next recovery; until everything is written back this worker keeps using
  its in-process state. The write-back holds the store's lock: this worker waits for it, at
  most three round trips per item, each bounded by the command timeout.
- Not kept: sessions beyond the first OUTAGE_SESSIONS, outcomes before the last OUTAGE_OUTCOMES
  and spend windows beyond OUTAGE_SPEND_WINDOWS are guarded in-process but never written back.
  When the Redis copy of a session moved on during the outage, only spend and halts are merged
  (not loop streaks, calls awaiting results or receipts). Operator moves (breaker_force)
  during an outage stay in-process. Halts and breaker states that only other workers know
  (never read by this one, never broadcast to it) are unknown here during the outage. The
  command whose reply was lost to the timeout that started the outage may have run on Redis:
  that one step or breaker outcome can then count once more when it is written back.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypeVar, cast
from urllib.parse import unquote

import redis as redis_lib
from redis.exceptions import NoScriptError

from .._state import MAX_TOOLS, SessionState, put_bounded
from ..breaker import (
    TRANSITIONS,
    BreakerConfig,
    BreakerState,
    BreakerStateName,
    IllegalTransition,
    Permission,
    Recorded,
    Transition,
)
from ..config import DEFAULT_MAX_SESSION_BYTES
from . import codec
from .base import (
    CorruptState,
    Reading,
    SessionUpdate,
    SpendAdd,
    StorageError,
    checked_prefix,
    escape_key_part,
    read_each,
    update_each,
    without_password,
)
from .memory import MemoryStore
from .redis_client import REDIS_ERRORS, ClusterUnreachable, redis_client, register_script, subscriber_client

R = TypeVar("R")
log = logging.getLogger("agent_breaker.store")

CHANNEL = "agent-breaker:breaker-transitions"
MAX_CAS_ATTEMPTS = 32
CAS_BACKOFF_S = 0.0005  # doubled per conflict, with jitter, capped at 20 ms
KEY_LOCK_STRIPES = 64
WRITTEN_SESSIONS = 128  # sessions whose last written state a worker keeps as objects (by count)
NEAR_CACHE_MAX = 10_000  # breakers in the near-cache (it is cleared when full)
SCAN_COUNT = 500  # keys per SCAN step, and per pipeline of GETs, when breakers are listed
# the last Redis state of this many keys (least recently used go first) seeds the in-process
# state during an outage
MIRROR_SESSIONS = 10_000
MIRROR_SESSION_BYTES = 64 * 2**20  # encoded sessions (typically 0.5 to 25 KB each)
MIRROR_BREAKERS = 10_000
MIRROR_SPEND_WINDOWS = 10_000  # one window per spend key (tenant and feature)
# what an outage leaves to write back: the first sessions touched, the last breaker outcomes,
# the first spend windows
OUTAGE_SESSIONS = 1_000
OUTAGE_OUTCOMES = 1_000
OUTAGE_SPEND_WINDOWS = 1_000
_S = BreakerStateName


#: a session's spend: steps, tokens, cost, tokens per tool
_Spend = tuple[int, int, float, dict[str, int]]


def _spend_of(s: SessionState | None) -> _Spend:
    return (0, 0, 0.0, {}) if s is None else (s.spend.steps, s.spend.tokens, s.spend.cost_usd, dict(s.spend.tool_tokens))


def _digest(raw: bytes) -> bytes:
    return hashlib.blake2b(raw, digest_size=16).digest()


@dataclass(slots=True)
class _Touched:
    """A session used in-process during an outage: the digest of the Redis value it started
    from (None: none known) and that value's spend, when it was last used, and a write-back
    whose reply was lost (marker, digest and spend of what it wrote)."""

    base: bytes | None
    start: _Spend
    seen: float
    sent: tuple[str, bytes, _Spend] | None = None


@dataclass(slots=True)
class _Outcome:
    """A breaker outcome taken in-process during an outage, and its replay's marker if the
    replay's reply was lost."""

    key: str
    cfg: BreakerConfig
    ts: float
    failed: bool
    slow: bool
    session: str | None = None
    sent: str | None = None


@dataclass(slots=True)
class _Spent:
    """Global spend taken in-process in one window, and a write-back whose reply was lost
    (marker, tokens, cost)."""

    tokens: float = 0.0
    cost_usd: float = 0.0
    sent: tuple[str, float, float] | None = None


def _lru_put(d: OrderedDict[Any, Any], key: Any, value: Any, cap: int) -> None:
    d[key] = value
    d.move_to_end(key)
    while len(d) > cap:
        d.popitem(last=False)


def _script(name: str) -> str:
    return resources.files("agent_breaker.store").joinpath(name).read_text(encoding="utf-8")


def breaker_script() -> str:
    """breaker.lua with its table of legal moves written in from breaker/states.py: the one
    transition table, not a copy kept by hand."""
    legal = ", ".join(
        f'["{src.value}>{dst.value}"] = true' for src, dst in sorted(TRANSITIONS, key=lambda t: (t[0].value, t[1].value))
    )
    states = ", ".join(f'["{s.value}"] = true' for s in _S)
    return _script("breaker.lua").replace("__TRANSITIONS__", "{" + legal + "}").replace("__STATES__", "{" + states + "}")


class RedisStore:
    """Guard state shared by a fleet through Redis (see the module docstring)."""

    remote = True  # every decision waits on the network: async callers run it in a thread

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "ab",
        ttl_s: float = 3600.0,
        max_sessions: int = 100_000,
        max_bytes: int = DEFAULT_MAX_SESSION_BYTES,
        timeout_s: float = 0.25,
        on_error: str = "local",
        retry_s: float = 1.0,
        near_cache_s: float = 1.0,
        listen: bool = True,
        rng: random.Random | None = None,
    ) -> None:
        if on_error not in ("local", "raise"):
            raise ValueError(f"on_error must be 'local' or 'raise', but was {on_error!r}")
        checked_prefix(prefix)
        self.url = url
        self.shown_url = without_password(url)  # what logs and errors name
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.on_error = on_error
        self.retry_s = retry_s
        self.near_cache_s = near_cache_s
        self.redis = redis_client(url, timeout_s=timeout_s)
        self._breaker_script = register_script(self.redis, breaker_script())
        self._cas_script = register_script(self.redis, _script("session_cas.lua"))
        self._spend_script = register_script(self.redis, _script("spend.lua"))
        # what this worker holds of sessions, within sessions.max_bytes: the mirror (encoded, a
        # quarter at most) and what an outage keeps in process (the rest)
        self.mirror_bytes = min(MIRROR_SESSION_BYTES, max_bytes // 4)
        # the sessions last written, kept as objects, by weight: heavy ones held 3x the budget
        self.written_bytes = max_bytes // 8
        local_bytes = max_bytes - self.mirror_bytes - self.written_bytes
        self._local = MemoryStore(ttl_s=ttl_s, max_sessions=max_sessions, max_bytes=local_bytes)
        self._rng = rng or random.Random()
        self._cfg_json: dict[BreakerConfig, str] = {}
        # breaker key -> (state, open until (event time), fresh until (monotonic))
        self._cache: dict[str, tuple[str, float, float]] = {}
        self._down_until = 0.0
        self.failures = 0
        # an outage without amnesia (on_error="local", module docstring); self._lock guards
        # these, self._local and the write-back, and is always taken before self._local's own
        self._keep = on_error == "local"
        self._lock = threading.RLock()
        # one writer per key at a time in this worker: its threads wait their turn instead of
        # losing compare-and-set races to each other (a tool view is updated by every session)
        self._key_locks = [threading.Lock() for _ in range(KEY_LOCK_STRIPES)]
        # the last state this worker wrote of its most recent sessions, as objects: the next
        # update of one starts from it without a read or a decode (taken out while in use)
        self._written: OrderedDict[str, tuple[SessionState, int]] = OrderedDict()  # key -> (state, weight)
        self._written_weight = 0
        self._sessions_seen: OrderedDict[str, tuple[float, bytes]] = OrderedDict()  # key -> (last used, value)
        self._sessions_seen_bytes = 0
        self._breakers_seen: OrderedDict[str, dict[str, Any]] = OrderedDict()  # key -> the script's `raw`
        self._spend_seen: OrderedDict[str, tuple[int, float, float]] = OrderedDict()  # key -> (window, tokens, cost)
        self._touched: dict[str, _Touched] = {}
        self._outcomes: deque[_Outcome] = deque(maxlen=OUTAGE_OUTCOMES)
        self._spent: dict[tuple[str, float, int], _Spent] = {}  # (key, window_s, window index) -> spend
        self._dirty = False  # in-process state holds something Redis has not got yet
        self._listener: threading.Thread | None = None
        self._stop = threading.Event()
        if listen:
            self._listener = threading.Thread(target=self._listen, name="agent-breaker-redis-listener", daemon=True)
            self._listener.start()

    # ------------------------------------------------------------- keys and errors
    def session_key(self, key: str) -> str:
        return f"{self.prefix}:{{s:{escape_key_part(key)}}}"

    def breaker_key(self, key: str) -> str:
        return f"{self.prefix}:{{b:{escape_key_part(key)}}}"

    def spend_key(self, key: str, index: int) -> str:
        return f"{self.prefix}:{{g:{escape_key_part(key)}}}:{index}"

    @staticmethod
    def _marker(rkey: str) -> str:
        """A fresh write-back marker key, in the hash slot of the key it marks."""
        return f"{rkey}:merged:{secrets.token_hex(8)}"

    def _get(self, key: str) -> bytes | None:
        return cast("bytes | None", self.redis.get(key))

    def _session_value(self, key: str, skey: str) -> bytes | None:
        """A session's stored value; CorruptState when its key holds another type."""
        try:
            return self._get(skey)
        except redis_lib.ResponseError as exc:
            return cast("bytes | None", _held(exc, "session", key, skey))

    def _available(self) -> bool:
        return time.monotonic() >= self._down_until

    def _use_local(self) -> bool:
        """Whether an operation runs on in-process state: Redis is away, or is back but what
        was done without it is not written back yet (this tries to write it back first)."""
        if self._dirty:
            return not (self._available() and self.resync())
        return not self._available()

    def _redis_or_local(self, remote: Callable[[], R], local: Callable[[], R]) -> R:
        """The one way every operation reaches Redis: a driver error becomes the failure policy
        (in-process state, or StorageError), and while Redis is away `local` answers."""
        if self._use_local():
            return self._degraded(local)
        try:
            return remote()
        except REDIS_ERRORS as exc:
            self._failed(exc)
            return local()

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        with self._lock:
            self._written.clear()  # what Redis holds after the outage is read again
            self._written_weight = 0
        self._down_until = time.monotonic() + self.retry_s
        log.warning(
            "agent-breaker: Redis at %s failed (%s); %s for %.1fs",
            self.shown_url,
            _failure(exc),
            "using in-process state" if self.on_error == "local" else "failing decisions",
            self.retry_s,
        )
        if self.on_error == "raise":
            raise StorageError(f"Redis at {self.shown_url}: {type(exc).__name__}") from exc

    # ------------------------------------------------------------- sessions
    def update_session(self, key: str, now: float, fn: Callable[[object | None], tuple[object, R]]) -> R:
        return self._redis_or_local(lambda: self._update_on_redis(key, now, fn), lambda: self._local_update(key, now, fn))

    def _update_on_redis(self, key: str, now: float, fn: Callable[[object | None], tuple[object, R]]) -> R:
        skey = self.session_key(key)
        with self._key_locks[hash(skey) % KEY_LOCK_STRIPES]:
            return self._cas_loop(key, skey, now, fn)

    def _cas_loop(self, key: str, skey: str, now: float, fn: Callable[[object | None], tuple[object, R]]) -> R:
        # the first decision starts from what this worker last wrote of the session (the state
        # itself, else its encoding in the mirror), without a read: the compare-and-set fails if
        # anyone wrote it since (an expired key included), and the session is read then. One
        # round trip (and a decode) fewer per update while a session's calls reach one worker.
        written = self._take_written(key)
        raw, fresh = (None if written is not None else self._mirrored(key)), False
        conflicts = 0
        state: SessionState | None
        while True:
            if written is not None:
                state, written = written, None  # decided on once: a failed write reads again
            else:
                if raw is None and not fresh:
                    raw, fresh = self._session_value(key, skey), True
                state = _decode_session(raw, key, skey)
                self._saw_session(key, now, raw if state is not None else None)
            version = state.version if state is not None else 0
            new_state, result = fn(state)
            if new_state is None:
                if fresh:
                    return result
                raw = None  # no write checks a decision that writes nothing: decide on a fresh read
                continue
            assert isinstance(new_state, SessionState)  # the engine's decisions return sessions
            new_state.version = version + 1
            data = codec.encode(new_state)
            if self._cas_script(keys=[skey], args=[version, data, max(1, int(self.ttl_s)), codec.FORMAT]):
                self._saw_session(key, now, data)
                self._keep_written(key, new_state)
                return result
            if fresh:
                # another worker wrote this session in between: back off, then decide again
                conflicts += 1
                if conflicts == MAX_CAS_ATTEMPTS:
                    raise StorageError(f"session {key!r}: {MAX_CAS_ATTEMPTS} conflicting writers in a row")
                time.sleep(min(0.02, CAS_BACKOFF_S * 2**conflicts) * self._rng.uniform(0.5, 1.5))
            raw, fresh = None, False

    def update_sessions(self, now: float, updates: Sequence[SessionUpdate]) -> None:
        def remote() -> None:
            if len(updates) == 1:
                self._update_on_redis(updates[0][0], now, updates[0][1])
                return
            self._update_many_on_redis(now, updates)

        self._redis_or_local(remote, lambda: update_each(self._local_update, now, updates))

    def _update_many_on_redis(self, now: float, updates: Sequence[SessionUpdate]) -> None:
        """One pipeline reads every session, one writes each changed one by compare-and-set (on
        a cluster, one batch per node); a write that conflicts, or that a node without the script
        did not run, is decided again alone, as `update_session` decides."""
        skeys = [self.session_key(key) for key, _ in updates]
        pipe = self.redis.pipeline(transaction=False)
        for skey in skeys:
            pipe.get(skey)
        raws = pipe.execute(raise_on_error=False)
        again: list[SessionUpdate] = []
        writes: list[tuple[SessionUpdate, str, bytes, SessionState]] = []
        pipe = self.redis.pipeline(transaction=False)
        for (key, fn), skey, reply in zip(updates, skeys, raws, strict=True):
            try:
                raw = _replied(reply)
                state = _decode_session(raw, key, skey)
            except StorageError:
                again.append((key, fn))  # alone, it fails as update_session fails
                continue
            self._saw_session(key, now, raw if state is not None else None)
            version = state.version if state is not None else 0
            new_state, _ = fn(state)
            if new_state is None:
                continue
            assert isinstance(new_state, SessionState)  # the engine's decisions return sessions
            new_state.version = version + 1
            data = codec.encode(new_state)
            args = [version, data, max(1, int(self.ttl_s)), codec.FORMAT]
            # as a command: redis-py refuses `evalsha` in a cluster's pipeline (see read_many)
            pipe.execute_command("EVALSHA", self._cas_script.sha, 1, skey, *args)
            writes.append(((key, fn), skey, data, new_state))
        replies = pipe.execute(raise_on_error=False) if writes else []
        for ((key, fn), _skey, data, new_state), reply in zip(writes, replies, strict=True):
            if isinstance(reply, Exception) or not reply:
                again.append((key, fn))
                continue
            self._saw_session(key, now, data)
            self._keep_written(key, new_state)
        update_each(self._update_on_redis, now, again)

    def _take_written(self, key: str) -> SessionState | None:
        with self._lock:
            kept = self._written.pop(key, None)
            if kept is None:
                return None
            self._written_weight -= kept[1]
            return kept[0]

    def _keep_written(self, key: str, state: SessionState) -> None:
        weight = state.weight()
        with self._lock:
            old = self._written.pop(key, None)
            self._written_weight += weight - (old[1] if old else 0)
            self._written[key] = (state, weight)
            while self._written and (len(self._written) > WRITTEN_SESSIONS or self._written_weight > self.written_bytes):
                self._written_weight -= self._written.popitem(last=False)[1][1]

    def _mirrored(self, key: str) -> bytes | None:
        with self._lock:
            seen = self._sessions_seen.get(key)
            return None if seen is None else seen[1]

    def _saw_session(self, key: str, now: float, raw: bytes | None) -> None:
        with self._lock:
            seen = self._sessions_seen
            old = seen.pop(key, None)
            if old is not None:
                self._sessions_seen_bytes -= len(old[1])
            if raw is None:
                return
            seen[key] = (now, raw)
            self._sessions_seen_bytes += len(raw)
            while len(seen) > MIRROR_SESSIONS or self._sessions_seen_bytes > self.mirror_bytes:
                self._sessions_seen_bytes -= len(seen.popitem(last=False)[1][1])

    def _local_update(self, key: str, now: float, fn: Callable[[object | None], tuple[object, R]]) -> R:
        with self._lock:
            self._dirty = True
            if self._local.peek_session(key) is None:  # first use during this outage
                seen = self._sessions_seen.get(key)
                state = None if seen is None else _decode_session(seen[1])
                if key not in self._touched and len(self._touched) < OUTAGE_SESSIONS:
                    base = None if seen is None or state is None else _digest(seen[1])
                    self._touched[key] = _Touched(base, _spend_of(state), now)
                if state is not None:
                    self._local.seed_session(key, seen[0], state)  # type: ignore[index]
            touched = self._touched.get(key)
            if touched is not None:
                touched.seen = now
            return self._local.update_session(key, now, fn)

    def _local_peek(self, key: str) -> object | None:
        with self._lock:
            state = self._local.peek_session(key)
            if state is None and (seen := self._sessions_seen.get(key)) is not None:
                state = _decode_session(seen[1])
            return state

    def _degraded(self, run: Callable[[], R]) -> R:
        if self.on_error == "raise":
            raise StorageError(f"Redis at {self.shown_url} is unavailable (retrying after {self.retry_s:g}s)")
        return run()

    def peek_session(self, key: str) -> object | None:
        skey = self.session_key(key)
        return self._redis_or_local(
            lambda: _decode_session(self._session_value(key, skey), key, skey), lambda: self._local_peek(key)
        )

    # ------------------------------------------------------------- a decision's reads
    def read_many(self, now: float, spends: Sequence[SpendAdd], sessions: Sequence[str], breakers: Sequence[str]) -> Reading:
        """One pipeline: each window's spend script, each session's and each breaker's GET (on a
        cluster, one batch per node). A script the server lost is run again on its own (it did
        not run, so nothing was added twice)."""

        def remote() -> Reading:
            pipe = self.redis.pipeline(transaction=False)
            for s in spends:
                keys_and_args = self._spend_keys_and_args(s.key, s.tokens, s.cost_usd, s.window_s, now)
                # as a command: redis-py refuses `evalsha` in a cluster's pipeline (it cannot load
                # a script there); a node without the script answers NOSCRIPT, handled below
                pipe.execute_command("EVALSHA", self._spend_script.sha, 1, *keys_and_args)
            skeys = [self.session_key(key) for key in sessions]
            for skey in skeys:
                pipe.get(skey)
            for key in breakers:
                pipe.get(self.breaker_key(key))
            replies = pipe.execute(raise_on_error=False)
            spent = []
            for s, reply in zip(spends, replies[: len(spends)], strict=True):
                if isinstance(reply, NoScriptError):
                    reply = self._run_spend(s, now)
                spent.append(self._spent_totals(s.key, s.window_s, now, _replied(reply)))
            got_sessions = replies[len(spends) : len(spends) + len(sessions)]
            got_breakers = replies[len(spends) + len(sessions) :]
            return Reading(
                spent,
                [_readable_session(raw, key, skey) for key, skey, raw in zip(sessions, skeys, got_sessions, strict=True)],
                [
                    self._read_breaker(key, _held(raw, "breaker", key, self.breaker_key(key)))
                    for key, raw in zip(breakers, got_breakers, strict=True)
                ],
            )

        def local() -> Reading:
            return read_each(
                self._local_spend,
                self._local_peek,
                lambda key: self._local_breaker(key, lambda: self._local.breaker_state(key)),
                now,
                spends,
                sessions,
                breakers,
            )

        return self._redis_or_local(remote, local)

    # ------------------------------------------------------------- global spend
    def add_spend(self, key: str, tokens: float, cost_usd: float, window_s: float, now: float) -> tuple[float, float]:
        def remote() -> tuple[float, float]:
            return self._spent_totals(key, window_s, now, self._run_spend(SpendAdd(key, tokens, cost_usd, window_s), now))

        return self._redis_or_local(remote, lambda: self._local_spend(key, tokens, cost_usd, window_s, now))

    def _spend_keys_and_args(self, key: str, tokens: float, cost_usd: float, window_s: float, now: float) -> list[Any]:
        """spend.lua's key (the window's) and arguments (the spend, the key's time to live)."""
        return [self.spend_key(key, int(now // window_s)), tokens, cost_usd, max(1, int(2 * window_s))]

    def _run_spend(self, s: SpendAdd, now: float) -> Any:
        window, *args = self._spend_keys_and_args(s.key, s.tokens, s.cost_usd, s.window_s, now)
        return self._spend_script(keys=[window], args=args)

    def _spent_totals(self, key: str, window_s: float, now: float, out: Any) -> tuple[float, float]:
        totals = float(out[0]), float(out[1])
        if self._keep:
            self._saw_spend(key, int(now // window_s), totals)
        return totals

    def _saw_spend(self, key: str, index: int, totals: tuple[float, float]) -> None:
        with self._lock:
            seen = self._spend_seen.get(key)
            if seen is None or seen[0] <= index:
                _lru_put(self._spend_seen, key, (index, *totals), MIRROR_SPEND_WINDOWS)

    def _local_spend(self, key: str, tokens: float, cost_usd: float, window_s: float, now: float) -> tuple[float, float]:
        index = int(now // window_s)
        with self._lock:
            self._dirty = True
            current = self._local.spend_window(key)
            if current is None or current[0] != index:
                seen = self._spend_seen.get(key)
                if seen is not None and seen[0] == index:
                    self._local.seed_spend(key, index, seen[1], seen[2])
            totals = self._local.add_spend(key, tokens, cost_usd, window_s, now)
            spent = self._spent.get((key, window_s, index))
            if spent is None and len(self._spent) < OUTAGE_SPEND_WINDOWS:
                spent = self._spent[(key, window_s, index)] = _Spent()
            if spent is not None:
                spent.tokens += tokens
                spent.cost_usd += cost_usd
            return totals

    # ------------------------------------------------------------- breakers
    def _cfg(self, cfg: BreakerConfig) -> str:
        j = self._cfg_json.get(cfg)  # frozen configs hash by value
        if j is None:
            if len(self._cfg_json) > 1000:
                self._cfg_json.clear()
            j = self._cfg_json[cfg] = json.dumps(cfg.model_dump())
        return j

    def _ttl(self, cfg: BreakerConfig) -> int:
        """A breaker key outlives its longest open interval and its window, idle or not."""
        return max(1, int(max(self.ttl_s, cfg.max_open_s + cfg.window_s + cfg.probe_timeout_s)))

    def _run(
        self, op: str, key: str, cfg: BreakerConfig, now: float, args: dict[str, Any], marker: str | None = None
    ) -> dict[str, Any]:
        bkey = self.breaker_key(key)
        try:
            raw = self._breaker_script(
                keys=[bkey] if marker is None else [bkey, marker],
                args=[op, now, self._cfg(cfg), json.dumps(args), self._ttl(cfg), CHANNEL, self._rng.uniform(-1, 1)],
            )
        except redis_lib.ResponseError as exc:
            if str(exc).startswith("ILLEGAL"):
                _, src, dst = str(exc).split()
                raise IllegalTransition(key, _S(src), _S(dst)) from None
            if str(exc).startswith("CORRUPT") or "user_script" in str(exc):
                # the script refused the stored value, or failed on it: that breaker alone
                raise CorruptState("breaker", key, bkey) from None
            raise
        out: dict[str, Any] = json.loads(raw)
        state = json.loads(out["raw"])
        self._remember(bkey, out["state"], state)
        if self._keep:
            with self._lock:
                _lru_put(self._breakers_seen, key, state, MIRROR_BREAKERS)
        return out

    def _remember(self, bkey: str, state: str, raw: dict[str, Any] | None = None, until_s: float | None = None) -> None:
        if until_s is None and raw is not None and state == "open":
            until_s = raw["opened_at"] + raw["open_interval_s"]
        if len(self._cache) > NEAR_CACHE_MAX:
            self._cache.clear()
        self._cache[bkey] = (state, until_s or 0.0, time.monotonic() + self.near_cache_s)

    @staticmethod
    def _transition(key: str, out: dict[str, Any]) -> Transition | None:
        t = out.get("transition")
        if not t:
            return None
        interval = t.get("open_interval_s")
        return Transition(
            key, _S(t["src"]), _S(t["dst"]), float(t["at"]), t["reason"], None if interval is None else float(interval)
        )

    def breaker_acquire(self, key: str, cfg: BreakerConfig, now: float) -> Permission:
        bkey = self.breaker_key(key)
        cached = self._cache.get(bkey)
        if cached is not None and cached[0] == "closed" and time.monotonic() < cached[2]:
            return Permission(True, _S.CLOSED)  # known closed: no round trip

        def remote() -> Permission:
            out = self._run("acquire", key, cfg, now, {})
            return Permission(
                bool(out.get("allowed")),
                _S(out["state"]),
                probe=out.get("probe"),
                retry_after_s=None if out.get("retry_after_s") is None else float(out["retry_after_s"]),
                transition=self._transition(key, out),
                would_refuse=bool(out.get("would_refuse")),
            )

        return self._redis_or_local(remote, lambda: self._local_breaker(key, lambda: self._local.breaker_acquire(key, cfg, now)))

    def breaker_record(
        self, key: str, cfg: BreakerConfig, now: float, *, failed: bool, slow: bool, probe: int | None, session: str | None = None
    ) -> Recorded:
        def remote() -> Recorded:
            out = self._run("record", key, cfg, now, {"failed": failed, "slow": slow, "probe": probe, "session": session})
            return Recorded(_S(out["state"]), self._transition(key, out))

        return self._redis_or_local(remote, lambda: self._local_record(key, cfg, now, failed, slow, probe, session))

    def _local_record(
        self, key: str, cfg: BreakerConfig, now: float, failed: bool, slow: bool, probe: int | None, session: str | None
    ) -> Recorded:
        with self._lock:
            self._outcomes.append(_Outcome(key, cfg, now, failed, slow, session))
            return self._local_breaker(
                key, lambda: self._local.breaker_record(key, cfg, now, failed=failed, slow=slow, probe=probe, session=session)
            )

    def breaker_release(self, key: str, cfg: BreakerConfig, probe: int) -> None:
        self._redis_or_local(
            lambda: self._run("release", key, cfg, 0.0, {"probe": probe}), lambda: self._local.breaker_release(key, cfg, probe)
        )

    def breaker_force(self, key: str, cfg: BreakerConfig, now: float, state: BreakerStateName) -> Transition | None:
        from ..breaker.core import OPERATOR_STATES

        if state not in OPERATOR_STATES:
            raise ValueError(
                f"breaker {key!r}: an operator may set {sorted(s.value for s in OPERATOR_STATES)}, not {state.value}"
            )
        return self._redis_or_local(
            lambda: self._transition(key, self._run("force", key, cfg, now, {"state": state.value})),
            lambda: self._local_breaker(key, lambda: self._local.breaker_force(key, cfg, now, state)),
        )

    def breaker_state(self, key: str) -> BreakerState | None:
        return self._redis_or_local(
            lambda: self._read_breaker(key, self.redis.get(self.breaker_key(key))),
            lambda: self._local_breaker(key, lambda: self._local.breaker_state(key)),
        )

    def _read_breaker(self, key: str, raw: bytes | None) -> BreakerState | None:
        """A breaker as read from Redis (and mirrored, for an outage)."""
        state = None if raw is None else _decode_breaker(key, raw, self.breaker_key(key))
        if self._keep:
            with self._lock:
                if state is None:
                    self._breakers_seen.pop(key, None)
                else:
                    _lru_put(self._breakers_seen, key, state, MIRROR_BREAKERS)
        return None if state is None else BreakerState.from_wire(key, state)

    def breaker_list(self) -> list[tuple[str, BreakerState]]:
        head = self.breaker_key("")[:-1]  # every breaker key is this, the escaped key, and "}"

        def remote() -> list[tuple[str, BreakerState]]:
            # SCAN, never KEYS: Redis keeps answering the fleet while it is walked
            rkeys = list(self.redis.scan_iter(match=_glob_escape(head) + "*}", count=SCAN_COUNT))
            found = []
            for i in range(0, len(rkeys), SCAN_COUNT):
                batch = rkeys[i : i + SCAN_COUNT]
                pipe = self.redis.pipeline(transaction=False)
                for rkey in batch:
                    pipe.get(rkey)
                for rkey, raw in zip(batch, pipe.execute(), strict=True):
                    if raw is not None:  # not expired since the scan
                        key = unquote(rkey.decode()[len(head) : -1], errors="surrogatepass")
                        try:
                            found.append((key, BreakerState.from_wire(key, _decode_breaker(key, raw, rkey.decode()))))
                        except CorruptState as exc:
                            log.warning("agent-breaker: %s", exc)  # listed by none; its calls are refused
            return found

        return self._redis_or_local(remote, self._local_breakers)

    def _local_breakers(self) -> list[tuple[str, BreakerState]]:
        """The breakers as this worker knows them during an outage: its in-process ones, else
        the last state it read from Redis."""
        with self._lock:
            known = {key: BreakerState.from_wire(key, raw) for key, raw in self._breakers_seen.items()}
            known.update(self._local.breaker_list())
            return list(known.items())

    def _local_breaker(self, key: str, run: Callable[[], R]) -> R:
        """Run `run` on the in-process breaker; on its first use during an outage it starts
        from the last state seen on Redis, or from a broadcast that it opened (near-cache),
        whichever refuses calls longer."""
        with self._lock:
            self._dirty = True
            if self._local.breaker_state(key) is None:
                seen = self._breakers_seen.get(key)
                st = None if seen is None else BreakerState.from_wire(key, seen)
                cached = self._cache.get(self.breaker_key(key))
                told = None if cached is None else cached[0]
                if told == "forced_open" and (st is None or st.state is not _S.FORCED_OPEN):
                    st = st or BreakerState(key)
                    st.state = _S.FORCED_OPEN
                elif cached is not None and told == "open" and not _refuses_until(st, cached[1]):
                    st = st or BreakerState(key)
                    # only the reopen time opened_at + open_interval_s is known; an interval of
                    # 0 lets a failed probe back off from open_s
                    st.state, st.opened_at, st.open_interval_s = _S.OPEN, cached[1], 0.0
                    st.probes, st.probe_successes = [], 0
                if st is not None:
                    self._local.seed_breaker(key, st)
            return run()

    # ------------------------------------------------------------- write-back after an outage
    def resync(self) -> bool:
        """Write back what this worker did on in-process state while Redis was away (module
        docstring), then use Redis again. The store calls it on its first operation after
        `retry_s`; call it to recover at once. True when nothing is left to write back; False
        when Redis failed again (the rest waits for the next attempt; nothing is written twice)."""
        with self._lock:
            if not self._dirty:
                return True
            try:
                self.redis.ping()
                outcomes = self._replay_outcomes()
                sessions = self._write_back_sessions()
                windows = self._write_back_spend()
            except REDIS_ERRORS + (StorageError,) as exc:
                self._failed(exc)
                return False
            self._local = MemoryStore(ttl_s=self.ttl_s, max_sessions=self.max_sessions)
            self._dirty = False
            self._down_until = 0.0
        log.info(
            "agent-breaker: Redis at %s is back; wrote back %d sessions, %d breaker outcomes, %d spend windows",
            self.shown_url,
            sessions,
            outcomes,
            windows,
        )
        return True

    def _replay_outcomes(self) -> int:
        done = 0
        while self._outcomes:
            o = self._outcomes[0]
            if o.sent is None or not self.redis.exists(o.sent):
                o.sent = self._marker(self.breaker_key(o.key))
                try:
                    self._run(
                        "record",
                        o.key,
                        o.cfg,
                        o.ts,
                        {"failed": o.failed, "slow": o.slow, "probe": None, "session": o.session},
                        o.sent,
                    )
                    done += 1
                except CorruptState as exc:  # that breaker stays refused; the rest is written back
                    log.warning("agent-breaker: %s", exc)
            self._outcomes.popleft()
        return done

    def _write_back_sessions(self) -> int:
        done = 0
        for key in list(self._touched):
            try:
                if self._write_back_session(key, self._touched[key]):
                    done += 1
            except CorruptState as exc:  # left as it is, refused; the rest is written back
                log.warning("agent-breaker: %s", exc)
            del self._touched[key]
            self._local.forget_session(key)
        return done

    def _write_back_session(self, key: str, t: _Touched) -> bool:
        skey = self.session_key(key)
        if t.sent is not None:
            marker, written, spend = t.sent
            t.sent = None
            if self.redis.exists(marker):
                # the write whose reply was lost happened: Redis has everything up to it
                t.base, t.start = written, spend
        local = self._local.peek_session(key)
        if not isinstance(local, SessionState):
            return False  # nothing in-process any more (evicted)
        for _ in range(MAX_CAS_ATTEMPTS):
            raw = self._get(skey)
            current = _decode_session(raw, key, skey)
            version = 0 if current is None else current.version
            if current is None or raw is None or _digest(raw) == t.base:
                new = local  # nobody else wrote it meanwhile: the local state is the session
            else:
                new = _with_outage_spend(current, local, t.start)
            new.version = version + 1
            data = codec.encode(new)
            t.sent = (self._marker(skey), _digest(data), _spend_of(new))
            if self._cas_script(keys=[skey, t.sent[0]], args=[version, data, max(1, int(self.ttl_s)), codec.FORMAT]):
                self._saw_session(key, t.seen, data)
                return True
            t.sent = None  # refused: nothing was written
        raise StorageError(f"session {key!r}: {MAX_CAS_ATTEMPTS} conflicting writers in a row")

    def _write_back_spend(self) -> int:
        done = 0
        for wkey in list(self._spent):
            key, window_s, index = wkey
            spent = self._spent[wkey]
            gkey = self.spend_key(key, index)
            if spent.sent is not None:
                marker, tokens, cost = spent.sent
                spent.sent = None
                if self.redis.exists(marker):
                    spent.tokens -= tokens
                    spent.cost_usd -= cost
            if spent.tokens > 0 or spent.cost_usd > 0:
                spent.sent = (self._marker(gkey), spent.tokens, spent.cost_usd)
                out = self._spend_script(
                    keys=[gkey, spent.sent[0]], args=[spent.tokens, spent.cost_usd, max(1, int(2 * window_s))]
                )
                self._saw_spend(key, index, (float(out[0]), float(out[1])))
                done += 1
            del self._spent[wkey]
        return done

    # ------------------------------------------------------------- broadcast
    def _listen(self) -> None:
        """Keep the near-cache in step with transitions published by any worker."""
        attempt = 0
        while not self._stop.is_set():
            try:
                client = subscriber_client(self.url, timeout_s=1.0, attempt=attempt)
                pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call,unused-ignore]  # redis-py leaves it unannotated
                pubsub.subscribe(CHANNEL)
                while not self._stop.is_set():
                    msg = pubsub.get_message(timeout=0.5)
                    if msg and msg.get("type") == "message":
                        self.on_broadcast(msg["data"])
                pubsub.close()
                client.close()
            except REDIS_ERRORS + (OSError, ValueError):
                attempt += 1  # on a cluster: the next node the URL names
                self._stop.wait(self.retry_s)  # Redis is down: try again later

    def on_broadcast(self, payload: bytes | str) -> None:
        """Take one transition published on CHANNEL by any worker (the listener calls this)."""
        data = json.loads(payload)
        self._remember(data["key"], data["state"], until_s=data.get("until_s"))

    def close(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.join(timeout=2)
        self.redis.close()

    def delete_all(self) -> int:
        """Remove every key of this prefix (tests, teardown)."""
        keys = list(self.redis.scan_iter(match=f"{self.prefix}:*", count=1000))
        return self.redis.delete(*keys) if keys else 0  # a cluster client splits it by slot


def _failure(exc: Exception) -> str:
    """An error as the log names it: its type (a driver's message may quote a command's
    arguments); a cluster that cannot be reached with its message too (nodes only: why a
    cluster URL never works, say)."""
    return f"{type(exc).__name__}: {exc}" if isinstance(exc, ClusterUnreachable) else type(exc).__name__


def _glob_escape(text: str) -> str:
    """`text` as a literal in a Redis match pattern (a prefix may hold glob characters)."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def _decode_breaker(key: str, raw: bytes, where: str) -> dict[str, Any]:
    """A stored breaker's wire form; CorruptState when it is not one (breaker.lua refuses it too)."""
    try:
        state = json.loads(raw)
        BreakerState.from_wire(key, state)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        raise CorruptState("breaker", key, where) from None
    return cast("dict[str, Any]", state)


def _replied(reply: Any) -> Any:
    """A pipeline's reply, or the error it holds raised (the failure policy takes it)."""
    if isinstance(reply, Exception):
        raise reply
    return reply


def _held(reply: Any, kind: str, key: str, where: str) -> Any:
    """A reply for one key (a pipeline's, or a command's error): a key that holds a value of
    another type (a list where a string belongs) is that key's CorruptState, as an undecodable
    value is, not Redis failing; any other error is raised (the failure policy takes it)."""
    if isinstance(reply, redis_lib.ResponseError) and str(reply).startswith("WRONGTYPE"):
        raise CorruptState(kind, key, where) from None
    return _replied(reply)


def _readable_session(reply: Any, key: str, where: str) -> SessionState | None:
    """A session a decision only reads: one that cannot be read is read as unknown."""
    try:
        return _decode_session(_held(reply, "session", key, where), key, where)
    except CorruptState:
        return None


def _decode_session(raw: bytes | None, key: str = "", where: str = "") -> SessionState | None:
    """A stored session, or None when absent. A value that cannot be read (damaged, or of a
    format this version does not know) is CorruptState: replacing it would drop its halt."""
    if not raw:
        return None
    try:
        state = codec.decode(raw)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        state = None
    if state is None:
        raise CorruptState("session", key, where or "its key")
    return state


def _with_outage_spend(current: SessionState, local: SessionState, start: _Spend) -> SessionState:
    """A session's Redis copy that moved on during an outage, plus what this worker took on it
    meanwhile: its spend (local minus where the local copy started) and its halt, if any."""
    steps, tokens_before, cost, tool_tokens = start
    current.spend.steps += max(0, local.spend.steps - steps)
    current.spend.tokens += max(0, local.spend.tokens - tokens_before)
    current.spend.cost_usd += max(0.0, local.spend.cost_usd - cost)
    for tool, tokens in local.spend.tool_tokens.items():
        extra = tokens - tool_tokens.get(tool, 0)
        if extra > 0:
            put_bounded(current.spend.tool_tokens, tool, current.spend.tool_tokens.get(tool, 0) + extra, MAX_TOOLS)
    if current.halted is None:
        current.halted = local.halted
    return current


def _refuses_until(st: BreakerState | None, until: float) -> bool:
    """Whether a breaker refuses calls at least until `until`."""
    if st is None:
        return False
    return st.state is _S.FORCED_OPEN or (st.state is _S.OPEN and st.opened_at + st.open_interval_s >= until)
