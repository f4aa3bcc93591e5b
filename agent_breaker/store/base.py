"""The storage interface the engine reaches all state through.

A backend keeps two kinds of state: per-session state (trajectory, spend) and per-tool breaker
state shared by every session. It runs the engine's pure decision functions atomically on that
state: under a lock in memory, in one Lua script or one compare-and-set on Redis.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol, TypeVar
from urllib.parse import unquote, unquote_plus, urlsplit

from .._errors import AgentBreakerError
from ..breaker import BreakerConfig, BreakerState, BreakerStateName, Permission, Recorded, Transition

R = TypeVar("R")

# what a caller-supplied key part may not hold as is: the escape itself, the separator, Redis
# Cluster hash-tag braces, control characters (C0, DEL, C1) and lone surrogates
_UNSAFE = re.compile("[%:{}\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _percent(m: re.Match[str]) -> str:
    return "".join(f"%{b:02X}" for b in m.group().encode("utf-8", "surrogatepass"))


def escape_key_part(part: str) -> str:
    """Percent-encode one caller-supplied part of a storage key. Injective: '%' is escaped
    itself and each escaped character's UTF-8 bytes are self-delimiting, so distinct parts
    never give the same text (urllib.parse.unquote(s, errors="surrogatepass") inverts it).
    The result never holds ':', '{' or '}'."""
    return _UNSAFE.sub(_percent, part)


def checked_prefix(prefix: str) -> str:
    """A key prefix: it comes before the hash tag of every key, so it may not hold one."""
    if "{" in prefix or "}" in prefix:
        raise ValueError(f"the key prefix may not hold '{{' or '}}' (Redis Cluster hash tags), but was {prefix!r}")
    return prefix


def key_parts(*parts: str) -> str:
    """Join several caller-supplied parts (tenant, tool, feature) into one key, each escaped:
    ("a:b", "c") and ("a", "b:c") give different keys."""
    return ":".join(escape_key_part(p) for p in parts)


def split_key(key: str) -> list[str]:
    """The parts `key_parts` joined, unescaped (for display: a key never needs decoding to be used)."""
    return [unquote(p, errors="surrogatepass") for p in key.split(":")]


def without_password(url: str) -> str:
    """A store URL as logs may show it: the password masked, in the address and in the query
    (redis-py takes `?password=`)."""
    parts = urlsplit(url)
    shown = url if parts.password is None else url.replace(f":{parts.password}@", ":***@", 1)
    if not parts.query:
        return shown
    head, _, query = shown.partition("?")
    fields = (q.partition("=") for q in query.split("&"))
    # redis-py decodes the names (?pass%77ord= is a password too)
    return head + "?" + "&".join(k + "=***" if unquote_plus(k).lower() == "password" else k + eq + v for k, eq, v in fields)


class StorageError(AgentBreakerError, RuntimeError):
    """A backend failed (connection lost, timeout); the engine applies its failure policy."""


class CorruptState(StorageError):
    """A stored value of one key (a session, a breaker) cannot be read. The engine refuses that
    key's decisions, whatever the failure policy: its halt or forced-open state may be in it.
    The rest of the store is fine."""

    def __init__(self, kind: str, key: str, where: str) -> None:
        super().__init__(f"the stored {kind} {key!r} cannot be read (delete {where} to reset it)")
        self.kind = kind
        self.key = key


class SpendAdd(NamedTuple):
    """Spend to add to a shared window (`Store.add_spend`'s arguments but the time)."""

    key: str
    tokens: float
    cost_usd: float
    window_s: float


class Reading(NamedTuple):
    """What `Store.read_many` read: each window's totals, each session (None: unknown, evicted
    or unreadable) and each breaker (None: never used), in the order asked."""

    spent: list[tuple[float, float]]
    sessions: list[object | None]
    breakers: list[BreakerState | None]


def read_each(
    add_spend: Callable[[str, float, float, float, float], tuple[float, float]],
    peek_session: Callable[[str], object | None],
    breaker_state: Callable[[str], BreakerState | None],
    now: float,
    spends: Sequence[SpendAdd],
    sessions: Sequence[str],
    breakers: Sequence[str],
) -> Reading:
    """`read_many` done one operation at a time (a store whose calls cost no round trip)."""
    spent = [add_spend(s.key, s.tokens, s.cost_usd, s.window_s, now) for s in spends]
    return Reading(spent, [_peeked(peek_session, key) for key in sessions], [breaker_state(key) for key in breakers])


#: one session's update in `update_sessions`: its key, and the change (as `update_session`'s fn)
SessionUpdate = tuple[str, Callable[[object | None], tuple[object, None]]]


def update_each(
    update_session: Callable[[str, float, Callable[[object | None], tuple[object, None]]], None],
    now: float,
    updates: Sequence[SessionUpdate],
) -> None:
    """`update_sessions` done one update at a time (a store whose calls cost no round trip):
    each is tried; the first failure is raised once all were."""
    failed: StorageError | None = None
    for key, fn in updates:
        try:
            update_session(key, now, fn)
        except StorageError as exc:
            failed = failed or exc
    if failed is not None:
        raise failed


def _peeked(peek_session: Callable[[str], object | None], key: str) -> object | None:
    try:
        return peek_session(key)
    except StorageError:  # a session that cannot be read is read as unknown, as a peek's caller takes it
        return None


class Store(Protocol):
    """What a storage backend offers the engine: atomic session updates and breaker decisions."""

    #: whether a call waits on another process (a server): async callers then call it from a thread
    remote: bool

    def update_session(self, key: str, now: float, fn: Callable[[object | None], tuple[object, R]]) -> R:
        """Run fn(state or None) atomically for one session; fn returns (new state, result).
        A new state of None writes nothing (an event refused before it changed anything). fn
        must be pure: a shared store may run it more than once (compare-and-set conflicts)."""

    def update_sessions(self, now: float, updates: Sequence[SessionUpdate]) -> None:
        """`update_session` of each (key, fn), in one call (on Redis, one round trip reads them
        all and one writes them, each write a compare-and-set of its own; one that conflicts is
        decided again alone). Each update stands alone: one that fails undoes no other; the
        first failure is raised once all were tried."""

    def peek_session(self, key: str) -> object | None:
        """The session's state as stored (tests, inspection); None if unknown or evicted."""

    def add_spend(self, key: str, tokens: float, cost_usd: float, window_s: float, now: float) -> tuple[float, float]:
        """Atomically add spend to a fixed window shared by every worker; the window's totals."""

    def read_many(self, now: float, spends: Sequence[SpendAdd], sessions: Sequence[str], breakers: Sequence[str]) -> Reading:
        """What a decision reads before its session's update, in one call (one round trip on
        Redis): `add_spend` to each window, `peek_session` each session (one that cannot be
        read: None), `breaker_state` of each breaker. A failure of the whole raises StorageError."""

    def breaker_acquire(self, key: str, cfg: BreakerConfig, now: float) -> Permission: ...

    def breaker_record(
        self, key: str, cfg: BreakerConfig, now: float, *, failed: bool, slow: bool, probe: int | None, session: str | None = None
    ) -> Recorded:
        """Take a call's outcome; `session`: the calling session's tag (a shared breaker opens
        only once `min_sessions` sessions failed)."""

    def breaker_release(self, key: str, cfg: BreakerConfig, probe: int) -> None:
        """Free a half-open probe slot whose call was refused for another reason."""

    def breaker_force(self, key: str, cfg: BreakerConfig, now: float, state: BreakerStateName) -> Transition | None: ...

    def breaker_state(self, key: str) -> BreakerState | None: ...

    def breaker_list(self) -> list[tuple[str, BreakerState]]:
        """Every breaker the store holds, as (key, state): copies, read without deciding
        anything (operators; a shared store reads them without blocking its writers)."""
