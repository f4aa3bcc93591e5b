"""What an operator sees of the escalations, shared by `agent-breaker escalations` and the
server's escalation routes: one store per location (a file, a Redis and prefix), and the CLI's table."""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

from .._text import utc_text
from . import SqliteEscalations, StoreLocation, open_store
from .records import Escalation

if TYPE_CHECKING:  # redis is an extra: opened only for a Redis location
    from .redis import RedisEscalations


class Stores:
    """One store per location, opened on first use: configs of one server that name the same
    file (or the same Redis and prefix) share it."""

    def __init__(self) -> None:
        self._stores: dict[StoreLocation, SqliteEscalations | RedisEscalations] = {}
        self._lock = threading.Lock()

    def get(self, location: StoreLocation) -> SqliteEscalations | RedisEscalations:
        with self._lock:
            store = self._stores.get(location)
            if store is None:
                store = self._stores[location] = open_store(location)
            return store


def format_escalations(escalations: list[Escalation]) -> str:
    """The CLI's table: one escalation a line, the newest first, times in UTC; `collapsed`: the
    other sessions its decision frees or closes too."""
    header = f"{'id':20} {'status':8} {'created':20} {'tenant':16} {'session':24} {'heuristic':20} {'collapsed':>9} reason"
    lines = [header, "-" * len(header)]
    for e in escalations:
        lines.append(
            f"{e.id:20} {e.status:8} {utc_text(e.created_at):20} {_cut(e.tenant or '-', 16):16} {_cut(e.session, 24):24} "
            f"{_cut(e.heuristic, 20):20} {e.collapsed:>9} {_cut(e.reason, 60)}"
        )
    return "\n".join(lines)


def format_escalation(e: Escalation) -> str:
    """`show`: every field, one a line."""
    d: dict[str, Any] = e.to_dict()
    d["created_at"] = f"{utc_text(e.created_at)} ({e.created_at})"
    if e.resolved_at is not None:
        d["resolved_at"] = f"{utc_text(e.resolved_at)} ({e.resolved_at})"
    width = max(len(k) for k in d)
    return "\n".join(f"{k:{width}}  {v if isinstance(v, str) else json.dumps(v)}" for k, v in d.items())


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
