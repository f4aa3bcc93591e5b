"""What this engine remembers across sessions: the tool views (session_churn: which sessions
keep failing the same call of a tool), each tenant's effects (duplicate_mutation: the actions in
flight and done in any of its sessions), the sessions known to be past their opening (no tool
view to read for them), and whether each tool's latest result met its schema (schema_drift)."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable

from .. import heuristics as H
from .._canonical import Fingerprinter
from .._outcomes import Outcome
from .._policy import Policy
from .._state import SessionState
from ..events import ToolResult
from ..store import StorageError, Store
from ..verdicts import Trip
from ._decide import schema_violation
from ._facts import MEMBER, TENANT_SEPARATOR
from ._outputs import ViewChange

log = logging.getLogger("agent_breaker")
#: sessions this engine knows have made more than one distinct call (no tool view to read)
MAX_MIXED_SESSIONS = 100_000
#: (tenant, tool) pairs whose latest result's schema conformity is remembered (schema_drift)
MAX_SHAPES = 10_000


class ToolViews:
    """The tool views, kept in the session store under keys no session can have (`_reads` reads
    them with the rest of a decision's reads)."""

    def __init__(self, store: Store, fingerprints: Fingerprinter) -> None:
        self._store = store
        self._fingerprints = fingerprints
        self._mixed: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def member(self, session_key: str) -> int:
        """A session as a tool view's chains name it: a keyed hash of its key."""
        return self._fingerprints.labeled(MEMBER, session_key)

    def is_mixed(self, session_key: str) -> bool:
        return session_key in self._mixed

    def remember_mixed(self, session_key: str) -> None:
        with self._lock:
            self._mixed[session_key] = None
            if len(self._mixed) > MAX_MIXED_SESSIONS:
                self._mixed.popitem(last=False)

    def update(self, changes: list[tuple[str, ViewChange]], now: float, session_key: str) -> None:
        """Change views (a tool's, or a tenant's effects) for a session, in one store call; a
        storage failure only costs the views it failed."""
        member = self.member(session_key)

        def updating(vkey: str, change: ViewChange) -> Callable[[object | None], tuple[SessionState | None, None]]:
            def update(state: object | None) -> tuple[SessionState | None, None]:
                view_state = state if isinstance(state, SessionState) else SessionState(vkey)
                changed = change(view_state, member)
                return (None if changed is False else view_state), None

            return update

        try:
            self._store.update_sessions(now, [(vkey, updating(vkey, change)) for vkey, change in changes])
        except StorageError as exc:
            log.warning("agent-breaker: tool view not updated: %s", exc)


class Shapes:
    """Whether each (tenant's) tool's latest result met its schema, in this process."""

    def __init__(self) -> None:
        self._latest: OrderedDict[str, bool] = OrderedDict()
        self._lock = threading.Lock()

    def trips(self, p: Policy, ev: ToolResult, out: Outcome) -> list[Trip]:
        """A successful result checked against its tool's schema: schema_violation when it
        breaks it, and schema_drift too when the tool's results met it until now."""
        if out.failed:
            return []
        problem = p.schema_problem(ev.tool, ev.result, result=True)
        # tenants may hold different schemas for one tool: drift is judged per tenant
        shape_key = f"{ev.tenant or ''}{TENANT_SEPARATOR}{ev.tool}"
        if problem is None:
            if ev.tool in p.cfg.tools:
                self._remember(shape_key, True)
            return []
        trips = []
        if self._remember(shape_key, False) and p.mode(H.SCHEMA_DRIFT) != "off":
            trips.append(
                Trip(
                    H.SCHEMA_DRIFT,
                    "tool",
                    f"{ev.tool} started returning another shape: its result {problem}",
                    "The tool's output changed shape: do not rely on its results until its owner checks it.",
                )
            )
        if p.mode(H.SCHEMA_VIOLATION) != "off":
            trips.append(schema_violation(ev.tool, "result", problem))
        return trips

    def _remember(self, key: str, conforming: bool) -> bool:
        """Note whether a tool's latest result met its schema; True when one that did is
        followed by one that does not (the moment it drifted)."""
        with self._lock:
            before = self._latest.pop(key, None)
            self._latest[key] = conforming
            if len(self._latest) > MAX_SHAPES:
                self._latest.popitem(last=False)
        return before is True and not conforming
