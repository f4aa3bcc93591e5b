"""What the engine tells the world: verdict counts and latencies (Prometheus), a span per
decision (OpenTelemetry), and incidents to the listeners. None of it ever breaks a decision."""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from .. import heuristics as H
from .._state import SessionState
from .._tracing import attributes
from ..breaker import BreakerStateName, Transition
from ..breaker import core as breaker_core
from ..config import AgentBreakerConfig
from ..events import InvalidEventError
from ..metrics import Metrics
from ..verdicts import BreakerIncident, Incident, ResultVerdict, Trip, Verdict
from ._facts import AnyEvent

log = logging.getLogger("agent_breaker")
incident_log = logging.getLogger("agent_breaker.incidents")
# a library's records go where the application's logging sends them, and nowhere (not even
# Python's last-resort stderr) before it configures any: no incident lines in a notebook's
# output or a script's stderr unasked; `serve`, `--incidents` and any logging config show them
incident_log.addHandler(logging.NullHandler())

#: what the engine calls with each incident (a trip of a session, or a breaker that moved)
Listener = Callable[[Incident | BreakerIncident], None]
#: the span of the decision in progress (OpenTelemetry), for its incidents' span events
DECISION_SPAN: contextvars.ContextVar[Any] = contextvars.ContextVar("agent_breaker_decision_span", default=None)


def log_incident(incident: Incident | BreakerIncident) -> None:
    """The default listener: one JSON line per incident on the `agent_breaker.incidents` logger."""
    incident_log.warning(json.dumps(incident.to_dict(), sort_keys=True))


class Instrumented(Protocol):
    telemetry: Metrics
    tracer: Any  # an OpenTelemetry tracer, or None


_S = TypeVar("_S", bound=Instrumented)
_P = ParamSpec("_P")
_R = TypeVar("_R", Verdict, ResultVerdict)


