"""The guard engine: one decision per agent event.

`Engine` is the single code path behind `agent-breaker replay`, the NeMo actions and direct
Python use. A decision reads what it needs first (`_facts`: the event reduced to hashes and
numbers; the policy in force, the shared breaker's permission, the global spend window, the
tool view), then decides purely on the session's state in one store update (`_decide`, which a
shared store may run again on a compare-and-set conflict, so it touches nothing else), then
applies what the decision asked for outside the session (a breaker outcome, a released probe,
the tool views, an escalation) and tells the listeners (`_instrument`). Policy resolution lives
in `_policy.py`, result classification in `_outcomes.py`, the storage-failure policy in
`_storage_failure.py`.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, Literal, TypeVar, cast

from .. import heuristics as H
from .._canonical import Fingerprinter
from .._outcomes import FailurePredicate, classify
from .._policy import CONFIRMATION, Policies, Policy
from .._sinks import sinks_for
from .._state import CallFacts, SessionState
from .._storage_failure import storage_unavailable
from .._text import normalize_name, normalize_text
from .._tracing import configured_tracer
from ..breaker import BreakerState, BreakerStateName, Transition
from ..breaker.states import MANUAL_STATES
from ..clock import Clock, SystemClock
from ..config import FINGERPRINT_SECRET_ENV, AgentBreakerConfig, ConfigError, parse_config
from ..detectors import failures
from ..escalations import EscalationStore
from ..events import Assistant, Final, InvalidEventError, ToolCall, ToolResult, User, parse_event, parse_typed
from ..governor import budget
from ..metrics import Metrics
from ..metrics import shared as shared_metrics
from ..receipts import ReceiptKeys, verify
from ..store import MemoryStore, StorageError, Store, store_from_uri
from ..store.base import key_parts, split_key
from ..verdicts import ALLOW, ResultVerdict, Trip, Verdict, verdict_for
from . import _fallback
from ._decide import (
    CallInput,
    Decided,
    ResultInput,
    TurnInput,
    decide_assistant,
    decide_final,
    decide_model_call,
    decide_tool_call,
    decide_tool_result,
    decide_user,
    schema_violation,
)
from ._escalation import Escalations
from ._facts import TENANT_SEPARATOR, TOOL, AnyEvent, E, Step, call_facts, result_canonical, result_facts
from ._instrument import DECISION_SPAN, Listener, Reporter, log_incident, measured, per_tenant
from ._views import Shapes, ToolViews

log = logging.getLogger("agent_breaker")

V = TypeVar("V", Verdict, ResultVerdict)
#: how many lifted freezes one call goes through before it is refused (each needs a resume)
MAX_THAWS = 3


class _Thawed(Exception):
    """A human lifted the freeze the decision found: decide again."""


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
        told = [log_incident] if listeners is None else list(listeners)
        if sinks:
            told += sinks_for(self.config.incidents, self.telemetry)
        self.reporter = Reporter(self.telemetry, told)
        self.share_breakers = share_breakers
        self.observe = observe
        self.failure_predicates: dict[str, FailurePredicate] = {
            normalize_name(tool): fn for tool, fn in (failure_predicates or {}).items()
        }
        self.receipt_keys = receipt_keys or receipt_keys_for(self.config, observe=observe)
        self.fingerprints = fingerprinter or fingerprinter_for(
            self.config, shared=not isinstance(self.store, MemoryStore), receipt_keys=self.receipt_keys
        )
        self.policies = Policies(self.config, self.fingerprints, observe=observe)
        self.escalations = Escalations(self.config, self.store, self.fingerprints, escalations)
        self.views = ToolViews(self.store, self.fingerprints)
        self._shapes = Shapes()
        self._confirmation = self._said(CONFIRMATION)

    @property
    def listeners(self) -> list[Listener]:
        """Who is told of each incident (append to add one)."""
        return self.reporter.listeners

    # ----------------------------------------------------------------- reading an event
    def _policy(self, tenant: str | None, feature: str | None, agent: str | None) -> Policy:
        return self.policies.get(tenant, feature, agent)

    def session_key(self, ev: AnyEvent) -> str:
        """The key of an event's session: its id within its tenant, so tenants cannot reach
        each other's sessions whatever ids they choose."""
        if ev.session is not None:
            sid = ev.session
        elif ev.conversation is not None:
            sid = f"conv:{self.fingerprints.hash64(ev.conversation):016x}"
        else:
            raise InvalidEventError.of([("session", "an event needs a session id, or a conversation to fingerprint")])
        return sid if ev.tenant is None else f"{ev.tenant}{TENANT_SEPARATOR}{sid}"

    def _begin(self, event: E | Mapping[str, Any], cls: type[E]) -> Step[E]:
        ev: E = event if isinstance(event, cls) else parse_typed(cls, event)  # type: ignore[arg-type]  # validated there
        now = ev.ts if self.trust_event_time and ev.ts is not None else self.clock.now()
        return Step(ev, self.session_key(ev), now, self._policy(ev.tenant, ev.feature, ev.agent))

    def _facts(self, ev: ToolCall, p: Policy) -> CallFacts:
        return call_facts(self.fingerprints, ev, p)

    def _result_canonical(self, p: Policy, result: Any) -> str:
        return result_canonical(p, result)

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
        self, step: Step[Any], decide: Callable[[SessionState], tuple[SessionState | None, Decided[V]]], tool: str | None
    ) -> V:
        """Run the decider in one store update, then do what it asked for outside the session,
        then tell the listeners. A shared store may run `decide` more than once."""
        outcome: list[tuple[SessionState, Decided[V]]] = []

        def update(state: object | None) -> tuple[SessionState | None, None]:
            s = step.session(state)
            new_state, decided = decide(s)
            outcome[:] = [(s, decided)]
            return new_state, None

        try:
            self.store.update_session(step.key, step.now, update)
        except StorageError as exc:
            return cast(V, self._unavailable(step, exc, tool))  # a result's verdict for a result
        s, decided = outcome[0]
        if decided.frozen is not None and self.escalations.thawed(step, decided.frozen):
            raise _Thawed
        if decided.resumed is not None:
            self.escalations.resumed_by_user(step, decided.resumed)
        cfg = step.p.cfg
        if decided.breaker is not None:
            bkey, probe, out = decided.breaker
            if out.breaker_ignores:
                if probe is not None:  # the probe proved nothing: its slot is free for another
                    self._release_probe(bkey, cfg, probe)
            else:
                try:
                    recorded = self.store.breaker_record(
                        bkey,
                        cfg.breaker,
                        step.now,
                        failed=out.dependency,
                        slow=out.slow,
                        probe=probe,
                        session=format(self.views.member(step.key), "x"),
                    )
                except StorageError as exc:
                    log.warning("agent-breaker: breaker outcome of %s not recorded: %s", tool, exc)
                else:
                    if isinstance(decided.verdict, ResultVerdict):  # only a result's outcome is recorded
                        decided.verdict = replace(decided.verdict, breaker_state=recorded.state.value)
                    self._breaker_moved(recorded.transition, tool, step.ev.tenant, cfg, recorded.state)
        for vkey, change in decided.views:
            self.views.update(vkey, step.now, change, step.key)
        if decided.family is not None:
            self._update_family(step, decided.family)
        if decided.mixed:
            self.views.remember_mixed(step.key)
        for trip, severity in decided.trips:
            self.reporter.tripped(s, step.ev, trip, severity, step.now, tool)
        if decided.escalating is not None:
            trip, frozen_as = decided.escalating
            escalation = self.escalations.escalate(step, s, trip, tool, frozen_as) or frozen_as
            if isinstance(decided.verdict, Verdict):  # a result's verdict has no route: results never escalate
                decided.verdict = replace(decided.verdict, route={"tier": "escalate", "escalation_id": escalation})
        for t in decided.transitions:
            self._breaker_moved(t, tool, step.ev.tenant, cfg, t.dst)
        return decided.verdict

    def _commit_thawing(
        self, step: Step[Any], decide: Callable[[SessionState], tuple[SessionState | None, Decided[Verdict]]], tool: str | None
    ) -> Verdict:
        """`_commit`, decided again when a human lifted the freeze the decision found (a few
        times at most: each lift needs a resume)."""
        for _ in range(1 + MAX_THAWS):
            try:
                return self._commit(step, decide, tool)
            except _Thawed:
                continue  # a human resumed the session: decide again
        trip = Trip(H.ESCALATED, "session", "the session's escalations keep changing", "Stop and try again later.")
        return verdict_for(trip, "block", tool)

    def _family(self, step: Step[Any]) -> str | None:
        """The key of the session whose failing streaks a sub-agent's call shares (its parent's)."""
        parent = getattr(step.ev, "parent_session", None)
        if parent is None or parent == step.ev.session:
            return None
        return self.session_key(step.ev.model_copy(update={"session": parent}))

    def _peek(self, key: str) -> SessionState | None:
        try:
            state = self.store.peek_session(key)
        except StorageError:
            return None
        return state if isinstance(state, SessionState) else None

    def _update_family(self, step: Step[Any], change: Callable[[SessionState], None]) -> None:
        """Record a sub-agent's result in its family's streaks; a storage failure only costs that."""
        key = self._family(step)
        assert key is not None

        def update(state: object | None) -> tuple[SessionState | None, None]:
            parent = state if isinstance(state, SessionState) else SessionState(key, tenant=step.ev.tenant, created_s=step.now)
            change(parent)
            return parent, None

        try:
            self.store.update_session(key, step.now, update)
        except StorageError as exc:
            log.warning("agent-breaker: a sub-agent's result not recorded for its family: %s", exc)

    def _unavailable(self, step: Step[Any], exc: StorageError, tool: str | None) -> Verdict | ResultVerdict:
        verdict, severity = storage_unavailable(
            exc, self.config.storage, enforcing=step.p.cfg.mode == "enforce", result=isinstance(step.ev, ToolResult), tool=tool
        )
        self.reporter.count(verdict.heuristic or H.STORAGE_UNAVAILABLE, severity)
        self.telemetry.storage_failed(severity)
        return verdict

    def _global_spend(self, step: Step[ToolCall] | Step[Assistant], tokens: int, cost_usd: float) -> Trip | Verdict | None:
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
                return cast(Verdict, self._unavailable(step, exc, getattr(step.ev, "tool", None)))  # not a result
            trip = trip or budget.check_global_budget(spent, max_tokens, max_cost, window_s, step.now, whose)
        return trip

    # ----------------------------------------------------------------- the decisions
    @measured("tool_call")
    def check_tool_call(self, event: ToolCall | Mapping[str, Any]) -> Verdict:
        """Decide, before it runs, whether a tool call may run."""
        step = self._begin(event, ToolCall)
        ev, now, p = step.ev, step.now, step.p
        cfg = p.cfg
        if cfg.mode == "off":
            return ALLOW
        f = self._facts(ev, p)
        problem = p.schema_problem(f.tool, ev.args)
        self.telemetry.spent(ev.tenant, ev.feature, f.tokens, f.cost_usd)
        global_trip = self._global_spend(step, f.tokens, f.cost_usd)
        if isinstance(global_trip, Verdict):
            return global_trip
        churn_on = p.mode(H.SESSION_CHURN) != "off"
        tool_key = self.fingerprints.labeled(TOOL, f.tool)
        view = self.views.read(ev.tenant, tool_key) if churn_on and not self.views.is_mixed(step.key) else None
        # a tenant's sessions are one party's: its actions are followed across them (sessions that
        # name no tenant may be anyone's)
        effects_on = ev.tenant is not None and p.mode(H.DUPLICATE_MUTATION) != "off"
        effects = self.views.read_effects(ev.tenant) if effects_on and f.effect is not None else None
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
                return cast(Verdict, self._unavailable(step, exc, f.tool))  # not a result
        family = self._family(step)
        family_trip = None
        if family is not None and p.mode(H.IDENTICAL_FAILURE) != "off":
            family_trip = failures.check_family(self._peek(family), f, cfg)
        x = CallInput(
            call_id=ev.call_id,
            f=f,
            p=p,
            now=now,
            tenant=ev.tenant,
            polling_tool=p.polling(ev.tool),
            global_trip=global_trip,
            family_trip=family_trip,
            schema_trip=None if problem is None else schema_violation(f.tool, "arguments", problem),
            view=view,
            effects=effects,
            member=self.views.member(step.key),
            tool_key=tool_key,
            bkey=bkey,
            breaker_on=breaker_on,
            churn_on=churn_on,
            effects_on=effects_on,
            share_breakers=self.share_breakers,
            permission=permission,
            confirmation=self._confirmation,
            escalates=self.escalations.enabled,
        )
        if permission is not None:
            self._breaker_moved(permission.transition, f.tool, ev.tenant, cfg, permission.state)
        verdict = self._commit_thawing(step, lambda s: decide_tool_call(s, x), f.tool)
        if permission is not None and permission.probe is not None and not verdict.allowed:
            self._release_probe(bkey, cfg, permission.probe)
        if not verdict.allowed and verdict.heuristic in _fallback.TOOL_DOWN:
            verdict = _fallback.fallback(
                step,
                f.tool,
                verdict,
                serving=lambda tool: self._serving(step, tool),
                escalate=lambda trip: self.escalations.escalate(step, None, trip, f.tool),
            )
        return verdict

    @measured("model_call")
    def check_model_call(self, event: Assistant | Mapping[str, Any]) -> Verdict:
        """Decide, before a model call is paid for, whether the session may make it (what a model
        gateway asks before each completion). Refused when the session is frozen for a human,
        halted, or when the step the call would produce is over a session ceiling (steps,
        tokens, cost, token velocity). The event names the session with an assistant event's
        fields; its text and spend are not read. Nothing is counted, written or reported: the
        call's spend counts when its tool calls or its turn arrive, and they trip as usual."""
        step = self._begin(event, Assistant)
        if step.p.cfg.mode == "off":
            return ALLOW
        return self._commit_thawing(step, lambda s: decide_model_call(s, step.p, step.now), None)

    @measured("tool_result")
    def record_tool_result(self, event: ToolResult | Mapping[str, Any]) -> ResultVerdict:
        """Record what a tool returned (after it ran); mint a receipt for a mutating tool's success."""
        step = self._begin(event, ToolResult)
        ev, p = step.ev, step.p
        if p.cfg.mode == "off":
            return ResultVerdict(True)
        out = classify(ev, p.cfg, p.in_progress, self.failure_predicates.get(ev.tool))
        result_trips = self._shapes.trips(p, ev, out)
        if result_trips and p.mode(H.SCHEMA_VIOLATION) == "enforce":
            # a result that breaks its schema is a failed call, the call's own: it feeds the
            # loop detectors, mints no receipt, and proves nothing to a half-open breaker
            out = replace(out, failed=True, dependency=False, retry_after_s=None)
        x = ResultInput(
            ev=ev,
            p=p,
            now=step.now,
            out=out,
            r=result_facts(self.fingerprints, ev, p, out),
            result_trips=result_trips,
            polling=p.polling(ev.tool),
            churn_on=p.mode(H.SESSION_CHURN) != "off",
            effects_on=ev.tenant is not None and p.mode(H.DUPLICATE_MUTATION) != "off",
            share_breakers=self.share_breakers,
            fp=self.fingerprints,
            receipt_keys=self.receipt_keys,
            escalates=self.escalations.enabled,
        )
        return self._commit(step, lambda s: decide_tool_result(s, x), ev.tool)

    @measured("assistant")
    def record_assistant(self, event: Assistant | Mapping[str, Any]) -> Verdict:
        """An assistant turn with text and no tool call: spend, echo and deadlock checks."""
        step = self._begin(event, Assistant)
        ev, p = step.ev, step.p
        if p.cfg.mode == "off":
            return ALLOW
        tokens = ev.input_tokens + ev.output_tokens
        cost = budget.step_cost_usd(p.cfg, ev.input_tokens, ev.output_tokens, ev.cost_usd, ev.model)
        fph = self.fingerprints
        global_trip = self._global_spend(step, tokens, cost)
        if isinstance(global_trip, Verdict):
            return global_trip
        x = TurnInput(
            p=p,
            now=step.now,
            tokens=tokens,
            cost_usd=cost,
            fingerprint=tuple(sorted(fph.tokens(normalize_text(ev.text)))),
            agent=fph.hash64(ev.agent or "") & 0xFFFF_FFFF,
            global_trip=global_trip,
            escalates=self.escalations.enabled,
        )
        return self._commit(step, lambda s: decide_assistant(s, x), None)

    def _said(self, words: str) -> int:
        return self.fingerprints.hash64("user", words)

    @measured("user")
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
        return self._commit(step, lambda s: decide_user(s, references, said_hash), None)

    @measured("final")
    def verify_final(self, event: Final | Mapping[str, Any]) -> Verdict:
        """Check a final answer before it reaches the user: every reference it cites must come
        from a tool result of this session, every completed action it claims needs a receipt."""
        step = self._begin(event, Final)
        if step.p.cfg.mode_of(H.UNVERIFIED_CLAIM) == "off":
            return ALLOW
        escalates = self.escalations.enabled
        return self._commit(step, lambda s: decide_final(s, step.p, step.ev.text, escalates), None)

    def process(self, event: Mapping[str, Any] | AnyEvent) -> Verdict | ResultVerdict:
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

    # ----------------------------------------------------------------- around a decision
    def awaiting_results(self, session: str, *, tenant: str | None = None) -> dict[str, str]:
        """call id -> tool of the session's calls that were allowed and await their result (a
        caller that gets results without their tool's name pairs them by call id). A call made
        without an id is under a key of the engine's, which starts with UNNAMED_CALL."""
        step = self._begin({"session": session, "tenant": tenant}, User)
        state = self.store.peek_session(step.key)
        if not isinstance(state, SessionState):
            return {}
        return {cid: p.facts.tool for cid, p in state.loops.pending.items()}

    def escalation_store(self) -> EscalationStore | None:
        """The escalation store (the config's: its SQLite file, or its Redis for a fleet;
        opened on first use), or None."""
        return self.escalations.store()

    def _serving(self, step: Step[Any], tool: str) -> bool:
        """Would this tool's breaker let a call through now (read only: the alternative's own
        call goes through its breaker when the caller runs it)."""
        if not self.share_breakers or step.p.mode(H.CIRCUIT_OPEN) == "off":
            return True
        try:
            st = self.store.breaker_state(self._breaker_key(step.p.cfg, step.ev.tenant, tool))
        except StorageError:
            return False
        return _fallback.serving(st, step.now)

    def _release_probe(self, bkey: str, cfg: AgentBreakerConfig, probe: int) -> None:
        try:
            self.store.breaker_release(bkey, cfg.breaker, probe)
        except StorageError as exc:  # the slot frees itself after probe_timeout_s
            log.warning("agent-breaker: probe slot of %s not released: %s", bkey, exc)

    def _breaker_moved(
        self, t: Transition | None, tool: str | None, tenant: str | None, cfg: AgentBreakerConfig, state: BreakerStateName
    ) -> None:
        self.reporter.breaker_moved(t, tool, tenant, state, per_tenant=per_tenant(cfg, self.share_breakers))

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
        token = DECISION_SPAN.set(span)
        try:
            self._breaker_moved(moved, normalize_name(tool), tenant, cfg, dst)
        finally:
            DECISION_SPAN.reset(token)
            if span is not None:
                span.end()

    def breakers(self) -> list[tuple[str | None, str, BreakerState]]:
        """Every shared tool breaker in the store (all the fleet's, on Redis) as (tenant, tool,
        state), sorted; copies of the states. Tenant None: calls without one, or a breaker every
        tenant shares (`breaker.key_by_tenant: false`)."""
        listed = [(*breaker_key_parts(key), st) for key, st in self.store.breaker_list()]
        return sorted(listed, key=lambda row: (row[0] or "", row[1]))

    def metrics(self) -> dict[str, int]:
        """Trips so far, as {"heuristic:severity": count}."""
        return self.reporter.trips()


