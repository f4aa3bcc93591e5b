"""The embedded escalation store: one SQLite file, the escalation queue and its outbox.

An escalation and the outbox row that announces it are written in one transaction, and so are
a resolution and its row: a process killed at any point leaves both or neither, and the relay
(`relay.py`) delivers what the outbox holds, at least once, however long after.

The file is in WAL mode (readers never wait for the writer: `frozen()` on the decision path
does not queue behind a relay marking rows delivered) with `synchronous=FULL` by default: each
commit is on disk before `escalate()` returns, so an escalation survives a power cut as well
as a killed process. Escalations are rare (a trip that needs a human), so an fsync each is
cheap next to what losing one costs: a runaway session unfrozen after a reboot with no trace
of why. NORMAL (`synchronous="NORMAL"`) survives a killed process but may lose the last
commits to a power cut or an OS crash; `benchmarks/bench_outbox.py` measures both. Writes take
the write lock up front (`BEGIN IMMEDIATE`), so two writers wait for each other (up to a busy
timeout of 5 s) instead of failing mid-transaction, and a check-then-update (two operators
resolving one escalation) happens once.

A tenant has at most `max_open_per_tenant` open escalations (`EscalationsConfig`): past it, a
new escalation is collapsed onto the tenant's newest open one in the same transaction (a row of
`collapsed_sessions` names its session, which `frozen()` reads; the record's `collapsed` counts
it), and the first collapse onto an escalation puts one alert on the outbox (`capped:<id>`).

Resolved escalations are deleted `retain_resolved_s` (30 days) after their resolution, a batch
at each write, with the sessions collapsed onto them. A full disk must not leave a frozen
session without a way out, so the file keeps a reserve of free space (`RESERVE_BYTES` of filler
rows written at creation): a resolution that finds the disk full releases the reserve in its own
transaction and writes into the pages it freed; the reserve is written again at the next open
that finds room. The WAL file is reused in place after each checkpoint, so it needs no new space
for a resolution either.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from .._sqlite import wal_mode, write_transaction
from ..config import DEFAULT_MAX_OPEN_PER_TENANT, EscalationsConfig, default_db_path
from .outbox import (
    OutboxKind,
    OutboxRow,
    capped_key,
    capped_message,
    escalation_message,
    incident_message,
    resolution_message,
    to_json,
    with_escalation,
)
from .records import (
    DEFAULT_LIST_LIMIT,
    RETAIN_RESOLVED_S,
    AlreadyResolved,
    Decision,
    Escalation,
    EscalationStorageError,
    Status,
    UnknownEscalation,
    checked_decision,
    checked_id,
    checked_listing,
    checked_max_open,
    checked_note,
    checked_open,
    checked_retention,
)

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3  # 2: the reserve, and the index retention reads; 3: collapsed escalations
BUSY_TIMEOUT_S = 5.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS escalations (
    id TEXT PRIMARY KEY,
    key TEXT NOT NULL,
    tenant TEXT,
    session TEXT NOT NULL,
    created_at REAL NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('open', 'resumed', 'aborted')),
    decision TEXT CHECK (decision IN ('resume', 'abort')),
    note TEXT,
    resolved_at REAL,
    record TEXT NOT NULL,
    collapsed INTEGER NOT NULL DEFAULT 0
);
-- one open escalation per key, whoever writes: the idempotency of escalate() holds across processes
CREATE UNIQUE INDEX IF NOT EXISTS escalations_open_key ON escalations (key) WHERE status = 'open';
CREATE INDEX IF NOT EXISTS escalations_session ON escalations (session, tenant);
CREATE INDEX IF NOT EXISTS escalations_created ON escalations (created_at);
CREATE INDEX IF NOT EXISTS escalations_tenant ON escalations (tenant, created_at);
CREATE INDEX IF NOT EXISTS escalations_resolved ON escalations (resolved_at) WHERE status != 'open';
-- a tenant's open escalations: how many (its cap), and the newest (what the next ones collapse onto)
CREATE INDEX IF NOT EXISTS escalations_open_tenant ON escalations (tenant, created_at) WHERE status = 'open';
-- the sessions collapsed onto an escalation past their tenant's cap: frozen by it, without a record
CREATE TABLE IF NOT EXISTS collapsed_sessions (
    escalation_id TEXT NOT NULL,
    tenant TEXT,
    session TEXT NOT NULL,
    PRIMARY KEY (escalation_id, session)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS collapsed_sessions_session ON collapsed_sessions (session, tenant);
-- filler rows whose pages a resolution frees when the disk is full
CREATE TABLE IF NOT EXISTS reserve (n INTEGER PRIMARY KEY, filler BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL CHECK (kind IN ('escalation', 'resolution', 'incident')),
    payload TEXT NOT NULL,
    created_at REAL NOT NULL,
    delivered_at REAL,
    attempts INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (seq) WHERE delivered_at IS NULL;
"""
_COLUMNS = "status, decision, note, resolved_at, collapsed, record"
#: the free space a resolution may use on a full disk: rows of one page each
RESERVE_BYTES = 256 * 1024
_RESERVE_ROW = 3072
#: resolved rows deleted past retention at each write, at most
PRUNE_BATCH = 100
SQLITE_FULL = 13  # the result code of a write that found no room (disk, or max_page_count)