def measured(event_name: str) -> Callable[[Callable[Concatenate[_S, _P], _R]], Callable[Concatenate[_S, _P], _R]]:
    """Count a decision method's verdicts (by heuristic: allowed, warned, blocked) and time it,
    in a span when tracing is on; an event refused as invalid counts as blocked by invalid_event.
    The method keeps its signature for type checkers."""
    span_name = f"agent_breaker.{event_name}"

    def wrap(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
        def timed(self: _S, *args: _P.args, **kwargs: _P.kwargs) -> tuple[_R | InvalidEventError, str | None, str]:
            start = time.perf_counter()
            try:
                verdict = method(self, *args, **kwargs)
            except InvalidEventError as exc:
                self.telemetry.decided(event_name, H.INVALID_EVENT, "blocked", time.perf_counter() - start)
                return exc, H.INVALID_EVENT, "blocked"
            outcome = outcome_of(verdict)
            self.telemetry.decided(event_name, verdict.heuristic, outcome, time.perf_counter() - start)
            return verdict, verdict.heuristic, outcome

        @functools.wraps(method)
        def decorated(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            if self.tracer is None:
                verdict, _, _ = timed(self, *args, **kwargs)
            else:
                # a child of the caller's current span, not made current itself (attaching a
                # context costs more than the rest of a span): incidents find it in DECISION_SPAN
                span = self.tracer.start_span(span_name, record_exception=False, set_status_on_exception=False)
                token = DECISION_SPAN.set(span)
                try:
                    verdict, heuristic, outcome = timed(self, *args, **kwargs)
                finally:
                    DECISION_SPAN.reset(token)
                if span.is_recording():
                    span.set_attributes(
                        {"agent_breaker.event": event_name, "agent_breaker.verdict": outcome}
                        | ({} if heuristic is None else {"agent_breaker.heuristic": heuristic})
                        | attributes("agent_breaker.counters", getattr(verdict, "counters", {}))
                    )
                # no exception recorded: an invalid event's message may quote its payload
                span.end()
            if isinstance(verdict, InvalidEventError):
                raise verdict
            return verdict

        return decorated

    return wrap


def outcome_of(verdict: Verdict | ResultVerdict) -> str:
    passed = verdict.accepted if isinstance(verdict, ResultVerdict) else verdict.allowed
    return "blocked" if not passed else ("warned" if verdict.heuristic else "allowed")


class Reporter:
    """Incidents to the listeners (and as span events), breaker moves to the gauges, and the
    engine's own count of trips."""

    def __init__(self, telemetry: Metrics, listeners: Iterable[Listener]) -> None:
        self.telemetry = telemetry
        self.listeners: list[Listener] = list(listeners)
        self._trips: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def count(self, heuristic: str, severity: str) -> None:
        with self._lock:
            self._trips[(heuristic, severity)] += 1

    def trips(self) -> dict[str, int]:
        """Trips so far, as {"heuristic:severity": count}."""
        with self._lock:
            return {f"{h}:{sev}": n for (h, sev), n in sorted(self._trips.items())}

    def tripped(self, s: SessionState, ev: AnyEvent, trip: Trip, severity: str, now: float, tool: str | None) -> None:
        self.count(trip.heuristic, severity)
        if not self.listeners:
            return
        incident = Incident(
            ts=now,
            session=s.sid,
            tenant=s.tenant,
            feature=s.feature,
            agent=ev.agent or s.agent,
            heuristic=trip.heuristic,
            severity=severity,  # type: ignore[arg-type]  # "block" or "warn", from the deciders
            scope=trip.scope,
            tool=tool,
            reason=trip.reason,
            counters=dict(trip.counters),
            tokens_so_far=s.spend.tokens,
            cost_usd_so_far=s.spend.cost_usd,
            advisory=trip.advisory,
        )
        self.tell(incident)

    def breaker_moved(
        self,
        t: Transition | None,
        tool: str | None,
        tenant: str | None,
        state: BreakerStateName,
        *,
        per_tenant: bool,
    ) -> None:
        """A breaker was found in `state`, maybe after transition `t`: the gauge, and for a
        move the transitions counter and a breaker incident to the listeners. `per_tenant`:
        the breaker is the tenant's own (else the incident names no tenant)."""
        name = tool or "unknown"
        if t is None:
            self.telemetry.breaker_seen(name, state.value)
            return
        self.telemetry.breaker_moved(name, t.src.value, t.dst.value)
        # for on-call: how long until the first probe may run
        counters = {} if t.open_interval_s is None else {"open_interval_s": round(t.open_interval_s, 3)}
        incident = BreakerIncident(
            ts=t.at,
            tool=name,
            tenant=tenant if per_tenant else None,
            src=t.src.value,
            dst=t.dst.value,
            reason=t.reason,
            forced=t.reason == breaker_core.OPERATOR,
            counters=counters,
        )
        self.tell(incident)

    def tell(self, incident: Incident | BreakerIncident) -> None:
        span = DECISION_SPAN.get()
        if span is not None:
            try:
                span.add_event(f"agent_breaker.{incident.kind}", span_event(incident))
            except Exception:  # tracing never breaks a decision
                log.exception("agent-breaker: span event of an incident failed")
        for listener in self.listeners:
            try:
                listener(incident)
            except Exception:  # a failing listener never breaks a decision
                log.exception("agent-breaker incident listener %r failed", listener)


def per_tenant(cfg: AgentBreakerConfig, share_breakers: bool) -> bool:
    """Is a tool's breaker its tenant's own: keyed by tenant, or the session's (not shared)."""
    return cfg.breaker.key_by_tenant or not share_breakers


def span_event(incident: Incident | BreakerIncident) -> dict[str, Any]:
    """An incident as span event attributes: its names and numbers (no reason text: it may
    name a tool, which the span's attributes hold already)."""
    d = incident.to_dict()
    counters = d.pop("counters")
    d.pop("reason")
    return attributes("agent_breaker", {k: v for k, v in d.items() if v is not None}) | attributes(
        "agent_breaker.counters", counters
    )