def breaker_key_parts(key: str) -> tuple[str | None, str]:
    """(tenant, tool) of a breaker key (`[tenant:]tool`, each part escaped); tenant None for
    calls without one, or a breaker every tenant shares."""
    *tenant, tool = split_key(key)
    return (tenant[0] or None if tenant else None), tool


def receipt_keys_for(config: AgentBreakerConfig, *, observe: bool = False) -> ReceiptKeys | None:
    """The config's receipt keys (None: none set, and none needed); a ConfigError naming the
    fix when it enforces `unverified_claim` and has none."""
    return ReceiptKeys.from_config(config.receipts, required=config.mode_of(H.UNVERIFIED_CLAIM) == "enforce" and not observe)


def preflight(config: AgentBreakerConfig) -> None:
    """Raise the ConfigError an `Engine(config)` would raise for what the environment lacks (a
    receipt key, a shared store's fingerprint key), without building one: no store, no sinks."""
    fingerprinter_for(config, shared=not config.storage.in_process, receipt_keys=receipt_keys_for(config))


def fingerprinter_for(config: AgentBreakerConfig, *, shared: bool, receipt_keys: ReceiptKeys | None = None) -> Fingerprinter:
    """The deployment's fingerprint key: `fingerprint_secret` (which the config loaders fill from
    $AGENT_BREAKER_FINGERPRINT_SECRET), else one derived from the oldest receipt key, the one listed last (a fleet shares those
    already; a new signing key goes in front, so a rotation does not change it), else (state in
    this process only) a random key. A shared store needs one key for the whole fleet, or
    workers' fingerprints would not compare: without any of these it is refused."""
    secret = config.fingerprint_secret
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
        st.url,
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
