"""Shared state on Redis, for agent fleets (`redis://host:port/db`).

- Tool breakers: every decision is one Lua script (`breaker.lua`, registered once, EVALSHA),
  so a tool that fails in one worker is open in all of them. Transitions are published; each
  worker keeps a near-cache, so a call to a tool known CLOSED costs no round trip. The cache
  entry goes stale after `near_cache_s`, so correctness never depends on a broadcast.
- Sessions (a run's calls may land on different workers): one compact JSON value per session
  (`codec.py`, hashes and numbers only), read, decided in Python, and written back with a
  compare-and-set on its version (`session_cas.lua`): two round trips, retried on conflict.
- Keys are prefixed and hash-tagged (`{...}`) per session and per breaker, and expire.
- Redis down or slow: every command has a timeout; on an error the store either raises
  StorageError (`on_error="raise"`, the engine then fails closed or open as configured) or
  falls back to in-process state (`on_error="local"`) and retries Redis after `retry_s`.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from importlib import resources
from typing import Any, Callable, TypeVar

import redis as redis_lib

from ..breaker import BreakerState, BreakerStateName, IllegalTransition, Permission, Recorded, Transition
from ..config import BreakerConfig
from ..windows import BucketWindow
from . import codec
from .base import StorageError
from .memory import MemoryStore

R = TypeVar("R")
log = logging.getLogger("agent_breaker.store")

CHANNEL = "agent-breaker:breaker-transitions"
MAX_CAS_ATTEMPTS = 32
CAS_BACKOFF_S = 0.0005  # doubled per conflict, with jitter, capped at 20 ms
_S = BreakerStateName


def _script(name: str) -> str:
    return resources.files("agent_breaker.store").joinpath(name).read_text(encoding="utf-8")


class RedisStore:
    retries_updates = True

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "ab",
        ttl_s: float = 3600.0,
        max_sessions: int = 100_000,
        timeout_s: float = 0.25,
        on_error: str = "local",
        retry_s: float = 1.0,
        near_cache_s: float = 1.0,
        listen: bool = True,
        rng: random.Random | None = None,
    ) -> None:
        if on_error not in ("local", "raise"):
            raise ValueError(f"on_error must be 'local' or 'raise', but was {on_error!r}")
        self.url = url
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.on_error = on_error
        self.retry_s = retry_s
        self.near_cache_s = near_cache_s
        self.redis = redis_lib.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._breaker_script = self.redis.register_script(_script("breaker.lua"))
        self._cas_script = self.redis.register_script(_script("session_cas.lua"))
        self._spend_script = self.redis.register_script(_script("spend.lua"))
        self._local = MemoryStore(ttl_s=ttl_s, max_sessions=max_sessions)
        self._rng = rng or random.Random()
        self._cfg_json: dict[BreakerConfig, str] = {}
        # breaker key -> (state, open until (event time), fresh until (monotonic))
        self._cache: dict[str, tuple[str, float, float]] = {}
        self._down_until = 0.0
        self.failures = 0
        self._listener: threading.Thread | None = None
        self._stop = threading.Event()
        if listen:
            self._listener = threading.Thread(target=self._listen, name="agent-breaker-redis-listener", daemon=True)
            self._listener.start()

    # ------------------------------------------------------------- keys and errors
    def session_key(self, key: str) -> str:
        return f"{self.prefix}:{{s:{key}}}"

    def breaker_key(self, key: str) -> str:
        return f"{self.prefix}:{{b:{key}}}"

    def _available(self) -> bool:
        return time.monotonic() >= self._down_until

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        self._down_until = time.monotonic() + self.retry_s
        log.warning("agent-breaker: Redis at %s failed (%s); %s for %.1fs", self.url, type(exc).__name__,
                    "using in-process state" if self.on_error == "local" else "failing decisions", self.retry_s)
        if self.on_error == "raise":
            raise StorageError(f"Redis at {self.url}: {exc}") from exc

    # ------------------------------------------------------------- sessions
    def update_session(self, key: str, now: float, fn: Callable[[object | None], tuple[object, R]]) -> R:
        if not self._available():
            return self._degraded(lambda: self._local.update_session(key, now, fn))
        skey = self.session_key(key)
        try:
            for attempt in range(MAX_CAS_ATTEMPTS):
                if attempt:
                    # another worker wrote this session in between: back off, then decide again
                    time.sleep(min(0.02, CAS_BACKOFF_S * 2**attempt) * self._rng.uniform(0.5, 1.5))
                raw = self.redis.get(skey)
                state = _decode_session(raw)
                version = state.version if state is not None else 0
                new_state, result = fn(state)
                if new_state is None:
                    return result
                new_state.version = version + 1  # type: ignore[attr-defined]
                if self._cas_script(keys=[skey], args=[version, codec.encode(new_state), max(1, int(self.ttl_s)), codec.FORMAT]):
                    return result
            raise StorageError(f"session {key!r}: {MAX_CAS_ATTEMPTS} conflicting writers in a row")
        except redis_lib.RedisError as exc:
            self._failed(exc)
            return self._local.update_session(key, now, fn)

    def _degraded(self, run: Callable[[], R]) -> R:
        if self.on_error == "raise":
            raise StorageError(f"Redis at {self.url} is unavailable (retrying after {self.retry_s:g}s)")
        return run()

    def peek_session(self, key: str) -> object | None:
        try:
            raw = self.redis.get(self.session_key(key))
        except redis_lib.RedisError as exc:
            self._failed(exc)
            return self._local.peek_session(key)
        return _decode_session(raw)

    # ------------------------------------------------------------- global spend
    def add_spend(self, key: str, tokens: float, cost_usd: float, window_s: float, now: float) -> tuple[float, float]:
        if not self._available():
            return self._degraded(lambda: self._local.add_spend(key, tokens, cost_usd, window_s, now))
        index = int(now // window_s)
        try:
            out = self._spend_script(
                keys=[f"{self.prefix}:{{g:{key}}}:{index}"], args=[tokens, cost_usd, max(1, int(2 * window_s))]
            )
        except redis_lib.RedisError as exc:
            self._failed(exc)
            return self._local.add_spend(key, tokens, cost_usd, window_s, now)
        return float(out[0]), float(out[1])

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

    def _run(self, op: str, key: str, cfg: BreakerConfig, now: float, args: dict[str, Any]) -> dict[str, Any]:
        bkey = self.breaker_key(key)
        try:
            raw = self._breaker_script(
                keys=[bkey],
                args=[op, now, self._cfg(cfg), json.dumps(args), self._ttl(cfg), CHANNEL, self._rng.uniform(-1, 1)],
            )
        except redis_lib.ResponseError as exc:
            if str(exc).startswith("ILLEGAL"):
                _, src, dst = str(exc).split()
                raise IllegalTransition(key, _S(src), _S(dst)) from None
            raise
        out = json.loads(raw)
        self._remember(bkey, out["state"], json.loads(out["raw"]))
        return out

    def _remember(self, bkey: str, state: str, raw: dict[str, Any] | None = None, until_s: float | None = None) -> None:
        if until_s is None and raw is not None and state == "open":
            until_s = raw["opened_at"] + raw["open_interval_s"]
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[bkey] = (state, until_s or 0.0, time.monotonic() + self.near_cache_s)

    @staticmethod
    def _transition(key: str, out: dict[str, Any]) -> Transition | None:
        t = out.get("transition")
        if not t:
            return None
        return Transition(key, _S(t["src"]), _S(t["dst"]), float(t["at"]), t["reason"])

    def breaker_acquire(self, key: str, cfg: BreakerConfig, now: float) -> Permission:
        bkey = self.breaker_key(key)
        cached = self._cache.get(bkey)
        if cached is not None and cached[0] == "closed" and time.monotonic() < cached[2]:
            return Permission(True, _S.CLOSED)  # known closed: no round trip
        if not self._available():
            return self._degraded(lambda: self._local.breaker_acquire(key, cfg, now))
        try:
            out = self._run("acquire", key, cfg, now, {})
        except redis_lib.RedisError as exc:
            self._failed(exc)
            return self._local.breaker_acquire(key, cfg, now)
        return Permission(
            bool(out.get("allowed")),
            _S(out["state"]),
            probe=out.get("probe"),
            retry_after_s=None if out.get("retry_after_s") is None else float(out["retry_after_s"]),
            transition=self._transition(key, out),
            would_refuse=bool(out.get("would_refuse")),
        )

    def breaker_record(
        self, key: str, cfg: BreakerConfig, now: float, *, failed: bool, slow: bool, probe: int | None
    ) -> Recorded:
        if not self._available():
            return self._degraded(lambda: self._local.breaker_record(key, cfg, now, failed=failed, slow=slow, probe=probe))
        try:
            out = self._run("record", key, cfg, now, {"failed": failed, "slow": slow, "probe": probe})
        except redis_lib.RedisError as exc:
            self._failed(exc)
            return self._local.breaker_record(key, cfg, now, failed=failed, slow=slow, probe=probe)
        return Recorded(_S(out["state"]), self._transition(key, out))

    def breaker_force(self, key: str, cfg: BreakerConfig, now: float, state: BreakerStateName) -> Transition | None:
        from ..breaker.core import OPERATOR_STATES

        if state not in OPERATOR_STATES:
            raise ValueError(f"breaker {key!r}: an operator may set {sorted(s.value for s in OPERATOR_STATES)}, not {state.value}")
        try:
            out = self._run("force", key, cfg, now, {"state": state.value})
        except redis_lib.RedisError as exc:
            self._failed(exc)
            return self._local.breaker_force(key, cfg, now, state)
        return self._transition(key, out)

    def breaker_state(self, key: str) -> BreakerState | None:
        if not self._available():
            return self._degraded(lambda: self._local.breaker_state(key))
        try:
            raw = self.redis.get(self.breaker_key(key))
        except redis_lib.RedisError as exc:
            self._failed(exc)
            return self._local.breaker_state(key)
        return None if raw is None else _decode_breaker(key, json.loads(raw))

    # ------------------------------------------------------------- broadcast
    def _listen(self) -> None:
        """Keep the near-cache in step with transitions published by any worker."""
        while not self._stop.is_set():
            try:
                client = redis_lib.Redis.from_url(self.url, socket_timeout=1.0, socket_connect_timeout=1.0)
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(CHANNEL)
                while not self._stop.is_set():
                    msg = pubsub.get_message(timeout=0.5)
                    if msg and msg.get("type") == "message":
                        data = json.loads(msg["data"])
                        self._remember(data["key"], data["state"], until_s=data.get("until_s"))
                pubsub.close()
                client.close()
            except (redis_lib.RedisError, OSError, ValueError):
                self._stop.wait(self.retry_s)  # Redis is down: try again later

    def close(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.join(timeout=2)
        self.redis.close()

    def delete_all(self) -> int:
        """Remove every key of this prefix (tests, teardown)."""
        keys = list(self.redis.scan_iter(match=f"{self.prefix}:*", count=1000))
        return self.redis.delete(*keys) if keys else 0


def _decode_session(raw: bytes | None) -> Any:
    """A stored session, or None when absent, of another format, or unreadable (it is then
    replaced on the next write: the compare-and-set treats it as version 0)."""
    if not raw:
        return None
    try:
        return codec.decode(raw)
    except (ValueError, TypeError, KeyError, IndexError):
        log.warning("agent-breaker: an unreadable session value is replaced")
        return None


def _decode_breaker(key: str, d: dict[str, Any]) -> BreakerState:
    w = d.get("window")
    window = None
    if isinstance(w, dict) and w:
        window = BucketWindow(w["window_s"], w["bucket_s"], 4, [list(b) for b in w["buckets"] or []],
                              list(w["totals"]), int(w["evicted_at"]))
    return BreakerState(
        key, _S(d["state"]), window, d["opened_at"], d["open_interval_s"], [list(p) for p in d["probes"] or []],
        int(d["next_probe"]), int(d["probe_successes"]), int(d["consecutive_failures"]), d["changed_at"],
    )
