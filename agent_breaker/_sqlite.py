"""What the SQLite files (the escalation queue, the embedded state store) share."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator


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
