"""Embedded storage in one SQLite file (`sqlite:///path/to/state.db`): the state of processes that
live for one call each (a coding agent's hook command) and of several on one machine.

Every operation is one transaction that takes the file's write lock first (BEGIN IMMEDIATE), so
a session update, a breaker decision or a spend window is atomic across processes; the file is in
WAL mode (readers never wait for the writer) with a busy timeout, and created readable by its
owner only. Sessions are stored as the shared stores' encoding (store/codec.py) and expire
`ttl_s` after their last use; breakers in their wire form, decided by the breaker core as in
memory.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar
from urllib.parse import unquote, urlparse

from .._sqlite import wal_mode, write_transaction
from ..breaker import BreakerConfig, BreakerState, BreakerStateName, Permission, Recorded, Transition
from ..breaker import core as breaker_core
from ..config import DEFAULT_SESSION_TTL_S, SQLITE_SCHEME
from . import codec
from .base import CorruptState, Reading, SessionUpdate, SpendAdd, StorageError, read_each, update_each

R = TypeVar("R")

BUSY_TIMEOUT_MS = 10_000
#: expired sessions are deleted by the write that finds one this many writes after the last sweep
SWEEP_EVERY = 256
_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (key TEXT PRIMARY KEY, used REAL NOT NULL, state BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_used ON sessions (used);
CREATE TABLE IF NOT EXISTS breakers (key TEXT PRIMARY KEY, state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS spend (key TEXT PRIMARY KEY, idx REAL NOT NULL, tokens REAL NOT NULL, cost REAL NOT NULL);
CREATE TABLE IF NOT EXISTS secrets (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def path_of(uri: str) -> Path:
    """The file a URI names, as SQLAlchemy reads it: `sqlite:///relative/file.db`,
    `sqlite:////absolute/file.db`, `sqlite:///~/file.db` (under the home folder)."""
    parsed = urlparse(uri)
    if parsed.scheme != SQLITE_SCHEME or parsed.netloc or len(parsed.path) < 2:
        raise ValueError("a SQLite store URI is sqlite:///path/to/file.db (sqlite:////... for an absolute path)")
    return Path(os.path.expanduser(unquote(parsed.path)[1:]))


class SQLiteStore:
    """Sessions, breakers and spend windows in one SQLite file, safe across processes."""

    remote = True  # a write may wait for another process's lock: async callers use a thread

    def __init__(self, uri: str, *, ttl_s: float = DEFAULT_SESSION_TTL_S, rng: random.Random | None = None) -> None:
        self.path = path_of(uri)
        self.ttl_s = ttl_s
        self._rng = rng or random.Random()
        self._local = threading.local()
        self._writes = 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not self.path.exists():
                # created readable by its owner only: sessions name tools and hold hashes of calls
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
            self._db().executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StorageError(f"SQLite store at {self.path}: {exc}") from exc

    def _db(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            # autocommit mode: each operation opens its own transaction, BEGIN IMMEDIATE
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=True)
            db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            wal_mode(db, BUSY_TIMEOUT_MS / 1000)
            db.execute("PRAGMA synchronous = NORMAL")
            self._local.db = db
        return db

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One transaction holding the write lock from its start: atomic across processes."""
        with write_transaction(self._db(), lambda exc: StorageError(f"SQLite store at {self.path}: {exc}")) as db:
            yield db

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    def secret(self, name: str) -> str:
        """A random key kept in the file (owner-only), made on first use: what every process on
        it shares, such as the fingerprint key of the hashes its sessions hold."""
        with self._write() as db:
            row = db.execute("SELECT value FROM secrets WHERE name = ?", (name,)).fetchone()
            if row is not None:
                return str(row[0])
            value = secrets.token_hex(32)
            db.execute("INSERT INTO secrets (name, value) VALUES (?, ?)", (name, value))
            return value

    # sessions
    def update_session(self, key: str, now: float, fn: Callable[[object | None], tuple[object, R]]) -> R:
        with self._write() as db:
            row = db.execute("SELECT used, state FROM sessions WHERE key = ?", (key,)).fetchone()
            state = None
            if row is not None and now - row[0] <= self.ttl_s:
                state = _decoded(row[1], key, self.path)
            new_state, result = fn(state)
            if new_state is not None:
                data = codec.encode(new_state)  # type: ignore[arg-type]
                db.execute(
                    "INSERT INTO sessions (key, used, state) VALUES (?, ?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET used = excluded.used, state = excluded.state",
                    (key, now, data),
                )
                self._sweep(db, now)
            return result

    def _sweep(self, db: sqlite3.Connection, now: float) -> None:
        self._writes += 1
        if self._writes % SWEEP_EVERY == 0:
            db.execute("DELETE FROM sessions WHERE used < ?", (now - self.ttl_s,))

    def peek_session(self, key: str) -> object | None:
        row = self._db().execute("SELECT state FROM sessions WHERE key = ?", (key,)).fetchone()
        return None if row is None else _decoded(row[0], key, self.path)

    # global spend
    def read_many(self, now: float, spends: Sequence[SpendAdd], sessions: Sequence[str], breakers: Sequence[str]) -> Reading:
        return read_each(self.add_spend, self.peek_session, self.breaker_state, now, spends, sessions, breakers)

    def update_sessions(self, now: float, updates: Sequence[SessionUpdate]) -> None:
        update_each(self.update_session, now, updates)

    def add_spend(self, key: str, tokens: float, cost_usd: float, window_s: float, now: float) -> tuple[float, float]:
        index = now // window_s
        with self._write() as db:
            row = db.execute("SELECT idx, tokens, cost FROM spend WHERE key = ?", (key,)).fetchone()
            total = (tokens, cost_usd) if row is None or row[0] != index else (row[1] + tokens, row[2] + cost_usd)
            db.execute(
                "INSERT INTO spend (key, idx, tokens, cost) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET idx = excluded.idx, tokens = excluded.tokens, cost = excluded.cost",
                (key, index, *total),
            )
            return total

    # breakers
    def _breaker_decision(self, key: str, decide: Callable[[BreakerState], R], *, create: bool = True) -> R | None:
        """`decide` on the breaker's state in one transaction, and the state written back."""
        with self._write() as db:
            row = db.execute("SELECT state FROM breakers WHERE key = ?", (key,)).fetchone()
            if row is None and not create:
                return None
            st = BreakerState(key) if row is None else _breaker(key, row[0], self.path)
            out = decide(st)
            db.execute(
                "INSERT INTO breakers (key, state) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET state = excluded.state",
                (key, json.dumps(st.to_wire(), separators=(",", ":"))),
            )
            return out

    def breaker_acquire(self, key: str, cfg: BreakerConfig, now: float) -> Permission:
        out = self._breaker_decision(key, lambda st: breaker_core.acquire(st, cfg, now))
        assert out is not None
        return out

    def breaker_record(
        self, key: str, cfg: BreakerConfig, now: float, *, failed: bool, slow: bool, probe: int | None, session: str | None = None
    ) -> Recorded:
        def record(st: BreakerState) -> Recorded:
            t = breaker_core.record(st, cfg, now, failed=failed, slow=slow, probe=probe, rng=self._rng, session=session)
            return Recorded(st.state, t)

        out = self._breaker_decision(key, record)
        assert out is not None
        return out

    def breaker_release(self, key: str, cfg: BreakerConfig, probe: int) -> None:
        self._breaker_decision(key, lambda st: breaker_core.release(st, probe), create=False)

    def breaker_force(self, key: str, cfg: BreakerConfig, now: float, state: BreakerStateName) -> Transition | None:
        return self._breaker_decision(key, lambda st: breaker_core.force(st, state, now, cfg))

    def breaker_state(self, key: str) -> BreakerState | None:
        row = self._db().execute("SELECT state FROM breakers WHERE key = ?", (key,)).fetchone()
        return None if row is None else _breaker(key, row[0], self.path)

    def breaker_list(self) -> list[tuple[str, BreakerState]]:
        rows = self._db().execute("SELECT key, state FROM breakers ORDER BY key").fetchall()
        return [(key, _breaker(key, raw, self.path)) for key, raw in rows]


def _decoded(raw: bytes, key: str, path: Path) -> object:
    """A stored session; one that cannot be read is CorruptState (replacing it would drop its halt)."""
    try:
        state = codec.decode(raw)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        state = None
    if state is None:
        raise CorruptState("session", key, str(path))
    return state


def _breaker(key: str, raw: str, path: Path) -> BreakerState:
    try:
        return BreakerState.from_wire(key, json.loads(raw))
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        raise CorruptState("breaker", key, str(path)) from None
