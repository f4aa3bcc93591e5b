"""The guard engine: one decision per agent event.

`Engine` is the single code path behind `agent-breaker replay`, the NeMo actions and direct
Python use. A decision reads what it needs first (the event reduced to hashes and numbers, the
policy in force, the shared breaker's permission, the global spend window, the tool views),
then decides purely on the session's state in one store update (which a shared store may run
again on a compare-and-set conflict, so it touches nothing else), then applies what the
decision asked for outside the session (a breaker outcome, a released probe, the tool views)
and tells the listeners. Policy resolution lives in `policy.py`, result classification in
`outcomes.py`, the storage-failure policy in `failure_policy.py`.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import hmac
import json
import logging
import os
import re
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

import orjson

from . import heuristics as H
from ._canonical import CanonicalError, Fingerprinter, collapse_whitespace
from ._text import normalize_name, normalize_text
from .breaker import BreakerState, BreakerStateName, Permission, Transition
from .breaker import core as breaker_core
from .breaker.states import MANUAL_STATES
from .clock import Clock, SystemClock
from .config import FINGERPRINT_SECRET_ENV, AgentBreakerConfig, ConfigError, parse_config
from .detectors import churn, conversation, loops
from .detectors.base import Trip
from .escalations import AlreadyResolved, EscalationError, EscalationStore, ToolOutcome, store_for
from .escalations import Escalation as _Escalation
from .escalations import Spend as EscalationSpend
from .escalations.records import new_id as new_escalation_id
from .events import Assistant, Final, InvalidEventError, ToolCall, ToolResult, User, parse_event, parse_typed
from .failure_policy import storage_unavailable
from .governor import budget
from .incidents import sinks_for
from .metrics import Metrics
from .metrics import shared as shared_metrics
from .outcomes import FailurePredicate, Outcome, carries_content, classify, is_acknowledgement, is_blank, says_nothing
from .policy import CONFIRMATION, CheckContext, Policies, Policy, judge, run_checks
from .receipts import ReceiptKeys, Refs, empty_mutation_trip, is_empty_result, mint, verify
from .session import (
    MAX_PENDING,
    MAX_SAID,
    MAX_VALUES,
    MIXED,
    CallFacts,
    ChurnView,
    Pending,
    SessionState,
    Spend,
    put_bounded,
)
from .store import MemoryStore, StorageError, Store, store_from_uri
from .store.base import key_parts, split_key
from .tracing import attributes, configured_tracer
from .verdicts import ALLOW, BreakerIncident, Incident, ResultVerdict, Verdict, verdict_for

log = logging.getLogger("agent_breaker")
#: the prefix of the ids the engine gives calls made without one (paired by their tool)
UNNAMED_CALL = "~"
incident_log = logging.getLogger("agent_breaker.incidents")

Listener = Callable[[Incident | BreakerIncident], None]

#: labels of keyed hashes: a tool's name, a failure's error, an argument's value (a result may
#: echo it), a session in a tool view
TOOL = "tool"
FAILURE = "failure"
ECHO = "echo"
MEMBER = "member"
TURN = "turn"
EFFECT = "effect"
_NUMBER = re.compile(r"[0-9]+")
#: joins tenant and session id in a session key: ids cannot hold control characters
TENANT_SEPARATOR = "\x1f"
#: sessions this engine knows have made more than one distinct call (no tool view to read)
MAX_MIXED_SESSIONS = 100_000
#: (tenant, tool) pairs whose latest result's schema conformity is remembered (schema_drift)
MAX_SHAPES = 10_000


def log_incident(incident: Incident | BreakerIncident) -> None:
    """The default listener: one JSON line per incident on the `agent_breaker.incidents` logger."""
    incident_log.warning(json.dumps(incident.to_dict(), sort_keys=True))


@dataclass(slots=True)
class _Step:
    """One event on its way through the engine."""

    ev: Any
    key: str
    now: float
    p: Policy

    def session(self, state: object | None) -> SessionState:
        if isinstance(state, SessionState):
            return state
        ev = self.ev
        return SessionState(self.key, tenant=ev.tenant, feature=ev.feature, agent=ev.agent, created_s=self.now)


@dataclass(slots=True)
class _Decided:
    """What a pure decision returns besides the new state: the verdict, the trips to report,
    and what must happen outside the session once it is written."""

    verdict: Any
    trips: list[tuple[Trip, str]] = field(default_factory=list)
    breaker: tuple[str, int | None, Outcome] | None = None  # a shared breaker outcome to record: key, probe
    view: tuple[str, Callable[[ChurnView], bool | None]] | None = None  # a tool view change
    mixed: bool = False  # the session has now made more than one distinct call
    transitions: list[Transition] = field(default_factory=list)  # of the session's own breakers
    frozen: str | None = None  # refused for this escalation: is it still open?
    resumed: str | None = None  # a user turn with news lifted the loop halt this escalation froze
    escalating: tuple[Trip, str] | None = None  # the trip that froze the session, and the id it froze it as


_R = TypeVar("_R", Verdict, ResultVerdict)
#: the span of the decision in progress (OpenTelemetry), for its incidents' span events
_DECISION_SPAN: contextvars.ContextVar[Any] = contextvars.ContextVar("agent_breaker_decision_span", default=None)


def _measured(event: str) -> Callable[[Callable[[Engine, Any], _R]], Callable[[Engine, Any], _R]]:
    """Count a decision method's verdicts (by heuristic: allowed, warned, blocked) and time it;
    an event refused as invalid counts as blocked by invalid_event."""

    def wrap(method: Callable[[Engine, Any], _R]) -> Callable[[Engine, Any], _R]:
        def timed(self: Engine, event: Any) -> tuple[_R | InvalidEventError, str | None, str]:
            start = time.perf_counter()
            try:
                verdict = method(self, event)
            except InvalidEventError as exc:
                self.telemetry.decided(event_name, H.INVALID_EVENT, "blocked", time.perf_counter() - start)
                return exc, H.INVALID_EVENT, "blocked"
            outcome = _outcome(verdict)
            self.telemetry.decided(event_name, verdict.heuristic, outcome, time.perf_counter() - start)
            return verdict, verdict.heuristic, outcome

        @functools.wraps(method)
        def measured(self: Engine, event: Any) -> _R:
            if self.tracer is None:
                verdict, _, _ = timed(self, event)
            else:
                # a child of the caller's current span, not made current itself (attaching a
                # context costs more than the rest of a span): incidents find it in _DECISION_SPAN
                span = self.tracer.start_span(span_name, record_exception=False, set_status_on_exception=False)
                token = _DECISION_SPAN.set(span)
                try:
                    verdict, heuristic, outcome = timed(self, event)
                finally:
                    _DECISION_SPAN.reset(token)
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

        return measured

    event_name = event
    span_name = f"agent_breaker.{event}"
    return wrap


def _outcome(verdict: Verdict | ResultVerdict) -> str:
    passed = verdict.accepted if isinstance(verdict, ResultVerdict) else verdict.allowed
    return "blocked" if not passed else ("warned" if verdict.heuristic else "allowed")


class Engine:
    """Decides on each agent event: may this tool call run, what does this result, turn or
    answer change. See docs/heuristics.md for the heuristics and their settings."""

    def __init__(
        self,
        config: AgentBreakerConfig | Mapping[str, Any] | None = None,
        *,
        store: Store | None = None,
        clock: Clock | None = None,
        listeners: Iterable[Listener] | None = None,
        share_breakers: bool = True,
        observe: bool = False,
        failure_predicates: Mapping[str, FailurePredicate] | None = None,
        receipt_keys: ReceiptKeys | None = None,
        fingerprinter: Fingerprinter | None = None,
        trust_event_time: bool = False,
        telemetry: Metrics | None = None,
        tracer: Any | None = None,
        sinks: bool = True,
        escalations: EscalationStore | Literal[False] | None = None,
    ) -> None:
        """`trust_event_time`: decide at each event's own `ts` (replay of a recorded trace).
        Live traffic keeps it False: the engine's clock decides, and a caller's `ts` is
        ignored, so no input can move another session's or a shared breaker's time.
        `listeners` replace the default one (the incident log); the config's incident sinks
        (`incidents:`, $AGENT_BREAKER_INCIDENT_WEBHOOK) are added to them unless `sinks` is False
        (replay, the report, benchmarks: what they raise is history, not news for on-call).
        `tracer`: an OpenTelemetry tracer (default: the process's provider's, when one is set).
        `escalations`: where session-terminal trips and unverified claims go to a human (default:
        the config's store, opened on the first escalation; False: none, as in replay)."""
        self.config = config if isinstance(config, AgentBreakerConfig) else parse_config(config)
        self.store: Store = store or _store_for(self.config)
        self.clock = clock or SystemClock()
        self.trust_event_time = trust_event_time
        # Prometheus metrics (process-wide unless given); `metrics()` below is the trips count
        self.telemetry = telemetry if telemetry is not None else shared_metrics()
        if isinstance(self.store, MemoryStore):
            self.telemetry.watch_sessions(self.store)
        self.telemetry.reserve_tools(self.config.tools)
        self.tracer = tracer if tracer is not None else configured_tracer()
        self.listeners: list[Listener] = [log_incident] if listeners is None else list(listeners)
        if sinks:
            self.listeners += sinks_for(self.config.incidents, self.telemetry)
        self._escalations: EscalationStore | Literal[False] | None = escalations
        self.share_breakers = share_breakers
        self.observe = observe
        self.failure_predicates: dict[str, FailurePredicate] = {
            normalize_name(tool): fn for tool, fn in (failure_predicates or {}).items()
        }
        self.receipt_keys = receipt_keys or ReceiptKeys.from_config(
            self.config.receipts, required=self.config.mode_of(H.UNVERIFIED_CLAIM) == "enforce" and not observe
        )
        self.fingerprints = fingerprinter or fingerprinter_for(
            self.config, shared=not isinstance(self.store, MemoryStore), receipt_keys=self.receipt_keys
        )
        self.policies = Policies(self.config, self.fingerprints, observe=observe)
        self._confirmation = self._said(CONFIRMATION)
        self._mixed: OrderedDict[str, None] = OrderedDict()
        self._shapes: OrderedDict[str, bool] = OrderedDict()  # tool -> did its latest result meet its schema
        self._metrics: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- reading an event
    def _policy(self, tenant: str | None, feature: str | None, agent: str | None) -> Policy:
        return self.policies.get(tenant, feature, agent)

    def session_key(self, ev: Any) -> str:
        """The key of an event's session: its id within its tenant, so tenants cannot reach
        each other's sessions whatever ids they choose."""
        if ev.session is not None:
            sid = ev.session
        elif ev.conversation is not None:
            sid = f"conv:{self.fingerprints.hash64(ev.conversation):016x}"
        else:
            raise InvalidEventError.of([("session", "an event needs a session id, or a conversation to fingerprint")])
        return sid if ev.tenant is None else f"{ev.tenant}{TENANT_SEPARATOR}{sid}"

    def _now(self, ev: Any) -> float:
        if self.trust_event_time and ev.ts is not None:
            return ev.ts
        return self.clock.now()

    def _begin(self, event: Any, cls: type) -> _Step:
        ev: Any = event if isinstance(event, cls) else parse_typed(cls, event)  # the handler names the type
        return _Step(ev, self.session_key(ev), self._now(ev), self._policy(ev.tenant, ev.feature, ev.agent))

    def _facts(self, ev: ToolCall, p: Policy) -> CallFacts:
        try:
            canonical = p.canon.canonical(ev.args)
        except CanonicalError as exc:
            raise InvalidEventError.of([("args", str(exc))]) from None
        fp = self.fingerprints
        key = fp.hash64(ev.tool, canonical)
        mutating = ev.mutating if ev.mutating is not None else p.mutating(ev.tool)
        effect = None
        if mutating and not p.cfg.tool(ev.tool).idempotent:
            # the canonical args drop idempotency keys (volatile): a distinct key is a distinct action
            idempotency_key = p.idempotency_key(ev.args)
            effect = key if idempotency_key is None else fp.hash64(ev.tool, canonical, idempotency_key)
        fingerprinted = p.fingerprint_calls
        values, sizes = _values(fp, _leaves(ev.args))
        return CallFacts(
            tool=ev.tool,
            key=key,
            fp_text=fp.tokens(canonical) if fingerprinted else None,
            fp_shape=fp.shapes(canonical) if fingerprinted else None,
            fp_thought=tuple(sorted(fp.shapes(normalize_text(ev.thought)))) if ev.thought and fingerprinted else None,
            tokens=ev.input_tokens + ev.output_tokens,
            cost_usd=budget.step_cost_usd(p.cfg, ev.input_tokens, ev.output_tokens, ev.cost_usd, ev.model),
            depth=ev.depth or 0,
            mutating=mutating,
            effect=effect,
            writes=carries_content(ev.args),
            values=values,
            sizes=frozenset(sizes),
            turn=None if effect is None or ev.turn is None else fp.hash64(TURN, ev.turn),
        )

    @staticmethod
    def _result_canonical(p: Policy, result: Any) -> str:
        try:
            return p.result_canon.canonical(result)
        except CanonicalError as exc:
            raise InvalidEventError.of([("result", str(exc))]) from None

    def _dependency_breaker(
        self, cfg: AgentBreakerConfig, tenant: str | None, tool: str, dependency: str | None, tool_key: str
    ) -> str:
        """The breaker a call goes through: its dependency's (`tool@host`), so that failures of
        a host the agent chose open that host only; the tool's own while an operator holds it
        (forced open, disabled, metrics only), so the operator's switch covers every host."""
        if dependency is None:
            return tool_key
        held = self.store.breaker_state(tool_key)
        if held is not None and held.state in MANUAL_STATES:
            return tool_key
        return self._breaker_key(cfg, tenant, f"{tool}@{dependency}")

    def _breaker_key(self, cfg: AgentBreakerConfig, tenant: str | None, tool: str) -> str:
        if not self.share_breakers:
            return tool
        return key_parts(tenant or "", tool) if cfg.breaker.key_by_tenant else key_parts(tool)

    # ----------------------------------------------------------------- deciding and writing
    def _commit(
        self, step: _Step, decide: Callable[[SessionState], tuple[SessionState | None, _Decided]], tool: str | None
    ) -> Any:
        """Run the pure decision in one store update, then do what it asked for outside the
        session, then tell the listeners. A shared store may run `decide` more than once."""
        outcome: list[tuple[SessionState, _Decided]] = []

        def update(state: object | None) -> tuple[SessionState | None, None]:
            s = step.session(state)
            new_state, decided = decide(s)
            outcome[:] = [(s, decided)]
            return new_state, None

        try:
            self.store.update_session(step.key, step.now, update)
        except StorageError as exc:
            return self._unavailable(step, exc, tool)
        s, decided = outcome[0]
        if decided.frozen is not None and self._thawed(step, decided.frozen):
            return _THAWED
        if decided.resumed is not None:
            self._resumed_by_user(step, decided.resumed)
        if decided.breaker is not None:
            bkey, probe, out = decided.breaker
            if out.breaker_ignores:
                if probe is not None:  # the probe proved nothing: its slot is free for another
                    self._release_probe(bkey, step.p.cfg, probe)
            else:
                try:
                    recorded = self.store.breaker_record(
                        bkey,
                        step.p.cfg.breaker,
                        step.now,
                        failed=out.dependency,
                        slow=out.slow,
                        probe=probe,
                        session=format(self._member(step.key), "x"),
                    )
                except StorageError as exc:
                    log.warning("agent-breaker: breaker outcome of %s not recorded: %s", tool, exc)
                else:
                    decided.verdict = replace(decided.verdict, breaker_state=recorded.state.value)
                    self._breaker_moved(recorded.transition, tool, step.ev.tenant, step.p.cfg, recorded.state)
        if decided.view is not None:
            self._update_view(decided.view[0], step.now, decided.view[1])
        if decided.mixed:
            self._remember_mixed(step.key)
        for trip, severity in decided.trips:
            self._emit(s, step.ev, trip, severity, step.now, tool)
        if decided.escalating is not None:
            trip, frozen_as = decided.escalating
            escalation = self._escalate(step, s, trip, tool, frozen_as) or frozen_as
            decided.verdict = replace(decided.verdict, route={"tier": "escalate", "escalation_id": escalation})
        for t in decided.transitions:
            self._breaker_moved(t, tool, step.ev.tenant, step.p.cfg, t.dst)
        return decided.verdict

    def _unavailable(self, step: _Step, exc: StorageError, tool: str | None) -> Any:
        verdict, severity = storage_unavailable(
            exc, self.config.storage, enforcing=step.p.cfg.mode == "enforce", result=isinstance(step.ev, ToolResult), tool=tool
        )
        with self._lock:
            self._metrics[(verdict.heuristic or H.STORAGE_UNAVAILABLE, severity)] += 1
        self.telemetry.storage_failed(severity)
        return verdict

    def _settle(
        self,
        s: SessionState,
        decided: _Decided,
        block: Trip | None,
        warn: Trip | None,
        tool: str | None,
        call_id: str | None = None,
    ) -> Verdict:
        """Turn the checks' outcome into a verdict; a session-terminal block halts the session,
        and one that goes to a human freezes it in the same update (the record follows it)."""
        if block is not None:
            if warn is not None and warn.advisory:
                decided.trips.append((warn, "warn"))  # spent beside the refusal: counted and reported
            if block.heuristic in H.SESSION_TERMINAL:
                s.halted = (block.heuristic, block.reason)
            if block.heuristic in H.ESCALATING and s.escalation is None and self._escalations is not False:
                s.escalation = new_escalation_id()
                decided.escalating = (block, s.escalation)
            decided.trips.append((block, "block"))
            return verdict_for(block, "block", tool)
        if warn is not None:
            decided.trips.append((warn, "warn"))
            return verdict_for(warn, "warn", tool, call_id)
        return ALLOW if call_id is None else Verdict(True, call_id=call_id)

    def _global_spend(self, step: _Step, tokens: int, cost_usd: float) -> Trip | Verdict | None:
        """Add a step's spend to its tenant's and feature's shared window, and to its tenant's
        window over all features (once each, before the session update, which a shared store
        may run again); the global_budget trip, if over. The tenant's ceiling is read from its
        own settings: a feature or agent label does not choose it."""
        tenant = step.ev.tenant or ""
        windows = []
        g = step.p.cfg.global_budget
        if (g.max_tokens is not None or g.max_cost_usd is not None) and step.p.cfg.mode_of(H.GLOBAL_BUDGET) != "off":
            feature = key_parts(tenant, step.ev.feature or "")
            windows.append((feature, g.max_tokens, g.max_cost_usd, g.window_s, "tenant and feature"))
        own = self._policy(step.ev.tenant, None, None).cfg
        t = own.global_budget
        t_tokens = t.tenant_max_tokens if t.tenant_max_tokens is not None else t.max_tokens
        t_cost = t.tenant_max_cost_usd if t.tenant_max_cost_usd is not None else t.max_cost_usd
        if (t_tokens is not None or t_cost is not None) and own.mode_of(H.GLOBAL_BUDGET) != "off":
            windows.append((key_parts(tenant), t_tokens, t_cost, t.window_s, "tenant"))
        trip = None
        for key, max_tokens, max_cost, window_s, whose in windows:
            try:
                spent = self.store.add_spend(key, tokens, cost_usd, window_s, step.now)
            except StorageError as exc:
                return self._unavailable(step, exc, getattr(step.ev, "tool", None))
            trip = trip or budget.check_global_budget(spent, max_tokens, max_cost, window_s, step.now, whose)
        return trip

    # ----------------------------------------------------------------- tool calls
    @_measured("tool_call")
    def check_tool_call(self, event: ToolCall | Mapping[str, Any]) -> Verdict:
        """Decide, before it runs, whether a tool call may run."""
        step = self._begin(event, ToolCall)
        ev, now, p = step.ev, step.now, step.p
        cfg = p.cfg
        if cfg.mode == "off":
            return ALLOW
        f = self._facts(ev, p)
        problem = p.schema_problem(f.tool, ev.args)
        schema_trip = None if problem is None else schema_violation(f.tool, "arguments", problem)
        self.telemetry.spent(ev.tenant, ev.feature, f.tokens, f.cost_usd)
        polling_tool = p.polling(ev.tool)
        global_trip = self._global_spend(step, f.tokens, f.cost_usd)
        if isinstance(global_trip, Verdict):
            return global_trip
        churn_on = p.mode(H.SESSION_CHURN) != "off"
        tool_key = self.fingerprints.labeled(TOOL, f.tool)
        view = self._read_view(ev.tenant, tool_key) if churn_on and step.key not in self._mixed else None
        bkey = self._breaker_key(cfg, ev.tenant, f.tool)
        breaker_on = p.mode(H.CIRCUIT_OPEN) != "off"
        # a shared breaker is asked first (a half-open probe slot is released below if the
        # session refuses the call): the session's decision must not touch the store
        permission = None
        if breaker_on and self.share_breakers:
            try:
                bkey = self._dependency_breaker(cfg, ev.tenant, f.tool, p.dependency(f.tool, ev.args), bkey)
                permission = self.store.breaker_acquire(bkey, cfg.breaker, now)
            except StorageError as exc:
                return self._unavailable(step, exc, f.tool)

        def decide(s: SessionState) -> tuple[SessionState | None, _Decided]:
            decided = _Decided(ALLOW)
            if s.escalation is not None:
                # frozen for a human: refused, and nothing of the call is kept
                decided.frozen = s.escalation
                decided.verdict = _frozen_verdict(s, f.tool)
                return None, decided
            if ev.call_id is not None and ev.call_id in s.loops.pending:
                # a call id names one call: a second one under it would take the first's result
                reason = f"call_id {ev.call_id!r} names a call of {s.loops.pending[ev.call_id].facts.tool} still in flight"
                decided.verdict = Verdict(False, H.INVALID_EVENT, "block", "call", reason)
                return None, decided
            budget.account(s, cfg, now, f.tokens, f.cost_usd, f.tool)
            if f.mutating:
                s.ledger.attempt(f.tool)
            halted = _halted_verdict(s, cfg, f.tool)
            if halted is not None:
                decided.verdict = halted
                return s, decided
            similar = loops.chain_similarity(s, f, cfg, now)
            polling = polling_tool or loops.polled_by_result(s, f)
            block, warn = judge(cfg, [global_trip, schema_trip]) if global_trip or schema_trip else (None, None)
            if block is None:
                block, call_warn = run_checks(p.call_checks, CheckContext(s, f, cfg, now, polling, similar))
                warn = warn or call_warn
                if (block or warn) is not None and (block or warn).heuristic == H.DUPLICATE_MUTATION:  # type: ignore[union-attr]
                    # the agent is told to ask the user: the next "yes" is an answer again
                    s.loops.said.pop(self._confirmation, None)
            if block is None and view is not None and s.loops.only_key in (None, tool_key):
                block, churn_warn = judge(cfg, [churn.check(view, f.values, f.tool, cfg, now)], s)
                warn = warn or churn_warn
            granted, own_probe = permission, None
            if block is None and breaker_on and (permission is None or (permission.allowed and permission.probe is None)):
                # the session's own breaker: its failures alone open it, for it alone (a shared
                # one waits for breaker.min_sessions sessions). Asked only when the shared one
                # lets the call through unprobed, so neither holds a probe slot for nothing.
                own = breaker_core.acquire(s.breaker(bkey), cfg.breaker, now)
                own_probe = own.probe
                if own.transition is not None and not self.share_breakers:
                    decided.transitions.append(own.transition)  # shared: the tool's breaker did not move
                if permission is None or _breaker_trip(permission, f.tool) is None:
                    granted = own
            if block is None and granted is not None:
                trip = _breaker_trip(granted, f.tool)
                if trip is not None:
                    # a metrics-only breaker lets the call through and only reports
                    if granted.allowed is False and cfg.mode_of(H.CIRCUIT_OPEN) == "enforce":
                        block = trip
                    else:
                        warn = warn or trip
            if block is not None:
                decided.verdict = self._settle(s, decided, block, warn, f.tool)
                return s, decided
            call_id = ev.call_id
            if call_id is None:
                s.loops.auto_ids += 1
                call_id = f"{UNNAMED_CALL}{s.loops.auto_ids}"
            if len(s.loops.pending) >= MAX_PENDING and not _forget_lost(s, now - cfg.duplicate_mutation.in_flight_s):
                # never evict a call in flight: 64 decoys would push a failing call out, and its
                # failure would never count
                reason = f"{MAX_PENDING} calls of this session are in flight; report their results first"
                decided.verdict = Verdict(False, H.INVALID_EVENT, "block", "call", reason)
                return s, decided
            probe = permission.probe if permission is not None else None
            s.loops.pending[call_id] = Pending(
                f, call_id, bkey, probe, similar.text, similar.shape, loops.record_call(s, f, cfg), now, own_probe
            )
            if s.loops.only_key is None:
                s.loops.only_key = tool_key
            elif s.loops.only_key != tool_key:
                if s.loops.only_key != MIXED and churn_on:
                    # the calls of the one tool it made so far leave that tool's chains
                    left = _view_key_of(ev.tenant, s.loops.only_key)
                    decided.view = (left, lambda v: churn.leave(v, self._member(step.key)))
                s.loops.only_key = MIXED
            decided.mixed = s.loops.only_key == MIXED
            decided.verdict = self._settle(s, decided, None, warn, f.tool, call_id)
            return s, decided

        if permission is not None:
            self._breaker_moved(permission.transition, f.tool, ev.tenant, cfg, permission.state)
        verdict = self._commit_thawing(step, decide, f.tool)
        if permission is not None and permission.probe is not None and not verdict.allowed:
            self._release_probe(bkey, cfg, permission.probe)
        if not verdict.allowed and verdict.heuristic in _TOOL_DOWN:
            verdict = self._fallback(step, f.tool, verdict)
        return verdict

    def _commit_thawing(
        self, step: _Step, decide: Callable[[SessionState], tuple[SessionState | None, _Decided]], tool: str | None
    ) -> Verdict:
        """`_commit`, decided again when a human lifted the freeze the decision found (a few
        times at most: each lift needs a resume)."""
        for _ in range(1 + MAX_THAWS):
            verdict = self._commit(step, decide, tool)
            if verdict is not _THAWED:
                return verdict
            # a human resumed the session: decide again
        trip = Trip(H.ESCALATED, "session", "the session's escalations keep changing", "Stop and try again later.")
        return verdict_for(trip, "block", tool)

    # ----------------------------------------------------------------- model calls
    @_measured("model_call")
    def check_model_call(self, event: Assistant | Mapping[str, Any]) -> Verdict:
        """Decide, before a model call is paid for, whether the session may make it (what a model
        gateway asks before each completion). Refused when the session is frozen for a human,
        halted, or when the step the call would produce is over a session ceiling (steps,
        tokens, cost, token velocity). The event names the session with an assistant event's
        fields; its text and spend are not read. Nothing is counted, written or reported: the
        call's spend counts when its tool calls or its turn arrive, and they trip as usual."""
        step = self._begin(event, Assistant)
        p, now = step.p, step.now
        cfg = p.cfg
        if cfg.mode == "off":
            return ALLOW

        def decide(s: SessionState) -> tuple[SessionState | None, _Decided]:
            decided = _Decided(ALLOW)
            if s.escalation is not None:
                decided.frozen = s.escalation
                decided.verdict = _frozen_verdict(s, None)
                return None, decided
            halted = _halted_verdict(s, cfg, None)
            if halted is not None:
                decided.verdict = halted
                return None, decided
            # the ceilings as the call's step will meet them: one more step, its spend not known yet
            upcoming = replace(s, spend=replace(s.spend, steps=s.spend.steps + 1))
            block, _ = run_checks(p.session_limits, CheckContext(upcoming, None, cfg, now, False, loops.NOT_SIMILAR))
            if block is not None:
                decided.verdict = verdict_for(block, "block", None)
            return None, decided

        return self._commit_thawing(step, decide, None)

    def _fallback(self, step: _Step, tool: str, verdict: Verdict) -> Verdict:
        """A call its tool's breaker refused, routed down the tool's fallback tiers: the first
        alternative that is serving (its own breaker), else the static answer."""
        fb = step.p.cfg.tool(tool).fallback
        if fb is None:
            return verdict
        for alt in fb.alternatives:
            args = alt.mapped(step.ev.args)
            if alt.tool != tool and args is not None and self._serving(step, alt.tool):
                route = {"tier": "alternative", "tool": alt.tool, "args": args}
                return _routed(verdict, route, f"{tool} is unavailable: call {alt.tool} instead (the same request, mapped).")
        if fb.static is not None:
            route = {"tier": "static", "answer": fb.static}
            return _routed(verdict, route, f"{tool} is unavailable. Use this answer instead: {fb.static}")
        if fb.escalate:
            trip = Trip(verdict.heuristic or H.CIRCUIT_OPEN, "tool", verdict.reason, "", dict(verdict.counters))
            escalation = self._escalate(step, None, trip, tool)
            if escalation is not None:
                route = {"tier": "escalate", "escalation_id": escalation}
                return _routed(verdict, route, f"{tool} is unavailable: a human has the case ({escalation}). Stop here.")
        return verdict

    def awaiting_results(self, session: str, *, tenant: str | None = None) -> dict[str, str]:
        """call id -> tool of the session's calls that were allowed and await their result (a
        caller that gets results without their tool's name pairs them by call id). A call made
        without an id is under a key of the engine's, which starts with UNNAMED_CALL."""
        step = self._begin({"session": session, "tenant": tenant}, User)
        state = self.store.peek_session(step.key)
        if not isinstance(state, SessionState):
            return {}
        return {cid: p.facts.tool for cid, p in state.loops.pending.items()}

    # ----------------------------------------------------------------- escalations
    def escalation_store(self) -> EscalationStore | None:
        """The escalation store (the config's: its SQLite file, or its Redis for a fleet;
        opened on first use), or None."""
        if self._escalations is None:
            with self._lock:
                if self._escalations is None:
                    try:
                        self._escalations = store_for(self.config)
                    except (ConfigError, EscalationError, OSError) as exc:
                        log.warning("agent-breaker: the escalation store cannot be opened (tried again next time): %s", exc)
                        return None
        return self._escalations or None

    def _escalate(
        self, step: _Step, s: SessionState | None, trip: Trip, tool: str | None, frozen_as: str | None = None
    ) -> str | None:
        """Hand the session to a human: an escalation record (names, numbers, hashes; excerpts
        only where the tenant opted in), under the id the session was frozen as (`frozen_as`),
        or frozen now. A store that fails is logged: the session stays frozen under its id, and
        the record is written again at its next call (`_thawed`)."""
        store = self.escalation_store()
        if store is None:
            return None
        try:
            if s is None:
                s = step.session(self.store.peek_session(step.key))
            ev = step.ev
            esc = _Escalation.new(
                session=s.sid,
                heuristic=trip.heuristic,
                reason=trip.reason,
                now=step.now,
                tenant=s.tenant,
                feature=s.feature,
                agent=ev.agent or s.agent,
                counters=_evidence(self.fingerprints, step, trip),
                spend=EscalationSpend(int(s.spend.tokens), float(s.spend.cost_usd)),
                tools=() if tool is None else (ToolOutcome(tool, "blocked" if trip.scope != "tool" else "unavailable"),),
                excerpts=_excerpts(step) if step.p.cfg.escalations.excerpts else None,
            )
            if frozen_as is not None:
                esc = replace(esc, id=frozen_as)
            escalation_id = store.escalate(esc).id
            if escalation_id != frozen_as:  # frozen now, or an escalation of this key was open already
                self.store.update_session(step.key, step.now, lambda st: (_freeze(step.session(st), escalation_id), None))
        except (EscalationError, StorageError) as exc:
            log.warning("agent-breaker: escalation of session %r failed: %s", step.key, exc)
            return None
        return escalation_id

    def _rewrite(self, step: _Step, escalation_id: str) -> None:
        """Write the record of a session frozen under `escalation_id` whose record is missing
        (the store failed, or the process died, between the freeze and the record)."""
        try:
            s = step.session(self.store.peek_session(step.key))
        except StorageError:
            return
        heuristic, reason = s.halted or (H.ESCALATED, "the session was handed to a human")
        self._escalate(step, s, Trip(heuristic, "session", reason, ""), None, escalation_id)

    def _resumed_by_user(self, step: _Step, escalation_id: str) -> None:
        """Record the resume a user's turn made; an escalation an operator aborted meanwhile
        wins: the session is frozen again."""
        store = self.escalation_store()
        if store is None:
            return
        try:
            store.resolve(escalation_id, "resume", "a user turn with new content lifted the loop halt")
        except AlreadyResolved as exc:
            if exc.status == "aborted":
                try:
                    self.store.update_session(step.key, step.now, lambda st: (_freeze(step.session(st), escalation_id), None))
                except StorageError as err:
                    log.warning("agent-breaker: session of aborted escalation %s not frozen again: %s", escalation_id, err)
        except EscalationError as exc:
            log.warning("agent-breaker: resume of escalation %s not recorded: %s", escalation_id, exc)

    def _thawed(self, step: _Step, escalation_id: str) -> bool:
        """Was the escalation that froze this session resumed by a human? Then the freeze is
        lifted and the loop streaks start over (an abort keeps it frozen for good)."""
        store = self.escalation_store()
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
            self.store.update_session(step.key, step.now, thaw)
        except StorageError:
            return False
        return True

    def _serving(self, step: _Step, tool: str) -> bool:
        """Would this tool's breaker let a call through now (read only: the alternative's own
        call goes through its breaker when the caller runs it)."""
        if not self.share_breakers or step.p.mode(H.CIRCUIT_OPEN) == "off":
            return True
        try:
            st = self.store.breaker_state(self._breaker_key(step.p.cfg, step.ev.tenant, tool))
        except StorageError:
            return False
        if st is None:
            return True
        if st.state is BreakerStateName.OPEN:
            return step.now >= st.opened_at + st.open_interval_s  # its next call is a probe
        return st.state is not BreakerStateName.FORCED_OPEN

    def _release_probe(self, bkey: str, cfg: AgentBreakerConfig, probe: int) -> None:
        try:
            self.store.breaker_release(bkey, cfg.breaker, probe)
        except StorageError as exc:  # the slot frees itself after probe_timeout_s
            log.warning("agent-breaker: probe slot of %s not released: %s", bkey, exc)

    # ----------------------------------------------------------------- the tool views
    def _read_view(self, tenant: str | None, tool_key: int) -> ChurnView | None:
        try:
            state = self.store.peek_session(_view_key_of(tenant, tool_key))
        except StorageError:
            return None
        return getattr(state, "churn", None)

    def _member(self, session_key: str) -> int:
        """A session as a tool view's chains name it: a keyed hash of its key."""
        return self.fingerprints.labeled(MEMBER, session_key)

    def _remember_mixed(self, key: str) -> None:
        with self._lock:
            self._mixed[key] = None
            if len(self._mixed) > MAX_MIXED_SESSIONS:
                self._mixed.popitem(last=False)

    def _update_view(self, vkey: str, now: float, change: Callable[[ChurnView], bool | None]) -> None:
        """Change a tool view (session_churn); a storage failure only costs that view."""

        def update(state: object | None) -> tuple[SessionState | None, None]:
            if isinstance(state, SessionState) and state.churn is not None:
                view_state = state
            else:
                view_state = SessionState(vkey, churn=ChurnView())
            changed = change(view_state.churn)  # type: ignore[arg-type]
            return (None if changed is False else view_state), None

        try:
            self.store.update_session(vkey, now, update)
        except StorageError as exc:
            log.warning("agent-breaker: tool view not updated: %s", exc)

    # ----------------------------------------------------------------- tool results
    @_measured("tool_result")
    def record_tool_result(self, event: ToolResult | Mapping[str, Any]) -> ResultVerdict:
        """Record what a tool returned (after it ran); mint a receipt for a mutating tool's success."""
        step = self._begin(event, ToolResult)
        ev, now, p = step.ev, step.now, step.p
        cfg = p.cfg
        if cfg.mode == "off":
            return ResultVerdict(True)
        out = classify(ev, cfg, p.in_progress, self.failure_predicates.get(ev.tool))
        result_trips = self._result_schema(p, ev, out)
        if result_trips and p.mode(H.SCHEMA_VIOLATION) == "enforce":
            # a result that breaks its schema is a failed call, the call's own: it feeds the
            # loop detectors, mints no receipt, and proves nothing to a half-open breaker
            out = replace(out, failed=True, dependency=False, retry_after_s=None)
        canonical = self._result_canonical(p, ev.result)
        result_hash = self.fingerprints.hash64(canonical)
        # the loop detectors compare results without what churns: repeats of a call without
        # timings or identities (ids, refs), answers to other calls without timings only
        fp = self.fingerprints
        timed = p.churn.timing(canonical)
        timed_hash = result_hash if timed == canonical else fp.hash64(timed)
        masked = p.churn.identity(timed)
        repeat_hash = timed_hash if masked == timed else fp.hash64(masked)
        failure, failure_shape = None, None
        if out.failed:
            error = p.churn(_json_text(ev.error))
            failure = fp.hash64(FAILURE, masked, error)
            failure_shape = tuple(sorted(fp.shapes(f"{error} {masked}"[:MAX_ERROR_CHARS])))
        tool_key = fp.labeled(TOOL, ev.tool)
        blank = is_blank(ev.result)
        polling = p.polling(ev.tool)
        references = p.claims.result_references(canonical) if not out.failed else None
        churn_on = p.mode(H.SESSION_CHURN) != "off"

        def decide(s: SessionState) -> tuple[SessionState | None, _Decided]:
            pending = _pop_pending(s, ev)
            if pending is None:
                # a result of a call the guard never let through (or already recorded) counts
                # toward nothing and mints nothing: the session is not even written
                which = f"with call_id {ev.call_id!r}" if ev.call_id is not None else "without a call_id"
                reason = f"no call of {ev.tool} {which} was allowed in this session and awaits its result"
                return None, _Decided(ResultVerdict(False, H.INVALID_EVENT, reason))
            # the verdict is built once its fields are known (a frozen dataclass costs ~1 us to build here)
            decided = _Decided(None)
            heuristic: str | None = None
            breaker_state: str | None = None
            reason = ""
            for trip in result_trips:
                decided.trips.append((trip, "block" if trip.heuristic == H.SCHEMA_VIOLATION and out.failed else "warn"))
                heuristic, reason = trip.heuristic, trip.reason
            f = pending.facts
            if ev.mutating and not f.mutating:
                f.mutating = True  # the result says so (the facts were taken out of the state: a copy)
            if references is not None:
                s.ledger.observe(references)
            if self.share_breakers:
                decided.breaker = (pending.breaker_key, pending.probe, out)
            st = s.breaker(pending.breaker_key)
            # a breaker judges the dependency: the call's own failures count neither way
            if out.breaker_ignores:
                if pending.own_probe is not None:
                    breaker_core.release(st, pending.own_probe)
            else:
                moved = breaker_core.record(st, cfg.breaker, now, failed=out.dependency, slow=out.slow, probe=pending.own_probe)
                if moved is not None and not self.share_breakers:
                    decided.transitions.append(moved)
            if not self.share_breakers:
                breaker_state = st.state.value
            decided.verdict = ResultVerdict(True, heuristic, reason, failed=out.failed, breaker_state=breaker_state)
            if s.loops.only_key == tool_key and churn_on and not out.dependency:  # an outage is the breaker's
                outcome = repeat_hash if failure is None else failure
                member = self._member(step.key)
                decided.view = (
                    _view_key_of(ev.tenant, tool_key),
                    lambda v: churn.record_outcome(v, member, f.values, outcome, out.failed, now, cfg),
                )
            # the answer (to compare with the tool's answers to other calls) and the news (whether
            # the tool said it before), an echo of the call's own argument masked in both
            echoed = _echo_masked(fp, p, timed, ev.result, f)
            answer = timed_hash if echoed == timed else fp.hash64(echoed)
            echoed_masked = masked if echoed == timed else _echo_masked(fp, p, masked, ev.result, f)
            news = repeat_hash if echoed_masked == masked else fp.hash64(echoed_masked)
            # what a repeated action did: its result with ids, timings and numbers aside
            effect = fp.hash64(EFFECT, _NUMBER.sub("0", masked)) if f.effect is not None and not out.failed else None
            ack = is_acknowledgement(ev.result)
            heard = loops.Heard(repeat_hash, answer, tool_key, failure, failure_shape, ack, effect, news)
            if loops.record_result(s, pending, heard, out, blank, polling, now, cfg):
                # new information: assistant turns start a new stretch, and so do this
                # session's own breaker streaks
                s.turns.clear()
                s.restart_breaker_streaks()
            if out.failed or not f.mutating:
                return s, decided
            s.ledger.attempt(f.tool)
            self._receipt(s, decided, cfg, ev, pending, result_hash, now, references)
            return s, decided

        return self._commit(step, decide, ev.tool)

    def _result_schema(self, p: Policy, ev: ToolResult, out: Outcome) -> list[Trip]:
        """A successful result checked against its tool's schema: schema_violation when it
        breaks it, and schema_drift too when the tool's results met it until now (per process)."""
        if out.failed:
            return []
        problem = p.schema_problem(ev.tool, ev.result, result=True)
        # tenants may hold different schemas for one tool: drift is judged per tenant
        shape_key = f"{ev.tenant or ''}{TENANT_SEPARATOR}{ev.tool}"
        if problem is None:
            if ev.tool in p.cfg.tools:
                self._remember_shape(shape_key, True)
            return []
        trips = []
        if self._remember_shape(shape_key, False) and p.mode(H.SCHEMA_DRIFT) != "off":
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

    def _remember_shape(self, key: str, conforming: bool) -> bool:
        """Note whether a (tenant's) tool's latest result met its schema; True when one that did
        is followed by one that does not (the moment it drifted)."""
        with self._lock:
            before = self._shapes.pop(key, None)
            self._shapes[key] = conforming
            if len(self._shapes) > MAX_SHAPES:
                self._shapes.popitem(last=False)
        return before is True and not conforming

    def _receipt(
        self,
        s: SessionState,
        decided: _Decided,
        cfg: AgentBreakerConfig,
        ev: ToolResult,
        pending: Pending,
        result_hash: int,
        now: float,
        references: Refs | None,
    ) -> None:
        """A mutating tool's success: a receipt, unless its empty payload is refused; the
        references of a receipted result may be cited as confirmations."""
        f = pending.facts
        anomaly = None
        if is_empty_result(ev.result):
            block, warn = judge(cfg, [empty_mutation_trip(f.tool)])
            anomaly = self._settle(s, decided, block, warn, f.tool)
            if block is not None:  # enforce: no receipt for an action that may not have happened
                decided.verdict = replace(decided.verdict, accepted=False, heuristic=anomaly.heuristic, reason=anomaly.reason)
                return
        receipt = None
        if self.receipt_keys is not None:
            receipt = mint(
                self.receipt_keys,
                tenant=s.tenant,
                session=s.sid,
                call_id=pending.call_id,
                tool=f.tool,
                args_hash=f.key,
                result_hash=result_hash,
                ts=now,
            )
            s.ledger.add(receipt, f.tool)
            if references is not None:
                s.ledger.confirm(references)
        if anomaly is not None and anomaly.heuristic is not None:  # observed: reported, not withheld
            decided.verdict = replace(decided.verdict, heuristic=anomaly.heuristic, reason=anomaly.reason, receipt=receipt)
        else:
            decided.verdict = replace(decided.verdict, receipt=receipt)

    # ----------------------------------------------------------------- turns
    @_measured("assistant")
    def record_assistant(self, event: Assistant | Mapping[str, Any]) -> Verdict:
        """An assistant turn with text and no tool call: spend, echo and deadlock checks."""
        step = self._begin(event, Assistant)
        ev, now, p = step.ev, step.now, step.p
        cfg = p.cfg
        if cfg.mode == "off":
            return ALLOW
        tokens = ev.input_tokens + ev.output_tokens
        cost = budget.step_cost_usd(cfg, ev.input_tokens, ev.output_tokens, ev.cost_usd, ev.model)
        fph = self.fingerprints
        fp = tuple(sorted(fph.tokens(normalize_text(ev.text))))
        agent = fph.hash64(ev.agent or "") & 0xFFFF_FFFF
        global_trip = self._global_spend(step, tokens, cost)
        if isinstance(global_trip, Verdict):
            return global_trip

        def decide(s: SessionState) -> tuple[SessionState, _Decided]:
            decided = _Decided(ALLOW)
            budget.account(s, cfg, now, tokens, cost, None)
            halted = _halted_verdict(s, cfg, None)
            if halted is not None:
                decided.verdict = halted
                return s, decided
            turn = conversation.record_turn(s, agent, fp, cfg)
            block, warn = judge(cfg, [global_trip]) if global_trip is not None else (None, None)
            if block is None:
                block, limit_warn = run_checks(p.session_limits, CheckContext(s, None, cfg, now, False, loops.NOT_SIMILAR))
                warn = warn or limit_warn
            if block is None:
                block, turn_warn = judge(cfg, list[Trip | None](conversation.check_turn(turn, cfg)), s)
                warn = warn or turn_warn
            decided.verdict = self._settle(s, decided, block, warn, None)
            return s, decided

        return self._commit(step, decide, None)

    def _said(self, words: str) -> int:
        return self.fingerprints.hash64("user", words)

    @_measured("user")
    def record_user(self, event: User | Mapping[str, Any]) -> Verdict:
        """A user turn with new information: loop streaks start over, loop halts are lifted. A
        bare nudge ("continue"), an auto-reply, or a turn the user already sent adds nothing:
        the streaks go on."""
        step = self._begin(event, User)
        p = step.p
        if p.cfg.mode == "off":
            return ALLOW
        text = step.ev.text
        references = p.claims.references_in(text)
        said = p.user_turn(text)
        said_hash = None if said is None else self._said(said)

        def decide(s: SessionState) -> tuple[SessionState, _Decided]:
            s.ledger.observe(references)  # the user's own references may be quoted back
            # a nudge or an auto-reply (None), or what the user already said, restarts nothing
            decided = _Decided(ALLOW)
            if said_hash is not None and said_hash not in s.loops.said:
                s.reset_streaks()
                if s.halted is not None and s.halted[0] in H.LOOPS:  # budget halts stay
                    s.halted = None
                    # the user is a human too: what they said resumes the escalation of a loop
                    decided.resumed, s.escalation = s.escalation, None
                put_bounded(s.loops.said, said_hash, None, MAX_SAID)
            return s, decided

        return self._commit(step, decide, None)

    @_measured("final")
    def verify_final(self, event: Final | Mapping[str, Any]) -> Verdict:
        """Check a final answer before it reaches the user: every reference it cites must come
        from a tool result of this session, every completed action it claims needs a receipt."""
        step = self._begin(event, Final)
        cfg = step.p.cfg
        if cfg.mode_of(H.UNVERIFIED_CLAIM) == "off":
            return ALLOW

        def decide(s: SessionState) -> tuple[SessionState | None, _Decided]:
            # a frozen session's answers are still checked (an honest one may reach the user); a
            # rejected one escalates nothing more (_settle: the session has its escalation)
            decided = _Decided(ALLOW)
            block, warn = judge(cfg, [step.p.claims.check(step.ev.text, s.ledger)])
            decided.verdict = self._settle(s, decided, block, warn, None)
            # reading an answer changes no state, unless it froze the session for a human
            return (s if decided.escalating else None), decided

        return self._commit(step, decide, None)

    # ----------------------------------------------------------------- for downstream systems
    def verify_receipt(
        self,
        receipt: Mapping[str, Any],
        *,
        session: str,
        call_id: str,
        tool: str,
        result: Any,
        tenant: str | None = None,
        feature: str | None = None,
        agent: str | None = None,
    ) -> tuple[bool, str]:
        """Does this receipt vouch for this (tenant, session, call, tool, result)? Forged,
        tampered, cross-tenant, cross-session and replayed receipts fail. Pass the tenant /
        feature / agent of the session when overrides change how results are canonicalized."""
        if self.receipt_keys is None:
            return False, "no receipt keys configured"
        result_hash = self.fingerprints.hash64(self._result_canonical(self._policy(tenant, feature, agent), result))
        return verify(
            self.receipt_keys,
            receipt,
            tenant=tenant,
            session=session,
            call_id=call_id,
            tool=normalize_name(tool),
            result_hash=result_hash,
        )

    def step_cost_usd(self, ev: ToolCall | Assistant) -> float:
        """The model spend of one step: its cost_usd, or its tokens at the configured price."""
        cfg = self._policy(ev.tenant, ev.feature, ev.agent).cfg
        return budget.step_cost_usd(cfg, ev.input_tokens, ev.output_tokens, ev.cost_usd, ev.model)

    def process(self, event: Mapping[str, Any] | Any) -> Verdict | ResultVerdict:
        """Dispatch one event (a trace line or a typed event) to its handler."""
        ev = parse_event(dict(event)) if isinstance(event, Mapping) else event
        if isinstance(ev, ToolCall):
            return self.check_tool_call(ev)
        if isinstance(ev, ToolResult):
            return self.record_tool_result(ev)
        if isinstance(ev, Assistant):
            return self.record_assistant(ev)
        if isinstance(ev, User):
            return self.record_user(ev)
        if isinstance(ev, Final):
            return self.verify_final(ev)
        raise InvalidEventError(f"not an agent event: {type(ev).__name__}")

    # ----------------------------------------------------------------- operators
    def breaker_key(self, tool: str, *, tenant: str | None = None) -> str:
        """The store key of a tool's shared breaker (per tenant when `breaker.key_by_tenant`)."""
        return self._breaker_key(self._policy(tenant, None, None).cfg, tenant, normalize_name(tool))

    def breaker_state(self, tool: str, *, tenant: str | None = None) -> BreakerStateName:
        st = self.store.breaker_state(self.breaker_key(tool, tenant=tenant))
        return BreakerStateName.CLOSED if st is None else st.state

    def force_breaker(self, tool: str, state: BreakerStateName | str, *, tenant: str | None = None) -> None:
        """Operator control: force open, disable, metrics-only, or reset a tool's breaker (an
        incident, `breaker_forced`, when it changes the state)."""
        cfg = self._policy(tenant, None, None).cfg
        dst = BreakerStateName(state)
        moved = self.store.breaker_force(self.breaker_key(tool, tenant=tenant), cfg.breaker, self.clock.now(), dst)
        span = None if self.tracer is None or moved is None else self.tracer.start_span("agent_breaker.breaker_force")
        token = _DECISION_SPAN.set(span)
        try:
            self._breaker_moved(moved, normalize_name(tool), tenant, cfg, dst)
        finally:
            _DECISION_SPAN.reset(token)
            if span is not None:
                span.end()

    def breakers(self) -> list[tuple[str | None, str, BreakerState]]:
        """Every shared tool breaker in the store (all the fleet's, on Redis) as (tenant, tool,
        state), sorted; copies of the states. Tenant None: calls without one, or a breaker every
        tenant shares (`breaker.key_by_tenant: false`)."""
        listed = [(*breaker_key_parts(key), st) for key, st in self.store.breaker_list()]
        return sorted(listed, key=lambda row: (row[0] or "", row[1]))

    # ----------------------------------------------------------------- incidents and metrics
    def _emit(self, s: SessionState, ev: Any, trip: Trip, severity: str, now: float, tool: str | None) -> None:
        with self._lock:
            self._metrics[(trip.heuristic, severity)] += 1
        if not self.listeners:
            return
        incident = Incident(
            ts=now,
            session=s.sid,
            tenant=s.tenant,
            feature=s.feature,
            agent=ev.agent or s.agent,
            heuristic=trip.heuristic,
            severity=severity,  # type: ignore[arg-type]
            scope=trip.scope,
            tool=tool,
            reason=trip.reason,
            counters=dict(trip.counters),
            tokens_so_far=s.spend.tokens,
            cost_usd_so_far=s.spend.cost_usd,
            advisory=trip.advisory,
        )
        self._tell(incident)

    def _breaker_moved(
        self, t: Transition | None, tool: str | None, tenant: str | None, cfg: AgentBreakerConfig, state: BreakerStateName
    ) -> None:
        """A breaker was found in `state`, maybe after transition `t`: the gauge, and for a
        move the transitions counter and a breaker incident to the listeners."""
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
            tenant=tenant if cfg.breaker.key_by_tenant or not self.share_breakers else None,
            src=t.src.value,
            dst=t.dst.value,
            reason=t.reason,
            forced=t.reason == breaker_core.OPERATOR,
            counters=counters,
        )
        self._tell(incident)

    def _tell(self, incident: Incident | BreakerIncident) -> None:
        span = _DECISION_SPAN.get()
        if span is not None:
            try:
                span.add_event(f"agent_breaker.{incident.kind}", _span_event(incident))
            except Exception:  # tracing never breaks a decision
                log.exception("agent-breaker: span event of an incident failed")
        for listener in self.listeners:
            try:
                listener(incident)
            except Exception:  # a failing listener never breaks a decision
                log.exception("agent-breaker incident listener %r failed", listener)

    def metrics(self) -> dict[str, int]:
        """Trips so far, as {"heuristic:severity": count}."""
        with self._lock:
            return {f"{h}:{sev}": n for (h, sev), n in sorted(self._metrics.items())}


