"""The guard engine: one decision per agent event.

`Engine` is the single code path behind `agent-breaker replay`, the NeMo actions and direct
Python use. It validates the event, reduces it to hashes and numbers, and runs the pure
detectors and governor on the session's state inside one atomic store update.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import threading
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping

from . import heuristics as H
from ._canonical import CanonicalError, Canonicalizer, Fingerprinter
from ._text import normalize_text
from .breaker import BreakerStateName, Permission
from .breaker import core as breaker_core
from .clock import Clock, SystemClock
from .config import FINGERPRINT_SECRET_ENV, AgentBreakerConfig, ConfigError, parse_config
from .detectors import churn, conversation, loops
from .detectors.base import Trip
from .events import Assistant, Final, InvalidEventError, ToolCall, ToolResult, User, parse_event, parse_typed
from .governor import budget
from .receipts import ClaimChecker, ReceiptKeys, empty_mutation_trip, is_empty_result, mint, verify
from .session import FAILED, MAX_PENDING, MIXED, CallFacts, ChurnView, Pending, SessionState
from .store import MemoryStore, StorageError, Store, store_from_uri
from .store.base import key_parts
from .verdicts import ALLOW, Incident, ResultVerdict, Verdict, observation

log = logging.getLogger("agent_breaker")
incident_log = logging.getLogger("agent_breaker.incidents")

Listener = Callable[[Incident], None]
FailurePredicate = Callable[[Any], bool]

_FAILED_STATUS = frozenset({"error", "failed", "failure", "fail"})
_TRANSIENT = re.compile(
    r"\b(?:429|502|503|504)\b|time[ds]? ?out|temporar|unavailable|rate.?limit|too many requests|try again"
    r"|connection (?:reset|refused|aborted)|overloaded|throttl",
    re.IGNORECASE,
)
_NOT_DONE_FIELDS = ("done", "ready", "complete", "completed", "finished")
_NAME_TOKENS = re.compile(r"[a-z]+")
_RESULT_MAX_BYTES = 16 * 1024 * 1024
_RESULT_MAX_DEPTH = 64
#: joins tenant and session id in a session key: ids cannot hold control characters
TENANT_SEPARATOR = "\x1f"


def log_incident(incident: Incident) -> None:
    """The default listener: one JSON line per trip on the `agent_breaker.incidents` logger."""
    incident_log.warning(json.dumps(incident.to_dict(), sort_keys=True))


def is_semantic_failure(result: Any) -> bool:
    """A payload that says the call failed even though the transport said ok."""
    if not isinstance(result, dict):
        return False
    status = result.get("status")
    if isinstance(status, str) and status.lower() in _FAILED_STATUS:
        return True
    if result.get("error") not in (None, "", False, {}, []):
        return True
    return result.get("success") is False or result.get("ok") is False


class _Ctx:
    """What the checks of one decision read (built once per decision)."""

    __slots__ = ("s", "f", "cfg", "now", "polling", "similar")

    def __init__(
        self, s: SessionState, f: Any, cfg: AgentBreakerConfig, now: float, polling: bool, similar: tuple[bool, bool]
    ) -> None:
        self.s, self.f, self.cfg, self.now, self.polling, self.similar = s, f, cfg, now, polling, similar


Check = Callable[[_Ctx], "Trip | None"]

#: spend ceilings, checked on every step (tool calls and assistant turns), in this order
_SESSION_LIMITS: tuple[tuple[str, Check], ...] = (
    (H.STEP_LIMIT, lambda c: budget.check_step_limit(c.s, c.cfg)),
    (H.TOKEN_BUDGET, lambda c: budget.check_token_budget(c.s, c.cfg)),
    (H.COST_BUDGET, lambda c: budget.check_cost_budget(c.s, c.cfg)),
    (H.TOKEN_VELOCITY, lambda c: budget.check_velocity(c.s, c.cfg, c.now)),
)
#: the checks of a tool call, in this order; the breaker comes after them
_CALL_CHECKS: tuple[tuple[str, Check], ...] = _SESSION_LIMITS + (
    (H.DEPTH_LIMIT, lambda c: budget.check_depth_limit(c.f.depth, c.cfg)),
    (H.BUDGET_SOFT_LIMIT, lambda c: budget.check_soft_limit(c.s, c.cfg, c.f.tool)),
    (H.TOOL_TOKEN_BUDGET, lambda c: budget.check_tool_token_budget(c.s, c.cfg, c.f.tool)),
    (H.IDENTICAL_FAILURE, lambda c: loops.check_identical_failure(c.s, c.f, c.cfg, c.now)),
    (H.IDENTICAL_CALL, lambda c: loops.check_identical_call(c.s, c.f, c.cfg, c.now, c.polling)),
    (H.STUCK_POLLING, lambda c: loops.check_stuck_polling(c.s, c.f, c.cfg, c.now, c.polling)),
    (H.NEAR_DUPLICATE, lambda c: loops.check_near_duplicate(c.s, c.f, c.cfg, c.similar, c.polling)),
    (H.OSCILLATION, lambda c: loops.check_oscillation(c.s, c.f, c.cfg)),
)


def _enabled(cfg: AgentBreakerConfig, checks: tuple[tuple[str, Check], ...]) -> tuple[tuple[str, str, Check], ...]:
    """The checks a config has on, each with its mode (worked out once per config)."""
    return tuple((name, cfg.mode_of(name), check) for name, check in checks if cfg.mode_of(name) != "off")


@dataclass(frozen=True, slots=True)
class _Policy:
    """A resolved config plus what is derived from it once."""

    cfg: AgentBreakerConfig
    canon: Canonicalizer
    result_canon: Canonicalizer
    in_progress: frozenset[str]
    claims: ClaimChecker
    mutating_tools: dict[str, bool]
    call_checks: tuple[tuple[str, str, Check], ...]
    session_limits: tuple[tuple[str, str, Check], ...]
    polling_tools: dict[str, bool]

    def polling(self, tool: str) -> bool:
        """Marked `polling` under tools:, or named like a status tool (stuck_polling.polling_tools)."""
        v = self.polling_tools.get(tool)
        if v is None:
            if len(self.polling_tools) > 10_000:
                self.polling_tools.clear()
            v = self.polling_tools[tool] = self.cfg.tool(tool).polling or self.cfg.stuck_polling.is_polling_tool(tool)
        return v

    def mutating(self, tool: str) -> bool:
        """Configured as mutating, or named after an action (wire_transfer, send_email)."""
        v = self.mutating_tools.get(tool)
        if v is None:
            if len(self.mutating_tools) > 10_000:
                self.mutating_tools.clear()
            policy = self.cfg.tools.get(tool)
            if policy is not None and policy.mutating:
                v = True
            else:
                v = self.cfg.receipts.infer_mutating and bool(self.claims.action_stems & set(_NAME_TOKENS.findall(tool.lower())))
            self.mutating_tools[tool] = v
        return v


@dataclass(slots=True)
class _Step:
    """One event on its way through the engine, and the trips to tell listeners about."""

    ev: Any
    key: str
    now: float
    p: _Policy
    trips: list[tuple[SessionState, Trip, str]] = field(default_factory=list)

    def session(self, state: object | None) -> SessionState:
        # a shared store may run the decision again (compare-and-set conflict): start clean
        self.trips.clear()
        if isinstance(state, SessionState):
            return state
        ev = self.ev
        return SessionState(self.key, tenant=ev.tenant, feature=ev.feature, agent=ev.agent, created_s=self.now)


class Engine:
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
    ) -> None:
        """`trust_event_time`: decide at each event's own `ts` (replay of a recorded trace).
        Live traffic keeps it False: the engine's clock decides, and a caller's `ts` is
        ignored, so no input can move another session's or a shared breaker's time."""
        self.config = config if isinstance(config, AgentBreakerConfig) else parse_config(config)
        self.store: Store = store or _store_for(self.config)
        self.clock = clock or SystemClock()
        self.trust_event_time = trust_event_time
        self.listeners: list[Listener] = [log_incident] if listeners is None else list(listeners)
        self.share_breakers = share_breakers
        self.observe = observe
        self.failure_predicates: dict[str, FailurePredicate] = dict(failure_predicates or {})
        self.receipt_keys = receipt_keys or ReceiptKeys.from_config(
            self.config.receipts, required=self.config.mode_of(H.UNVERIFIED_CLAIM) == "enforce" and not observe
        )
        self.fingerprints = fingerprinter or fingerprinter_for(
            self.config, shared=not isinstance(self.store, MemoryStore), receipt_keys=self.receipt_keys
        )
        self._policies: dict[tuple[str | None, str | None, str | None], _Policy] = {}
        self._metrics: Counter[tuple[str, str]] = Counter()
        self._metrics_lock = threading.Lock()

    # ----------------------------------------------------------------- helpers
    def _policy(self, tenant: str | None, feature: str | None, agent: str | None) -> _Policy:
        k = (tenant, feature, agent)
        p = self._policies.get(k)
        if p is None:
            cfg = self.config.resolve(tenant, feature, agent)
            if self.observe:
                cfg = _observe_only(cfg)
            p = _Policy(
                cfg,
                Canonicalizer(cfg.volatile_fields, max_bytes=cfg.max_args_bytes, fold=True),
                Canonicalizer(cfg.volatile_fields, max_bytes=_RESULT_MAX_BYTES, max_depth=_RESULT_MAX_DEPTH),
                frozenset(cfg.stuck_polling.in_progress_values),
                ClaimChecker(cfg, self.fingerprints),
                {},
                _enabled(cfg, _CALL_CHECKS),
                _enabled(cfg, _SESSION_LIMITS),
                {},
            )
            if len(self._policies) > 10_000:
                self._policies.clear()
            self._policies[k] = p
        return p

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

    def _facts(self, ev: ToolCall, p: _Policy) -> CallFacts:
        try:
            canonical = p.canon.canonical(ev.args)
        except CanonicalError as exc:
            raise InvalidEventError.of([("args", str(exc))]) from None
        cfg = p.cfg
        fp = self.fingerprints
        return CallFacts(
            tool=ev.tool,
            key=fp.hash64(ev.tool, canonical),
            fp_text=fp.tokens(canonical),
            fp_shape=fp.shapes(canonical),
            fp_thought=None if not ev.thought else tuple(sorted(fp.shapes(normalize_text(ev.thought)))),
            tokens=ev.input_tokens + ev.output_tokens,
            cost_usd=budget.step_cost_usd(cfg, ev.input_tokens, ev.output_tokens, ev.cost_usd, ev.model),
            depth=ev.depth or 0,
            mutating=ev.mutating if ev.mutating is not None else p.mutating(ev.tool),
        )

    def _breaker_key(self, cfg: AgentBreakerConfig, tenant: str | None, tool: str) -> str:
        if not self.share_breakers:
            return tool
        return key_parts(tenant or "", tool) if cfg.breaker.key_by_tenant else key_parts(tool)

    def _emit(self, s: SessionState, ev: Any, trip: Trip, severity: str, now: float, tool: str | None) -> None:
        with self._metrics_lock:
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
            tokens_so_far=s.tokens,
            cost_usd_so_far=s.cost_usd,
        )
        for listener in self.listeners:
            try:
                listener(incident)
            except Exception:  # a failing listener never breaks a decision
                log.exception("agent-breaker incident listener %r failed", listener)

    def step_cost_usd(self, ev: ToolCall | Assistant) -> float:
        """The model spend of one step: its cost_usd, or its tokens at the configured price."""
        cfg = self._policy(ev.tenant, ev.feature, ev.agent).cfg
        return budget.step_cost_usd(cfg, ev.input_tokens, ev.output_tokens, ev.cost_usd, ev.model)

    def metrics(self) -> dict[str, int]:
        """Trips so far, as {"heuristic:severity": count}."""
        with self._metrics_lock:
            return {f"{h}:{sev}": n for (h, sev), n in sorted(self._metrics.items())}

    @staticmethod
    def _verdict(trip: Trip, severity: str, tool: str | None, call_id: str | None = None) -> Verdict:
        return Verdict(
            allowed=severity != "block",
            heuristic=trip.heuristic,
            severity=severity,  # type: ignore[arg-type]
            scope=trip.scope,
            reason=trip.reason,
            counters=trip.counters,
            observation=observation(trip.heuristic, tool, trip.reason, trip.instruction, trip.retry_after_s),
            call_id=call_id,
        )

    @staticmethod
    def _run_checks(checks: Iterable[tuple[str, str, Check]], ctx: _Ctx | None) -> tuple[Trip | None, Trip | None]:
        """Run (name, mode, check) in order; return (first blocking trip, first observed trip)."""
        warn = None
        for _name, mode, check in checks:
            trip = check(ctx)  # type: ignore[arg-type]
            if trip is None:
                continue
            if mode == "enforce":
                return trip, warn
            warn = warn or trip
        return None, warn

    @staticmethod
    def _judge(cfg: AgentBreakerConfig, trips: Iterable[Trip | None]) -> tuple[Trip | None, Trip | None]:
        """The same for trips found outside the check tables (by their heuristics' modes)."""
        found = [(t.heuristic, cfg.mode_of(t.heuristic), t) for t in trips if t is not None]
        return Engine._run_checks(((n, m, lambda _c, t=t: t) for n, m, t in found if m != "off"), None)

    def _halted_verdict(self, s: SessionState, cfg: AgentBreakerConfig, tool: str | None) -> Verdict | None:
        if s.halted is None:
            return None
        heuristic, reason = s.halted
        if cfg.mode_of(heuristic) != "enforce":
            return None
        trip = Trip(heuristic, "session", f"session halted earlier: {reason}", "Write your final answer now.")
        return self._verdict(trip, "block", tool)

    # ----------------------------------------------------------------- one step
    def _begin(self, event: Any, cls: type) -> _Step:
        ev = event if isinstance(event, cls) else parse_typed(cls, event)  # the handler names the type
        return _Step(ev, self.session_key(ev), self._now(ev), self._policy(ev.tenant, ev.feature, ev.agent))

    def _commit(self, step: _Step, fn: Callable[[object | None], tuple[SessionState, Any]], tool: str | None) -> Any:
        """Run fn atomically on the session, then tell the listeners (outside the lock)."""
        try:
            verdict = self.store.update_session(step.key, step.now, fn)
        except StorageError as exc:
            return self._storage_unavailable(step, exc, tool)
        for s, trip, severity in step.trips:
            self._emit(s, step.ev, trip, severity, step.now, tool)
        return verdict

    def _storage_unavailable(self, step: _Step, exc: StorageError, tool: str | None) -> Any:
        """The shared store failed: the configured policy decides (fail_closed or fail_open)."""
        closed = self.config.storage.on_error == "fail_closed" and step.p.cfg.mode == "enforce"
        reason = f"guard state is unavailable ({exc}); policy {self.config.storage.on_error}"
        log.warning("agent-breaker: %s", reason)
        with self._metrics_lock:
            self._metrics[(H.STORAGE_UNAVAILABLE, "block" if closed else "warn")] += 1
        if isinstance(step.ev, ToolResult):
            return ResultVerdict(not closed, H.STORAGE_UNAVAILABLE, reason)
        trip = Trip(H.STORAGE_UNAVAILABLE, "call", reason, "The guard is unavailable; try again shortly.", {},
                    self.config.storage.retry_s)
        return self._verdict(trip, "block" if closed else "warn", tool)

    def _settle(
        self, step: _Step, s: SessionState, block: Trip | None, warn: Trip | None, tool: str | None, call_id: str | None = None
    ) -> Verdict:
        """Turn the checks' outcome into a verdict; a session-terminal block halts the session."""
        if block is not None:
            if block.heuristic in H.SESSION_TERMINAL:
                s.halted = (block.heuristic, block.reason)
            step.trips.append((s, block, "block"))
            return self._verdict(block, "block", tool)
        if warn is not None:
            step.trips.append((s, warn, "warn"))
            return self._verdict(warn, "warn", tool, call_id)
        return ALLOW if call_id is None else Verdict(True, call_id=call_id)

    def _global_spend(self, step: _Step, tokens: int, cost_usd: float) -> Trip | Verdict | None:
        """Add a step's spend to its tenant's and feature's shared window (once, outside the
        session update, which a shared store may retry); the global_budget trip, if over."""
        cfg = step.p.cfg
        g = cfg.global_budget
        if (g.max_tokens is None and g.max_cost_usd is None) or cfg.mode_of(H.GLOBAL_BUDGET) == "off":
            return None
        try:
            spent = self.store.add_spend(key_parts(step.ev.tenant or "", step.ev.feature or ""), tokens, cost_usd, g.window_s, step.now)
        except StorageError as exc:
            return self._storage_unavailable(step, exc, getattr(step.ev, "tool", None))
        return budget.check_global_budget(spent, cfg, step.now)

    # ----------------------------------------------------------------- tool calls
    def check_tool_call(self, event: ToolCall | Mapping[str, Any]) -> Verdict:
        """Decide, before it runs, whether a tool call may run."""
        step = self._begin(event, ToolCall)
        ev, now, p = step.ev, step.now, step.p
        cfg = p.cfg
        if cfg.mode == "off":
            return ALLOW
        f = self._facts(ev, p)
        polling_tool = p.polling(ev.tool)
        global_trip = self._global_spend(step, f.tokens, f.cost_usd)
        if isinstance(global_trip, Verdict):
            return global_trip

        def decide(state: object | None) -> tuple[SessionState, Verdict]:
            s = step.session(state)
            budget.account(s, cfg, now, f.tokens, f.cost_usd, f.tool)
            if f.mutating:
                s.ledger.attempt(f.tool)
            halted = self._halted_verdict(s, cfg, f.tool)
            if halted is not None:
                return s, halted
            similar = loops.chain_similarity(s, f, cfg, now)
            polling = polling_tool or loops.polled_by_result(s, f)
            block, warn = self._judge(cfg, [global_trip]) if global_trip is not None else (None, None)
            if block is None:
                block, call_warn = self._run_checks(p.call_checks, _Ctx(s, f, cfg, now, polling, similar))
                warn = warn or call_warn
            churn_on = cfg.mode_of(H.SESSION_CHURN) != "off"
            if block is None and churn_on and s.only_key in (None, f.key):
                view = self.store.peek_session(_view_key(s))
                trip = churn.check(getattr(view, "churn", None), f.key, f.tool, cfg, now)
                if trip is not None:
                    block, churn_warn = self._judge(cfg, [trip])
                    warn = warn or churn_warn
            bkey = self._breaker_key(cfg, s.tenant, f.tool)
            probe = None
            if block is None and cfg.mode_of(H.CIRCUIT_OPEN) != "off":
                permission = self._breaker_acquire(s, bkey, cfg, now)
                probe = permission.probe
                trip = _breaker_trip(permission, f.tool)
                if trip is not None:
                    # a metrics-only breaker lets the call through and only reports
                    if permission.allowed is False and cfg.mode_of(H.CIRCUIT_OPEN) == "enforce":
                        block = trip
                    else:
                        warn = warn or trip
            if block is not None:
                return s, self._settle(step, s, block, None, f.tool)
            call_id = ev.call_id
            if call_id is None:
                s.auto_ids += 1
                call_id = f"~{s.auto_ids}"
            if len(s.pending) >= MAX_PENDING:
                del s.pending[next(iter(s.pending))]
            s.pending[call_id] = Pending(f, call_id, bkey, probe, similar[0], similar[1], loops.record_call(s, f, cfg))
            left_chain.clear()
            if s.only_key is None:
                s.only_key = f.key
            elif s.only_key != f.key:
                if s.only_key != MIXED and churn_on:
                    left_chain.append(_view_key(s))
                s.only_key = MIXED
            return s, self._settle(step, s, None, warn, f.tool, call_id)

        left_chain: list[str] = []  # the agent view this session's chain ends in, if any
        verdict = self._commit(step, decide, f.tool)
        for vkey in left_chain:
            self._update_view(vkey, now, lambda view: churn.leave(view, step.key))
        return verdict

    def _update_view(self, vkey: str, now: float, change: Callable[[ChurnView], bool | None]) -> None:
        """Change an agent view (session_churn); a storage failure only costs that view."""

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
            log.warning("agent-breaker: agent view not updated: %s", exc)

    def _breaker_acquire(self, s: SessionState, bkey: str, cfg: AgentBreakerConfig, now: float) -> Permission:
        if self.share_breakers:
            return self.store.breaker_acquire(bkey, cfg.breaker, now)
        return breaker_core.acquire(s.breaker(bkey), cfg.breaker, now)

    def _breaker_record(
        self, s: SessionState | None, bkey: str, cfg: AgentBreakerConfig, now: float, failed: bool, slow: bool, probe: int | None
    ) -> str:
        """Record an outcome on the shared breaker (s is None) or the session's own; its state after."""
        if s is None:
            return self.store.breaker_record(bkey, cfg.breaker, now, failed=failed, slow=slow, probe=probe).state.value
        st = s.breaker(bkey)
        breaker_core.record(st, cfg.breaker, now, failed=failed, slow=slow, probe=probe)
        return st.state.value

    # ----------------------------------------------------------------- tool results
    def record_tool_result(self, event: ToolResult | Mapping[str, Any]) -> ResultVerdict:
        """Record what a tool returned (after it ran); mint a receipt for a mutating tool's success."""
        step = self._begin(event, ToolResult)
        ev, key, now, p = step.ev, step.key, step.now, step.p
        cfg = p.cfg
        if cfg.mode == "off":
            return ResultVerdict(True)
        predicate = self.failure_predicates.get(ev.tool)
        failed = (
            not ev.ok
            or (cfg.breaker.semantic_failures and is_semantic_failure(ev.result))
            or (predicate is not None and bool(predicate(ev.result)))
        )
        slow = cfg.breaker.slow_call_ms is not None and ev.latency_ms is not None and ev.latency_ms > cfg.breaker.slow_call_ms
        canonical = self._result_canonical(p, ev.result)
        result_hash = self.fingerprints.hash64(canonical)
        in_progress = _in_progress(ev.result, p.in_progress)
        transient = failed and _is_transient(ev)
        references = p.claims.result_references(canonical) if not failed else None

        # a shared breaker is recorded once, after the session write: a store may run `record`
        # again on a compare-and-set conflict, and a breaker outcome must count once
        shared: list[tuple[str, int | None]] = []

        def record(state: object | None) -> tuple[SessionState | None, ResultVerdict]:
            s = step.session(state)
            shared.clear()
            churn_outcome.clear()
            pending = _pop_pending(s, ev)
            if pending is None:
                # a result of a call the guard never let through (or already recorded) counts
                # toward nothing and mints nothing: the session is not even written
                which = f"with call_id {ev.call_id!r}" if ev.call_id is not None else "without a call_id"
                return None, ResultVerdict(
                    False, H.INVALID_EVENT, f"no call of {ev.tool} {which} was allowed in this session and awaits its result"
                )
            if references:
                s.ledger.observe(references)
            bkey, probe = pending.breaker_key, pending.probe
            bstate = None
            if not self.share_breakers:
                bstate = self._breaker_record(s, bkey, cfg, now, failed, slow, probe)
            elif self.store.retries_updates:
                shared.append((bkey, probe))
            else:
                bstate = self._breaker_record(None, bkey, cfg, now, failed, slow, probe)
            f = pending.facts
            if s.only_key == f.key and cfg.mode_of(H.SESSION_CHURN) != "off":
                churn_outcome.append((_view_key(s), f.key, FAILED if failed else result_hash))
            if loops.record_result(s, pending, result_hash, failed, transient, in_progress, now, cfg):
                # new information: assistant turns start a new stretch, and so do this
                # session's own breaker streaks
                s.turns.clear()
                s.restart_breaker_streaks()
            if failed or not (f.mutating or ev.mutating):
                return s, ResultVerdict(True, failed=failed, breaker_state=bstate)
            s.ledger.attempt(f.tool)
            anomaly = None
            if is_empty_result(ev.result):
                block, warn = self._judge(cfg, [empty_mutation_trip(f.tool)])
                anomaly = self._settle(step, s, block, warn, f.tool)
                if block is not None:  # enforce: no receipt for an action that may not have happened
                    return s, ResultVerdict(False, anomaly.heuristic, anomaly.reason, breaker_state=bstate)
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
            if anomaly is not None and anomaly.heuristic is not None:  # observed: reported, not withheld
                return s, ResultVerdict(True, anomaly.heuristic, anomaly.reason, breaker_state=bstate, receipt=receipt)
            return s, ResultVerdict(True, breaker_state=bstate, receipt=receipt)

        churn_outcome: list[tuple[str, int, int]] = []  # (agent view, call, outcome) of a one-call-only session
        verdict = self._commit(step, record, ev.tool)
        for bkey, probe in shared:
            try:
                verdict = replace(verdict, breaker_state=self._breaker_record(None, bkey, cfg, now, failed, slow, probe))
            except StorageError as exc:
                log.warning("agent-breaker: breaker outcome of %s not recorded: %s", ev.tool, exc)
        for vkey, call_key, outcome in churn_outcome:
            self._update_view(vkey, now, lambda view: churn.record_outcome(view, key, call_key, outcome, now, cfg))
        return verdict

    @staticmethod
    def _result_canonical(p: _Policy, result: Any) -> str:
        try:
            return p.result_canon.canonical(result)
        except CanonicalError as exc:
            raise InvalidEventError.of([("result", str(exc))]) from None

    # ----------------------------------------------------------------- turns
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

        def decide(state: object | None) -> tuple[SessionState, Verdict]:
            s = step.session(state)
            budget.account(s, cfg, now, tokens, cost, None)
            halted = self._halted_verdict(s, cfg, None)
            if halted is not None:
                return s, halted
            own_run, repeats, agents = conversation.record_turn(s, agent, fp, cfg)
            block, warn = self._judge(cfg, [global_trip]) if global_trip is not None else (None, None)
            if block is None:
                block, limit_warn = self._run_checks(p.session_limits, _Ctx(s, None, cfg, now, False, (False, False)))
                warn = warn or limit_warn
            if block is None:
                block, turn_warn = self._judge(cfg, conversation.check_turn(own_run, repeats, agents, cfg))
                warn = warn or turn_warn
            return s, self._settle(step, s, block, warn, None)

        return self._commit(step, decide, None)

    def record_user(self, event: User | Mapping[str, Any]) -> Verdict:
        """A user turn is new information: loop streaks start over, loop halts are lifted."""
        step = self._begin(event, User)
        if step.p.cfg.mode == "off":
            return ALLOW
        references = step.p.claims.references_in(step.ev.text)

        def reset(state: object | None) -> tuple[SessionState, Verdict]:
            s = step.session(state)
            s.reset_streaks()
            if references:
                s.ledger.observe(references)  # the user's own references may be quoted back
            if s.halted is not None and s.halted[0] in H.LOOPS:  # budget halts stay
                s.halted = None
            return s, ALLOW

        return self._commit(step, reset, None)

    def verify_final(self, event: Final | Mapping[str, Any]) -> Verdict:
        """Check a final answer before it reaches the user: every reference it cites must come
        from a tool result of this session, every completed action it claims needs a receipt."""
        step = self._begin(event, Final)
        cfg = step.p.cfg
        if cfg.mode_of(H.UNVERIFIED_CLAIM) == "off":
            return ALLOW

        def check(state: object | None) -> tuple[SessionState, Verdict]:
            s = step.session(state)
            trip = step.p.claims.check(step.ev.text, s.ledger) if cfg.mode_of(H.UNVERIFIED_CLAIM) != "off" else None
            block, warn = self._judge(cfg, [trip])
            return s, self._settle(step, s, block, warn, None)

        return self._commit(step, check, None)

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
        """For downstream systems: does this receipt vouch for this (session, call, tool, result)?
        Forged, tampered, cross-session and replayed receipts fail. Pass the tenant / feature /
        agent of the session when overrides change how results are canonicalized."""
        if self.receipt_keys is None:
            return False, "no receipt keys configured"
        result_hash = self.fingerprints.hash64(self._result_canonical(self._policy(tenant, feature, agent), result))
        return verify(
            self.receipt_keys, receipt, tenant=tenant, session=session, call_id=call_id, tool=normalize_text(tool), result_hash=result_hash
        )

    # ----------------------------------------------------------------- any event
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
    def breaker_state(self, tool: str, *, tenant: str | None = None) -> BreakerStateName:
        cfg = self._policy(tenant, None, None).cfg
        st = self.store.breaker_state(self._breaker_key(cfg, tenant, tool))
        return BreakerStateName.CLOSED if st is None else st.state

    def force_breaker(self, tool: str, state: BreakerStateName | str, *, tenant: str | None = None) -> None:
        """Operator control: force open, disable, metrics-only, or reset a tool's breaker."""
        cfg = self._policy(tenant, None, None).cfg
        self.store.breaker_force(self._breaker_key(cfg, tenant, tool), cfg.breaker, self.clock.now(), BreakerStateName(state))


def fingerprinter_for(config: AgentBreakerConfig, *, shared: bool, receipt_keys: ReceiptKeys | None = None) -> Fingerprinter:
    """The deployment's fingerprint key: `fingerprint_secret`, else $AGENT_BREAKER_FINGERPRINT_SECRET,
    else one derived from the current receipt key (a fleet shares those already), else (state
    in this process only) a random key. A shared store needs one key for the whole fleet, or
    workers' fingerprints would not compare: without any of these it is refused."""
    secret = config.fingerprint_secret or os.environ.get(FINGERPRINT_SECRET_ENV, "")
    if secret:
        return Fingerprinter(secret.encode("utf-8"))
    if receipt_keys is not None:
        return Fingerprinter(hmac.new(receipt_keys.keys[receipt_keys.current_id], _FINGERPRINT_LABEL, hashlib.sha256).digest())
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
        prefix=st.key_prefix,
        timeout_s=st.timeout_ms / 1000.0,
        on_error="local" if st.on_error == "local" else "raise",
        retry_s=st.retry_s,
        near_cache_s=st.near_cache_s,
    )


