"""The one place a decision's effects (`_outputs`) are done: the shared breakers, the tool
views, the family's streaks, the incidents and the escalations, each outside the session the
decision wrote. A storage failure here costs that effect only, never the verdict."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, TypeVar

from .. import heuristics as H
from .._state import SessionState
from .._storage_failure import storage_unavailable
from ..config import StorageConfig
from ..events import ToolResult
from ..metrics import Metrics
from ..store import StorageError, Store
from ..verdicts import ResultVerdict, Verdict
from ._decide import record_in_family
from ._escalation import Escalations
from ._facts import Step
from ._instrument import Reporter, per_tenant
from ._outputs import (
    BreakerMoved,
    Effect,
    Escalate,
    RecordOutcome,
    ReleaseProbe,
    RememberMixed,
    Report,
    Resume,
    UpdateFamily,
    UpdateView,
)
from ._views import ToolViews

log = logging.getLogger("agent_breaker")
V = TypeVar("V", Verdict, ResultVerdict)

#: the order effects are done in, whatever order a decider found them: the breaker first (its
#: state goes on a result's verdict), the listeners told of every trip before the escalation
#: it caused, a session breaker's moves last (the incident order the golden traces hold)
_ORDER: dict[type, int] = {
    Resume: 0,
    RecordOutcome: 1,
    ReleaseProbe: 1,
    UpdateView: 2,
    UpdateFamily: 3,
    RememberMixed: 4,
    Report: 5,
    Escalate: 6,
    BreakerMoved: 7,
}


class Applier:
    """Does what decisions ask for outside their session."""

    def __init__(
        self,
        store: Store,
        views: ToolViews,
        reporter: Reporter,
        escalations: Escalations,
        telemetry: Metrics,
        storage: StorageConfig,
        *,
        share_breakers: bool,
    ) -> None:
        self._store = store
        self._views = views
        self._reporter = reporter
        self._escalations = escalations
        self._telemetry = telemetry
        self._storage = storage
        self._share_breakers = share_breakers

    def apply(self, step: Step[Any], s: SessionState | None, effects: Iterable[Effect], verdict: V, tool: str | None) -> V:
        """Do `effects` for `step` (its session's state as written: `s`); the verdict, with what
        they add to it (a result's breaker state, an escalation's route)."""
        cfg = step.p.cfg
        ordered = sorted(effects, key=lambda e: _ORDER[type(e)])
        views = [(e.vkey, e.change) for e in ordered if isinstance(e, UpdateView)]
        for e in ordered:
            if isinstance(e, Resume):
                self._escalations.resumed_by_user(step, e.escalation_id)
            elif isinstance(e, RecordOutcome):
                verdict = self._record(step, e, verdict, tool)
            elif isinstance(e, ReleaseProbe):
                try:
                    self._store.breaker_release(e.bkey, cfg.breaker, e.probe)
                except StorageError as exc:  # the slot frees itself after probe_timeout_s
                    log.warning("agent-breaker: probe slot of %s not released: %s", e.bkey, exc)
            elif isinstance(e, UpdateView):
                if views:  # all of them at the first: one store call
                    self._views.update(views, step.now, step.key)
                    views = []
            elif isinstance(e, UpdateFamily):
                self._update_family(step, e)
            elif isinstance(e, RememberMixed):
                self._views.remember_mixed(step.key)
            elif isinstance(e, Report):
                assert s is not None  # a trip is reported with the session it happened in
                self._reporter.tripped(s, step.ev, e.trip, e.severity, step.now, tool)
            elif isinstance(e, Escalate):
                escalation = self._escalations.escalate(step, s, e.trip, tool, e.frozen_as) or e.frozen_as
                if isinstance(verdict, Verdict):  # a result's verdict has no route: results never escalate
                    verdict = replace(verdict, route={"tier": "escalate", "escalation_id": escalation})
            else:
                self._moved(step, e, tool)
        return verdict

    def unavailable(self, step: Step[Any], exc: StorageError, tool: str | None) -> Verdict | ResultVerdict:
        """The verdict of a decision the store failed (the storage failure policy's), counted."""
        verdict, severity = storage_unavailable(
            exc, self._storage, enforcing=step.p.cfg.mode == "enforce", result=isinstance(step.ev, ToolResult), tool=tool
        )
        self._reporter.count(verdict.heuristic or H.STORAGE_UNAVAILABLE, severity)
        self._telemetry.storage_failed(severity)
        return verdict

    def _record(self, step: Step[Any], e: RecordOutcome, verdict: V, tool: str | None) -> V:
        out = e.outcome
        try:
            recorded = self._store.breaker_record(
                e.bkey,
                step.p.cfg.breaker,
                step.now,
                failed=out.dependency,
                slow=out.slow,
                probe=e.probe,
                session=format(self._views.member(step.key), "x"),
            )
        except StorageError as exc:
            log.warning("agent-breaker: breaker outcome of %s not recorded: %s", tool, exc)
            return verdict
        if isinstance(verdict, ResultVerdict):  # only a result's outcome is recorded
            verdict = replace(verdict, breaker_state=recorded.state.value)
        self._moved(step, BreakerMoved(recorded.transition, recorded.state), tool)
        return verdict

    def _moved(self, step: Step[Any], e: BreakerMoved, tool: str | None) -> None:
        per = per_tenant(step.p.cfg, self._share_breakers)
        self._reporter.breaker_moved(e.transition, tool, step.ev.tenant, e.state, per_tenant=per)

    def _update_family(self, step: Step[Any], e: UpdateFamily) -> None:
        """Record a sub-agent's result in its family's streaks; a storage failure only costs that."""

        def update(state: object | None) -> tuple[SessionState | None, None]:
            parent = state if isinstance(state, SessionState) else SessionState(e.key, tenant=step.ev.tenant, created_s=step.now)
            record_in_family(parent, e)
            return parent, None

        try:
            self._store.update_session(e.key, step.now, update)
        except StorageError as exc:
            log.warning("agent-breaker: a sub-agent's result not recorded for its family: %s", exc)
