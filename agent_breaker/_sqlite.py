"""What the SQLite files (the escalation queue, the embedded state store) share."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator


def wal_mode(conn: sqlite3.Connection, timeout_s: float) -> str:
    """Switch the file to WAL; the journal mode in force. The switch takes the file's exclusive
    lock and SQLite does not wait for it (no busy handler), so processes opening a new file
    together would fail at once: it is tried again, for up to `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)  # another process holds the lock for a moment: wait it out


@contextlib.contextmanager
def write_transaction(conn: sqlite3.Connection, error: Callable[[sqlite3.Error], Exception]) -> Iterator[sqlite3.Connection]:
    """One write transaction on a connection in autocommit mode, the file's write lock taken up
    front (atomic across processes); any SQLite error rolls it back and is raised as error(it)."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise error(exc) from None
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException as exc:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise error(exc) from None
        raise