def breaker_key_parts(key: str) -> tuple[str | None, str]:
    """(tenant, tool) of a breaker key (`[tenant:]tool`, each part escaped); tenant None for
    calls without one, or a breaker every tenant shares."""
    *tenant, tool = split_key(key)
    return (tenant[0] or None if tenant else None), tool


def _span_event(incident: Incident | BreakerIncident) -> dict[str, Any]:
    """An incident as span event attributes: its names and numbers (no reason text: it may
    name a tool, which the span's attributes hold already)."""
    d = incident.to_dict()
    counters = d.pop("counters")
    d.pop("reason")
    return attributes("agent_breaker", {k: v for k, v in d.items() if v is not None}) | attributes(
        "agent_breaker.counters", counters
    )


#: what _commit answers when a human lifted the freeze the decision found: decide again
_THAWED: Any = object()
#: how many lifted freezes one call goes through before it is refused (each needs a resume)
MAX_THAWS = 3


def _freeze(s: SessionState, escalation_id: str) -> SessionState:
    s.escalation = escalation_id
    return s


def _frozen_verdict(s: SessionState, tool: str | None) -> Verdict:
    handed = f"handed to a human ({s.escalation}); every call waits for their decision"
    if s.halted is not None:
        heuristic, reason = s.halted[0], f"session halted earlier: {s.halted[1]}; {handed}"
    else:
        heuristic, reason = H.ESCALATED, f"session {handed}"
    trip = Trip(heuristic, "session", reason, "Stop and tell the user a person is looking into it.")
    return replace(verdict_for(trip, "block", tool), route={"tier": "escalate", "escalation_id": s.escalation})