def db_path(config: EscalationsConfig | None = None, *, explicit: str | None = None) -> Path:
    """Where the escalations live: `explicit` (a --db argument), else the config's `db` (its
    variable's value, else the XDG state folder, once the config was read with its
    environment), else the default under the home folder; absolute."""
    chosen = explicit or (config.db if config is not None else None)
    return (Path(chosen).expanduser() if chosen else default_db_path({})).resolve()


class _Connection(sqlite3.Connection):
    """A connection that can be weakly referenced: the store tracks every thread's connection
    without keeping a finished thread's one alive."""


class SqliteEscalations:
    """The escalation queue and outbox in one SQLite file; safe to share between threads (one
    connection each) and processes (SQLite's locks). A new object on the same file sees
    everything an earlier one wrote."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        retain_resolved_s: float = RETAIN_RESOLVED_S,
        max_open_per_tenant: int = DEFAULT_MAX_OPEN_PER_TENANT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be FULL or NORMAL, but was {synchronous!r}")
        self.retain_resolved_s = checked_retention(retain_resolved_s)
        self.max_open_per_tenant = checked_max_open(max_open_per_tenant)
        self.path = Path(path).expanduser().resolve()
        self.exclusive_file: Path | None = self.path  # one relay per file (relay.py)
        self.synchronous = synchronous
        self.clock = clock
        self._local = threading.local()
        self._connections: weakref.WeakSet[_Connection] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._closed = False
        _create_private(self.path)
        conn = self._conn()
        try:
            mode = wal_mode(conn, BUSY_TIMEOUT_S)
            if mode != "wal":
                # readers beside a writer, and the durability above, assume WAL (a network file system refuses it)
                raise EscalationStorageError(f"escalations db {self.path}: SQLite refused WAL mode (journal mode {mode})")
            with self._write() as c:
                version = c.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise EscalationStorageError(
                        f"escalations db {self.path} has schema {version}: written by a newer agent-breaker "
                        f"(this one knows {SCHEMA_VERSION})"
                    )
                if version < SCHEMA_VERSION:
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            c.execute(statement)
                    if 0 < version < 3:  # a table made before collapsing
                        c.execute("ALTER TABLE escalations ADD COLUMN collapsed INTEGER NOT NULL DEFAULT 0")
                    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            raise EscalationStorageError(f"escalations db {self.path}: {exc}") from None
        self._fill_reserve()

    # ------------------------------------------------------------------ the queue (EscalationStore)

    def escalate(self, record: Escalation) -> Escalation:
        """Open `record` and its outbox row in one transaction, or return the escalation already
        open for its key (same tenant, session and heuristic) untouched: no second row. Past
        the tenant's cap of open escalations, collapse it onto the tenant's newest open one and
        return that one (`_collapse`); a session collapsed onto one still open is counted once."""
        checked_open(record)
        with self._write() as c:
            row = c.execute(f"SELECT {_COLUMNS} FROM escalations WHERE key = ? AND status = 'open'", (record.key,)).fetchone()
            if row is None:
                row = c.execute(
                    f"SELECT {_COLUMNS} FROM escalations WHERE status = 'open' AND id IN "
                    "(SELECT escalation_id FROM collapsed_sessions WHERE session = ? AND tenant IS ?)",
                    (record.session, record.tenant),
                ).fetchone()
            if row is not None:
                return _escalation(row)
            (open_now,) = c.execute(
                "SELECT count(*) FROM escalations WHERE tenant IS ? AND status = 'open'", (record.tenant,)
            ).fetchone()
            if open_now >= self.max_open_per_tenant:
                return self._collapse(c, record)
            c.execute(
                "INSERT INTO escalations (id, key, tenant, session, created_at, status, record) "
                "VALUES (?, ?, ?, ?, ?, 'open', ?)",
                (record.id, record.key, record.tenant, record.session, record.created_at, to_json(record.to_dict())),
            )
            self._outbox(c, "escalation", *escalation_message(record))
            self._prune(c)
        return record

    def frozen(self, tenant: str | None, session: str) -> Escalation | None:
        """The escalation that keeps this session frozen, or None: an open one (waiting for a
        human; the oldest, if several heuristics escalated it), else an aborted one (a human
        closed the session for good). A resumed escalation freezes nothing; one the session was
        collapsed onto counts as its own. Read from the file on each call, so a resolution made
        by another process (the CLI, the server) counts at once."""
        row = self._read_one(
            f"SELECT {_COLUMNS} FROM escalations WHERE status IN ('open', 'aborted') AND ((session = ?1 AND tenant IS ?2) "
            "OR id IN (SELECT escalation_id FROM collapsed_sessions WHERE session = ?1 AND tenant IS ?2)) "
            # open before aborted; the oldest open one, the latest aborted one
            "ORDER BY status = 'aborted', CASE status WHEN 'open' THEN created_at ELSE -created_at END, rowid LIMIT 1",
            (session, tenant),
        )
        return None if row is None else _escalation(row)

    def resolve(self, escalation_id: str, decision: Decision, note: str | None = None) -> Escalation:
        """Resume or abort an open escalation, with its `resolution` outbox row, in one
        transaction. Once only: a second resolution (another operator, a retried request)
        raises AlreadyResolved naming the status; an unknown id raises UnknownEscalation."""
        escalation_id = checked_id(escalation_id)
        decision = checked_decision(decision)
        note = checked_note(note)
        try:
            return self._resolve(escalation_id, decision, note)
        except _DiskFull:
            # the reserve's pages freed in a transaction of their own, then the resolution
            # written into them (logged: the operator should free disk space)
            released = self._release_reserve()
            log.warning(
                "agent-breaker: escalations db %s is full: resolving %s in its reserve (%s)", self.path, escalation_id, released
            )
            return self._resolve(escalation_id, decision, note)

    def _resolve(self, escalation_id: str, decision: Decision, note: str | None) -> Escalation:
        with self._write() as c:
            # under the write lock: nobody resolves it between this read and the update
            row = c.execute(f"SELECT {_COLUMNS} FROM escalations WHERE id = ?", (escalation_id,)).fetchone()
            if row is None:
                raise UnknownEscalation(f"no escalation {escalation_id}")
            current = _escalation(row)
            if current.status != "open":
                raise AlreadyResolved(escalation_id, current.status)
            done = current.resolved(decision, note, self.clock())
            c.execute(
                "UPDATE escalations SET status = ?, decision = ?, note = ?, resolved_at = ? WHERE id = ? AND status = 'open'",
                (done.status, done.decision, done.note, done.resolved_at, escalation_id),
            )
            self._outbox(c, "resolution", *resolution_message(done))
            self._prune(c)
        return done

    def list(
        self, status: Status | None = None, limit: int = DEFAULT_LIST_LIMIT, *, tenant: str | None = None
    ) -> builtins.list[Escalation]:
        """The newest escalations first (`status`, `tenant`: only those), at most `limit` (1 to 1000)."""
        status, limit, tenant = checked_listing(status, limit, tenant)
        rows = self._read(
            f"SELECT {_COLUMNS} FROM escalations WHERE (?1 IS NULL OR status = ?1) AND (?3 IS NULL OR tenant = ?3) "
            "ORDER BY created_at DESC, rowid DESC LIMIT ?2",
            (status, limit, tenant),
        )
        return [_escalation(r) for r in rows]

    def get(self, escalation_id: str) -> Escalation | None:
        """One escalation, or None; a malformed id raises InvalidEscalation."""
        row = self._read_one(f"SELECT {_COLUMNS} FROM escalations WHERE id = ?", (checked_id(escalation_id),))
        return None if row is None else _escalation(row)

    def add_incident(self, incident: Mapping[str, Any]) -> str:
        """Put an incident (`Incident.to_dict()`, `BreakerIncident.to_dict()`) on the outbox;
        its idempotency key is a hash of its content, so adding it twice adds one row.
        Returns the key."""
        key, message = incident_message(incident)
        with self._write() as c:
            self._outbox(c, "incident", key, message)
        return key

    # ------------------------------------------------------------------ the outbox (the relay's side)

    def pending(self, limit: int) -> builtins.list[OutboxRow]:
        """Undelivered outbox rows, oldest first."""
        rows = self._read(
            "SELECT seq, idempotency_key, kind, payload, created_at, attempts FROM outbox "
            "WHERE delivered_at IS NULL ORDER BY seq LIMIT ?",
            (limit,),
        )
        return [
            OutboxRow(seq, key, kind, json.loads(payload), created_at, attempts)
            for seq, key, kind, payload, created_at, attempts in rows
        ]

    def pending_count(self) -> int:
        return int(self._read_one("SELECT count(*) FROM outbox WHERE delivered_at IS NULL", ())[0])

    def mark_delivered(self, seqs: Iterable[int]) -> None:
        """Every target accepted these rows."""
        at = self.clock()
        with self._write() as c:
            c.executemany("UPDATE outbox SET delivered_at = ? WHERE seq = ? AND delivered_at IS NULL", [(at, s) for s in seqs])

    def mark_attempted(self, seq: int) -> None:
        """A delivery of this row failed (it stays pending)."""
        with self._write() as c:
            c.execute("UPDATE outbox SET attempts = attempts + 1 WHERE seq = ?", (seq,))

    def prune_delivered(self, before: float) -> int:
        """Forget rows delivered before `before` (epoch seconds); how many went."""
        with self._write() as c:
            return c.execute("DELETE FROM outbox WHERE delivered_at IS NOT NULL AND delivered_at < ?", (before,)).rowcount

    def close(self) -> None:
        """Close every thread's connection; the store is unusable after."""
        with self._lock:
            self._closed = True
            connections = list(self._connections)
        for conn in connections:
            conn.close()

    # ------------------------------------------------------------------ internals

    def _collapse(self, c: sqlite3.Connection, record: Escalation) -> Escalation:
        """`record`'s tenant is at its cap: its session is frozen under the tenant's newest open
        escalation instead (a row of `collapsed_sessions`), which counts it; the first session
        collapsed onto that escalation alerts that the tenant crossed its cap."""
        onto = _escalation(
            c.execute(
                f"SELECT {_COLUMNS} FROM escalations WHERE tenant IS ? AND status = 'open' "
                "ORDER BY created_at DESC, rowid DESC LIMIT 1",
                (record.tenant,),
            ).fetchone()
        )
        c.execute("UPDATE escalations SET collapsed = collapsed + 1 WHERE id = ?", (onto.id,))
        c.execute(
            "INSERT INTO collapsed_sessions (escalation_id, tenant, session) VALUES (?, ?, ?)",
            (onto.id, record.tenant, record.session),
        )
        if onto.collapsed == 0:
            alert = capped_message(record, self.max_open_per_tenant, self.clock())
            self._outbox(c, "incident", capped_key(onto.id), with_escalation(alert, onto.id))
        return replace(onto, collapsed=onto.collapsed + 1)

    def _prune(self, c: sqlite3.Connection) -> None:
        """Delete a batch of escalations resolved more than `retain_resolved_s` ago, and the
        sessions collapsed onto them."""
        doomed = "SELECT id FROM escalations WHERE status != 'open' AND resolved_at < ?1 ORDER BY resolved_at, id LIMIT ?2"
        params = (self.clock() - self.retain_resolved_s, PRUNE_BATCH)
        c.execute(f"DELETE FROM collapsed_sessions WHERE escalation_id IN ({doomed})", params)
        c.execute(f"DELETE FROM escalations WHERE id IN ({doomed})", params)

    def _fill_reserve(self) -> None:
        """Write the reserve if it is not there (a new file, or one whose reserve a full disk
        took); with no room for it yet, the next open tries again."""
        rows = RESERVE_BYTES // _RESERVE_ROW
        try:
            with self._write() as c:
                have = c.execute("SELECT count(*) FROM reserve").fetchone()[0]
                c.executemany("INSERT INTO reserve (filler) VALUES (zeroblob(?))", [(_RESERVE_ROW,)] * (rows - have))
        except _DiskFull:
            log.warning("agent-breaker: escalations db %s: no room for its reserve yet", self.path)

    def _release_reserve(self) -> str:
        try:
            with self._write() as c:
                freed = c.execute("DELETE FROM reserve").rowcount
        except _DiskFull:
            return "no page freed: the deletion itself found no room"
        return f"{freed * _RESERVE_ROW} bytes released" if freed else "the reserve was used before"

    def _outbox(self, c: sqlite3.Connection, kind: OutboxKind, key: str, message: dict[str, Any]) -> None:
        c.execute(
            "INSERT INTO outbox (idempotency_key, kind, payload, created_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (idempotency_key) DO NOTHING",
            (key, kind, to_json(message), self.clock()),
        )

    def _conn(self) -> sqlite3.Connection:
        conn: _Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            with self._lock:
                if self._closed:
                    raise EscalationStorageError(f"escalations db {self.path}: the store is closed")
                try:
                    conn = sqlite3.connect(
                        self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False, factory=_Connection
                    )
                    conn.execute(f"PRAGMA synchronous = {self.synchronous}")
                except sqlite3.Error as exc:
                    raise EscalationStorageError(f"escalations db {self.path}: {exc}") from None
                self._connections.add(conn)
            self._local.conn = conn
        return conn

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, the write lock taken up front; any SQLite error rolls it back
        and becomes EscalationStorageError."""

        def error(exc: sqlite3.Error) -> Exception:
            full = getattr(exc, "sqlite_errorcode", None) == SQLITE_FULL
            return (_DiskFull if full else EscalationStorageError)(f"escalations db {self.path}: {exc}")

        with write_transaction(self._conn(), error) as conn:
            yield conn

    def _read(self, sql: str, params: tuple[Any, ...]) -> builtins.list[Any]:
        try:
            return self._conn().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise EscalationStorageError(f"escalations db {self.path}: {exc}") from None

    def _read_one(self, sql: str, params: tuple[Any, ...]) -> Any:
        rows = self._read(sql, params)
        return rows[0] if rows else None


class _DiskFull(EscalationStorageError):
    """SQLite found no room to write (SQLITE_FULL)."""


def _escalation(row: tuple[Any, ...]) -> Escalation:
    status, decision, note, resolved_at, collapsed, record = row
    return Escalation.from_dict(
        {
            **json.loads(record),
            "status": status,
            "decision": decision,
            "note": note,
            "resolved_at": resolved_at,
            "collapsed": collapsed,
        }
    )


def _create_private(path: Path) -> None:
    """The file (0600) and any missing parent folders (0700): it names tenants and sessions."""
    missing = []
    parent = path.parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            folder.mkdir(mode=0o700)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
    except OSError as exc:
        raise EscalationStorageError(f"escalations db {path}: {exc.strerror}") from None