def _observe_only(cfg: AgentBreakerConfig) -> AgentBreakerConfig:
    """The same config with every enforcing heuristic reporting instead."""
    if cfg.mode == "off":
        return cfg
    modes = {h: ("off" if cfg.mode_of(h) == "off" else "observe") for h in H.CONFIGURABLE}
    return cfg.model_copy(update={"mode": "observe", "modes": modes})


def _view_key(s: SessionState) -> str:
    """The key of the agent view (session_churn) a session reports to. It starts with a control
    character, which no session id may hold, so it never names a real session."""
    return f"\x1eview{TENANT_SEPARATOR}{s.tenant or ''}{TENANT_SEPARATOR}{s.agent or ''}"


def _pop_pending(s: SessionState, ev: ToolResult) -> Pending | None:
    if ev.call_id is not None:
        pending = s.pending.get(ev.call_id)
        if pending is None or pending.facts.tool != ev.tool:
            return None  # unknown, or a result of another tool: not ours
        del s.pending[ev.call_id]
        return pending
    # no call_id: the oldest call of this tool that had none
    for cid, pending in s.pending.items():
        if cid.startswith("~") and pending.facts.tool == ev.tool:
            del s.pending[cid]
            return pending
    return None


def _in_progress(result: Any, values: frozenset[str]) -> bool:
    """A result that says "not finished yet": its call is a poll."""
    if not isinstance(result, dict):
        return False
    for name in ("status", "state", "phase"):
        v = result.get(name)
        if isinstance(v, str) and v.lower().replace(" ", "_").replace("-", "_") in values:
            return True
    return any(result.get(name) is False for name in _NOT_DONE_FIELDS)


def _is_transient(ev: ToolResult) -> bool:
    """An error that is expected to clear by itself (timeouts, rate limits, 502-504)."""
    if ev.error and _TRANSIENT.search(ev.error):
        return True
    result = ev.result
    if isinstance(result, dict):
        for name in ("error", "message", "status", "code", "status_code"):
            v = result.get(name)
            if isinstance(v, (str, int)) and not isinstance(v, bool) and _TRANSIENT.search(str(v)):
                return True
    return False


def _breaker_trip(permission: Permission, tool: str) -> Trip | None:
    if permission.allowed and not permission.would_refuse:
        return None
    if permission.state is BreakerStateName.HALF_OPEN:
        return Trip(
            H.CIRCUIT_HALF_OPEN,
            "tool",
            f"{tool} is recovering: its probe calls are in flight",
            f"Wait for {tool} to recover, or use another tool.",
            {"state": permission.state.value},
            permission.retry_after_s,
        )
    return Trip(
        H.CIRCUIT_OPEN,
        "tool",
        f"{tool} is failing for every session; its circuit breaker is {permission.state.value}",
        f"Do not call {tool} now. Use another tool, or tell the user the service is unavailable.",
        {"state": permission.state.value},
        permission.retry_after_s,
    )
