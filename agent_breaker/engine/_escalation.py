"""Sessions handed to a human: the escalation record of a session a decision froze, the resume
a user's turn made, and the thaw once an operator lets it go on. The session is frozen in its
own update (the deciders); the record follows it here, and is written again if it went missing.
Past its tenant's cap of open escalations the store collapses the record onto the tenant's
newest open escalation: the session is frozen under that one instead (counted), so its
decision frees or closes it, and a user's turn in it resumes no one else's."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import replace
from typing import Any, Literal

from .. import heuristics as H
from .._canonical import Fingerprinter
from .._state import SessionState, Spend
from .._text import normalize_text
from ..config import AgentBreakerConfig, ConfigError
from ..escalations import AlreadyResolved, EscalationError, EscalationStore, ToolOutcome, store_for
from ..escalations import Escalation as _Escalation
from ..escalations import Spend as EscalationSpend
from ..events import Final, ToolCall
from ..metrics import Metrics
from ..metrics import shared as shared_metrics
from ..store import StorageError, Store
from ..verdicts import Trip
from ._facts import AnyEvent, Step

log = logging.getLogger("agent_breaker")


class Escalations:
    """The escalation side of the engine, over the session store and the escalation store
    (the config's: its SQLite file, or its Redis for a fleet; opened on first use). Collapsed
    escalations are counted on `telemetry` (default: the process registry)."""

    def __init__(
        self,
        config: AgentBreakerConfig,
        sessions: Store,
        fingerprints: Fingerprinter,
        store: EscalationStore | Literal[False] | None,
        *,
        telemetry: Metrics | None = None,
    ) -> None:
        self._config = config
        self._sessions = sessions
        self._fingerprints = fingerprints
        self._store = store
        self._telemetry = telemetry if telemetry is not None else shared_metrics()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """Do session-terminal trips go to a human (False: none, as in replay)."""
        return self._store is not False

    def store(self) -> EscalationStore | None:
        if self._store is None:
            with self._lock:
                if self._store is None:
                    try:
                        self._store = store_for(self._config)
                    except (ConfigError, EscalationError, OSError) as exc:
                        log.warning("agent-breaker: the escalation store cannot be opened (tried again next time): %s", exc)
                        return None
        return self._store or None

    def escalate(
        self, step: Step[Any], s: SessionState | None, trip: Trip, tool: str | None, frozen_as: str | None = None
    ) -> str | None:
        """Hand the session to a human: an escalation record (names, numbers, hashes; excerpts
        only where the tenant opted in), under the id the session was frozen as (`frozen_as`),
        or frozen now. A store that fails is logged: the session stays frozen under its id, and
        the record is written again at its next call (`thawed`)."""
        store = self.store()
        if store is None:
            return None
        try:
            if s is None:
                s = step.session(self._sessions.peek_session(step.key))
            ev = step.ev
            esc = _Escalation.new(
                session=s.sid,
                heuristic=trip.heuristic,
                reason=trip.reason,
                now=step.now,
                tenant=s.tenant,
                feature=s.feature,
                agent=ev.agent or s.agent,
                counters=_evidence(self._fingerprints, step, trip),
                spend=EscalationSpend(int(s.spend.tokens), float(s.spend.cost_usd)),
                tools=() if tool is None else (ToolOutcome(tool, "blocked" if trip.scope != "tool" else "unavailable"),),
                excerpts=_excerpts(step) if step.p.cfg.escalations.excerpts else None,
            )
            if frozen_as is not None:
                esc = replace(esc, id=frozen_as)
            opened = store.escalate(esc)
            if opened.key != esc.key:  # collapsed onto another session's: the tenant is at its cap
                self._telemetry.escalation_collapsed(esc.tenant)
            escalation_id = opened.id
            if escalation_id != frozen_as:  # frozen now, under an escalation open already, or collapsed
                self._freeze(step, escalation_id)
        except (EscalationError, StorageError) as exc:
            log.warning("agent-breaker: escalation of session %r failed: %s", step.key, exc)
            return None
        return escalation_id

    def _freeze(self, step: Step[Any], escalation_id: str) -> None:
        def freeze(state: object | None) -> tuple[SessionState, None]:
            s = step.session(state)
            s.escalation = escalation_id
            return s, None

        self._sessions.update_session(step.key, step.now, freeze)

    def _rewrite(self, step: Step[Any], escalation_id: str) -> None:
        """Write the record of a session frozen under `escalation_id` whose record is missing
        (the store failed, or the process died, between the freeze and the record)."""
        try:
            s = step.session(self._sessions.peek_session(step.key))
        except StorageError:
            return
        heuristic, reason = s.halted or (H.ESCALATED, "the session was handed to a human")
        self.escalate(step, s, Trip(heuristic, "session", reason, ""), None, escalation_id)

    def resumed_by_user(self, step: Step[Any], escalation_id: str) -> None:
        """Record the resume a user's turn made; an escalation an operator aborted meanwhile
        wins: the session is frozen again. One the session was collapsed onto is another
        session's (and stands for others): the user lifted their own session's halt only."""
        store = self.store()
        if store is None:
            return
        try:
            esc = store.get(escalation_id)
            if esc is not None and not _own(step, esc):
                return
            store.resolve(escalation_id, "resume", "a user turn with new content lifted the loop halt")
        except AlreadyResolved as exc:
            if exc.status == "aborted":
                try:
                    self._freeze(step, escalation_id)
                except StorageError as err:
                    log.warning("agent-breaker: session of aborted escalation %s not frozen again: %s", escalation_id, err)
        except EscalationError as exc:
            log.warning("agent-breaker: resume of escalation %s not recorded: %s", escalation_id, exc)

    def thawed(self, step: Step[Any], escalation_id: str) -> bool:
        """Was the escalation that froze this session resumed by a human? Then the freeze is
        lifted and the loop streaks start over (an abort keeps it frozen for good)."""
        store = self.store()
        try:
            esc = None if store is None else store.get(escalation_id)
        except EscalationError as exc:
            log.warning("agent-breaker: escalation %s unreadable, the session stays frozen: %s", escalation_id, exc)
            return False
        if esc is None and store is not None:
            self._rewrite(step, escalation_id)  # frozen, but its record was never written
            return False
        if esc is None or esc.status != "resumed":
            return False  # open or aborted: frozen (and without a store: fail closed)

        def thaw(state: object | None) -> tuple[SessionState | None, None]:
            st = step.session(state)
            if st.escalation == escalation_id:
                if st.halted is not None and st.halted[0] in H.BUDGETS:
                    st.spend = Spend()  # the operator let it go on: a fresh budget, or it trips again at once
                st.escalation = None
                st.halted = None
                st.reset_streaks()
                st.restart_breaker_streaks()
            return st, None

        try:
            self._sessions.update_session(step.key, step.now, thaw)
        except StorageError:
            return False
        return True


def _own(step: Step[Any], esc: _Escalation) -> bool:
    """Is `esc` the escalation of this step's session (not one it was collapsed onto)?"""
    return (esc.tenant, esc.session) == (step.ev.tenant, step.session(None).sid)


def _evidence(fingerprints: Fingerprinter, step: Step[Any], trip: Trip) -> dict[str, Any]:
    """An escalation's counters: the trip's numbers, and the engine's keyed hash of the call
    or the answer that tripped (what a human matches against the logs, not the payload)."""
    counters: dict[str, Any] = {k: v for k, v in trip.counters.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    ev: AnyEvent = step.ev
    if isinstance(ev, ToolCall):  # its arguments were canonicalized once already: they can be again
        counters["call_hash"] = f"{fingerprints.hash64(ev.tool, step.p.canon.canonical(ev.args)):016x}"
    elif isinstance(ev, Final):
        counters["answer_hash"] = f"{fingerprints.hash64(normalize_text(ev.text)):016x}"
    return counters


def _excerpts(step: Step[Any]) -> tuple[str, ...]:
    """What the tenant opted in to keep of the payload: the event's arguments or text, cut."""
    limit = step.p.cfg.escalations.max_excerpt_chars
    ev = step.ev
    text = getattr(ev, "text", None)
    if text is None:
        args = getattr(ev, "args", None)
        text = None if args is None else json.dumps(args, sort_keys=True, default=str)
    return () if not text else (text[:limit],)