def _evidence(fingerprints: Fingerprinter, step: _Step, trip: Trip) -> dict[str, Any]:
    """An escalation's counters: the trip's numbers, and the engine's keyed hash of the call
    or the answer that tripped (what a human matches against the logs, not the payload)."""
    counters: dict[str, Any] = {k: v for k, v in trip.counters.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    ev = step.ev
    if isinstance(ev, ToolCall):  # its arguments were canonicalized once already: they can be again
        counters["call_hash"] = f"{fingerprints.hash64(ev.tool, step.p.canon.canonical(ev.args)):016x}"
    elif isinstance(ev, Final):
        counters["answer_hash"] = f"{fingerprints.hash64(normalize_text(ev.text)):016x}"
    return counters


def _excerpts(step: _Step) -> tuple[str, ...]:
    """What the tenant opted in to keep of the payload: the event's arguments or text, cut."""
    limit = step.p.cfg.escalations.max_excerpt_chars
    ev = step.ev
    text = getattr(ev, "text", None)
    if text is None:
        args = getattr(ev, "args", None)
        text = None if args is None else json.dumps(args, sort_keys=True, default=str)
    return () if not text else (text[:limit],)


#: refusals that say the tool itself is down: a tool's fallback serves these
_TOOL_DOWN = frozenset({H.CIRCUIT_OPEN, H.CIRCUIT_HALF_OPEN})


def _routed(verdict: Verdict, route: dict[str, Any], instruction: str) -> Verdict:
    """A refusal with the fallback taken: the route for the caller, and the observation that
    tells the agent (for the static tier, the answer itself)."""
    observation = {**(verdict.observation or {}), "actionable_instruction": instruction, "fallback": route["tier"]}
    if route["tier"] == "static":
        observation["answer"] = route["answer"]
    return replace(verdict, route=route, observation=observation)


def schema_violation(tool: str, what: str, problem: str) -> Trip:
    """Arguments (before the call) or a result (after it) that break the tool's schema: the
    observation names the field and what is wrong, so the agent can fix the call."""
    fix = (
        f"Fix the arguments and call {tool} again: {problem}."
        if what == "arguments"
        else f"{tool} returned a result that does not meet its schema: do not rely on it; try again or use another tool."
    )
    return Trip(H.SCHEMA_VIOLATION, "call", f"{tool} {what}: {problem}", fix, {"part": what})


def _halted_verdict(s: SessionState, cfg: AgentBreakerConfig, tool: str | None) -> Verdict | None:
    if s.halted is None:
        return None
    heuristic, reason = s.halted
    if cfg.mode_of(heuristic) != "enforce":
        return None
    return verdict_for(
        Trip(heuristic, "session", f"session halted earlier: {reason}", "Write your final answer now."), "block", tool
    )


def _breaker_trip(permission: Permission, tool: str) -> Trip | None:
    if permission.allowed and not permission.would_refuse:
        return None
    state = permission.state.value
    if permission.state is BreakerStateName.HALF_OPEN:
        heuristic, reason = H.CIRCUIT_HALF_OPEN, f"{tool} is recovering: its probe calls are in flight"
        instruction = f"Wait for {tool} to recover, or use another tool."
    else:
        heuristic, reason = H.CIRCUIT_OPEN, f"{tool} is failing for every session; its circuit breaker is {state}"
        instruction = f"Do not call {tool} now. Use another tool, or tell the user the service is unavailable."
    return Trip(heuristic, "tool", reason, instruction, {"state": state}, permission.retry_after_s)


def _view_key_of(tenant: str | None, tool_key: int) -> str:
    """The key of a tool view (session_churn). It starts with a control character, which no
    session id may hold, so it never names a real session."""
    return f"\x1eview{TENANT_SEPARATOR}{tenant or ''}{TENANT_SEPARATOR}{tool_key:016x}"


def _json_text(value: Any) -> str:
    return "" if value is None else orjson.dumps(value).decode() if type(value) is str else str(value)


def _leaves(args: Any) -> list[str]:
    """The non-empty strings and the integers of a call's arguments, as text (what a result
    may echo back)."""
    out: list[str] = []
    stack = [args]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if v:
                out.append(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, int) and not isinstance(v, bool):
            out.append(str(v))
    return out


def _value_hash(fp: Fingerprinter, normalized: str) -> int:
    """An argument's or a result's value as they are compared (an echo, what stays while salts
    churn): a keyed 32-bit hash of its normalized text (`_normalized`: case and spacing aside)."""
    return fp.labeled(ECHO, normalized) & 0xFFFF_FFFF


def _normalized(value: str) -> str:
    return normalize_text(collapse_whitespace(value))


def _values(fp: Fingerprinter, leaves: list[str]) -> tuple[tuple[int, ...], set[int]]:
    """A call's argument values as kept: the hashes of at most MAX_VALUES of them, the smallest
    (keyed: no caller can choose which are kept by adding values), and their normalized lengths."""
    normalized = map(_normalized, leaves[:MAX_LEAVES])
    hashed = sorted((_value_hash(fp, v), len(v)) for v in normalized)[:MAX_VALUES]
    return tuple(h for h, _ in hashed), {n for _, n in hashed}


def _echo_masked(fp: Fingerprinter, p: Policy, timed: str, result: Any, f: CallFacts) -> str:
    """A result's canonical text with the fields that only give back one of the call's argument
    values masked (at the top, or one level down: {"meta": {"query": "x"}}), when the rest of it
    says nothing (an empty list, zeros, timings): the answer of a search for "x" that says
    {"query": "x", "hits": []} is the answer for "y" too. Beside a record ({"order_id": 7,
    "status": "shipped"}, {"sku": 4, "in_stock": 0}) the echo names what the answer is about, and
    stays. Only a value as long as an argument's is hashed; at most MAX_ECHOED fields are looked at."""
    if not f.values or type(result) is not dict or len(result) > MAX_ECHOED:
        return timed
    echoed: dict[str, Any] = {}
    rest: list[Any] = []
    for k, v in result.items():
        if type(k) is not str:
            return timed
        if type(v) is dict and len(v) > MAX_ECHOED:
            rest.append(v)
        elif type(v) is dict:
            inner = [(ik, iv) for ik, iv in v.items() if _echoes(fp, iv, f)]
            echoed.update(inner)
            rest.extend(iv for ik, iv in v.items() if (ik, iv) not in inner and not (type(ik) is str and p.quiet_key(ik)))
        elif _echoes(fp, v, f):
            echoed[k] = v
        elif not p.quiet_key(k):
            rest.append(v)
    if not echoed or len(result) > MAX_ECHOED or not rest or not all(map(says_nothing, rest)):
        return timed
    if not any(type(v) in (list, dict) and not v for v in rest):
        return timed  # only zeros and blanks: a record's fields, not an empty answer
    for k, v in echoed.items():
        field = orjson.dumps({k: collapse_whitespace(v) if type(v) is str else v}).decode()[1:-1]
        timed = timed.replace(field, field[: field.index('":') + 2] + '"~"')
    return timed


def _echoes(fp: Fingerprinter, value: Any, f: CallFacts) -> bool:
    """Does a result's value give back one of the call's argument values (case and spacing aside)."""
    t = type(value)
    if t is int:
        text = str(value)
    elif t is str and len(value) <= MAX_ECHO_CHARS:
        text = _normalized(value)
    else:
        return False
    return len(text) in f.sizes and _value_hash(fp, text) in f.values


#: a call's argument values hashed, and a result's fields looked at for echoes (bounds per event)
MAX_LEAVES = 256
MAX_ECHOED = 32
MAX_ECHO_CHARS = 1024  # a longer result value is content, not an echo
#: how much of a failure's error and payload its shape is read from
MAX_ERROR_CHARS = 4096


def _forget_lost(s: SessionState, before: float) -> bool:
    """Forget the calls let through before `before` that never answered (taken as lost);
    True if any was."""
    lost = [cid for cid, p in s.loops.pending.items() if p.ts < before]
    for cid in lost:
        del s.loops.pending[cid]
    return bool(lost)


def _pop_pending(s: SessionState, ev: ToolResult) -> Pending | None:
    if ev.call_id is not None:
        pending = s.loops.pending.get(ev.call_id)
        if pending is None or pending.facts.tool != ev.tool:
            return None  # unknown, or a result of another tool: not ours
        del s.loops.pending[ev.call_id]
        return pending
    # no call_id: the oldest call of this tool that had none
    for cid, pending in s.loops.pending.items():
        if cid.startswith(UNNAMED_CALL) and pending.facts.tool == ev.tool:
            del s.loops.pending[cid]
            return pending
    return None


def fingerprinter_for(config: AgentBreakerConfig, *, shared: bool, receipt_keys: ReceiptKeys | None = None) -> Fingerprinter:
    """The deployment's fingerprint key: `fingerprint_secret`, else $AGENT_BREAKER_FINGERPRINT_SECRET,
    else one derived from the oldest receipt key, the one listed last (a fleet shares those
    already; a new signing key goes in front, so a rotation does not change it), else (state in
    this process only) a random key. A shared store needs one key for the whole fleet, or
    workers' fingerprints would not compare: without any of these it is refused."""
    secret = config.fingerprint_secret or os.environ.get(FINGERPRINT_SECRET_ENV, "")
    if secret:
        return Fingerprinter(secret.encode("utf-8"))
    if receipt_keys is not None:
        oldest = list(receipt_keys.keys.values())[-1]
        return Fingerprinter(hmac.new(oldest, _FINGERPRINT_LABEL, hashlib.sha256).digest())
    if shared:
        raise ConfigError(
            f"shared storage needs one fingerprint secret for the whole fleet: set ${FINGERPRINT_SECRET_ENV} (e.g. to the "
            "output of `python3 -c 'import secrets; print(secrets.token_hex(32))'`), fingerprint_secret, or receipt keys"
        )
    return Fingerprinter.ephemeral()


#: separates the fingerprint key derived from a receipt key from the receipt key's own use
_FINGERPRINT_LABEL = b"agent-breaker fingerprint key v1"


def _store_for(config: AgentBreakerConfig) -> Store:
    st = config.storage
    return store_from_uri(
        st.resolved_url(),
        ttl_s=config.sessions.ttl_s,
        max_sessions=config.sessions.max_sessions,
        max_bytes=config.sessions.max_bytes,
        max_sessions_per_tenant=config.sessions.max_sessions_per_tenant,
        prefix=st.key_prefix,
        timeout_s=st.timeout_ms / 1000.0,
        on_error="local" if st.on_error == "local" else "raise",
        retry_s=st.retry_s,
        near_cache_s=st.near_cache_s,
    )
