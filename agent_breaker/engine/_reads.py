"""What a decision reads before its session's update, gathered into the decider's typed input:
the event as facts, the shared spend windows, the tool view and the tenant's effects, the shared
breaker's permission, the family's streaks, and the id an escalation would take. A read the
decision cannot do without (a spend window, the shared breaker) that fails ends the decision
early with the storage failure policy's verdict; the others cost only what they would add."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, cast

from .. import heuristics as H
from .._canonical import Fingerprinter
from .._outcomes import FailurePredicate, classify
from .._policy import Policies
from .._state import SessionState
from .._text import normalize_text
from ..breaker.states import MANUAL_STATES
from ..detectors import failures
from ..escalations.records import new_id as new_escalation_id
from ..events import Assistant, ToolCall, ToolResult
from ..governor import budget
from ..metrics import Metrics
from ..receipts import ReceiptKeys
from ..store import StorageError, Store
from ..store.base import key_parts
from ..verdicts import ResultVerdict, Trip, Verdict
from . import _fallback
from ._decide import CallInput, ResultInput, TurnInput, schema_violation
from ._escalation import Escalations
from ._facts import TOOL, Step, breaker_key_of, call_facts, family_key, result_facts
from ._views import Shapes, ToolViews

#: the storage failure policy's verdict for a decision whose read failed
Unavailable = Callable[[Step[Any], StorageError, str | None], Verdict | ResultVerdict]


class Reads:
    """Gathers each decision's input from the event, the store and this process's memory."""

    def __init__(
        self,
        store: Store,
        views: ToolViews,
        fingerprints: Fingerprinter,
        policies: Policies,
        escalations: Escalations,
        telemetry: Metrics,
        unavailable: Unavailable,
        *,
        share_breakers: bool,
        failure_predicates: Mapping[str, FailurePredicate],
        receipt_keys: ReceiptKeys | None,
        confirmation: int,
    ) -> None:
        self._store = store
        self._views = views
        self._fp = fingerprints
        self._policies = policies
        self._escalations = escalations
        self._telemetry = telemetry
        self._unavailable = unavailable
        self._share_breakers = share_breakers
        self._failure_predicates = failure_predicates
        self._receipt_keys = receipt_keys
        self._confirmation = confirmation
        self._shapes = Shapes()

    def escalation_id(self) -> str | None:
        """The id a session-terminal trip of this decision freezes its session as (None: no
        human to hand it to)."""
        return new_escalation_id() if self._escalations.enabled else None

    def tool_call(self, step: Step[ToolCall]) -> CallInput | Verdict:
        """What the tool-call decider reads, or the verdict that ends the call here (the store
        failed a read the decision needs)."""
        ev, now, p = step.ev, step.now, step.p
        cfg = p.cfg
        f = call_facts(self._fp, ev, p)
        problem = p.schema_problem(f.tool, ev.args)
        self._telemetry.spent(ev.tenant, ev.feature, f.tokens, f.cost_usd)
        churn_on = p.mode(H.SESSION_CHURN) != "off"
        breaker_on = p.mode(H.CIRCUIT_OPEN) != "off"
        bkey = breaker_key_of(cfg, ev.tenant, f.tool, shared=self._share_breakers)
        # a shared breaker is asked first (a half-open probe slot is released if the session
        # refuses the call): the session's decision must not touch the store
        permission = None
        try:
            global_trip = self._global_spend(step, f.tokens, f.cost_usd)
            if breaker_on and self._share_breakers:
                bkey = self._dependency_breaker(step, f.tool, bkey)
                permission = self._store.breaker_acquire(bkey, cfg.breaker, now)
        except StorageError as exc:
            return cast(Verdict, self._unavailable(step, exc, f.tool))  # not a result
        tool_key = self._fp.labeled(TOOL, f.tool)
        view = self._views.read(ev.tenant, tool_key) if churn_on and not self._views.is_mixed(step.key) else None
        # a tenant's sessions are one party's: its actions are followed across them (sessions that
        # name no tenant may be anyone's)
        effects_on = ev.tenant is not None and p.mode(H.DUPLICATE_MUTATION) != "off"
        effects = self._views.read_effects(ev.tenant) if effects_on and f.effect is not None else None
        family = family_key(ev)
        family_trip = None
        if family is not None and p.mode(H.IDENTICAL_FAILURE) != "off":
            family_trip = failures.check_family(self._peek(family), f, cfg)
        return CallInput(
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
            member=self._views.member(step.key),
            tool_key=tool_key,
            bkey=bkey,
            breaker_on=breaker_on,
            churn_on=churn_on,
            effects_on=effects_on,
            share_breakers=self._share_breakers,
            permission=permission,
            confirmation=self._confirmation,
            escalation_id=self.escalation_id(),
        )

    def tool_result(self, step: Step[ToolResult]) -> ResultInput:
        """What the tool-result decider reads: the result classified and checked (nothing of
        the store: the call's own facts are in its session)."""
        ev, p = step.ev, step.p
        out = classify(ev, p.cfg, p.in_progress, self._failure_predicates.get(ev.tool))
        result_trips = self._shapes.trips(p, ev, out)
        if result_trips and p.mode(H.SCHEMA_VIOLATION) == "enforce":
            # a result that breaks its schema is a failed call, the call's own: it feeds the
            # loop detectors, mints no receipt, and proves nothing to a half-open breaker
            out = replace(out, failed=True, dependency=False, retry_after_s=None)
        return ResultInput(
            ev=ev,
            p=p,
            now=step.now,
            out=out,
            r=result_facts(self._fp, ev, p, out),
            result_trips=result_trips,
            polling=p.polling(ev.tool),
            churn_on=p.mode(H.SESSION_CHURN) != "off",
            effects_on=ev.tenant is not None and p.mode(H.DUPLICATE_MUTATION) != "off",
            share_breakers=self._share_breakers,
            fp=self._fp,
            receipt_keys=self._receipt_keys,
            escalation_id=self.escalation_id(),
        )

    def turn(self, step: Step[Assistant]) -> TurnInput | Verdict:
        """What the assistant-turn decider reads, or the verdict that ends the turn here."""
        ev, p = step.ev, step.p
        tokens = ev.input_tokens + ev.output_tokens
        cost = budget.step_cost_usd(p.cfg, ev.input_tokens, ev.output_tokens, ev.cost_usd, ev.model)
        try:
            global_trip = self._global_spend(step, tokens, cost)
        except StorageError as exc:
            return cast(Verdict, self._unavailable(step, exc, None))  # not a result
        return TurnInput(
            p=p,
            now=step.now,
            tokens=tokens,
            cost_usd=cost,
            fingerprint=tuple(sorted(self._fp.tokens(normalize_text(ev.text)))),
            agent=self._fp.hash64(ev.agent or "") & 0xFFFF_FFFF,
            global_trip=global_trip,
            escalation_id=self.escalation_id(),
        )

    def serving(self, step: Step[Any], tool: str) -> bool:
        """Would this tool's breaker let a call through now (read only: the alternative's own
        call goes through its breaker when the caller runs it)."""
        if not self._share_breakers or step.p.mode(H.CIRCUIT_OPEN) == "off":
            return True
        try:
            st = self._store.breaker_state(breaker_key_of(step.p.cfg, step.ev.tenant, tool, shared=True))
        except StorageError:
            return False
        return _fallback.serving(st, step.now)

    def _global_spend(self, step: Step[ToolCall] | Step[Assistant], tokens: int, cost_usd: float) -> Trip | None:
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
        own = self._policies.get(step.ev.tenant, None, None).cfg
        t = own.global_budget
        t_tokens = t.tenant_max_tokens if t.tenant_max_tokens is not None else t.max_tokens
        t_cost = t.tenant_max_cost_usd if t.tenant_max_cost_usd is not None else t.max_cost_usd
        if (t_tokens is not None or t_cost is not None) and own.mode_of(H.GLOBAL_BUDGET) != "off":
            windows.append((key_parts(tenant), t_tokens, t_cost, t.window_s, "tenant"))
        trip = None
        for key, max_tokens, max_cost, window_s, whose in windows:
            spent = self._store.add_spend(key, tokens, cost_usd, window_s, step.now)
            trip = trip or budget.check_global_budget(spent, max_tokens, max_cost, window_s, step.now, whose)
        return trip

    def _dependency_breaker(self, step: Step[ToolCall], tool: str, tool_key: str) -> str:
        """The breaker a call goes through: its dependency's (`tool@host`), so that failures of
        a host the agent chose open that host only; the tool's own while an operator holds it
        (forced open, disabled, metrics only), so the operator's switch covers every host."""
        dependency = step.p.dependency(tool, step.ev.args)
        if dependency is None:
            return tool_key
        held = self._store.breaker_state(tool_key)
        if held is not None and held.state in MANUAL_STATES:
            return tool_key
        return breaker_key_of(step.p.cfg, step.ev.tenant, f"{tool}@{dependency}", shared=True)

    def _peek(self, key: str) -> SessionState | None:
        try:
            state = self._store.peek_session(key)
        except StorageError:
            return None
        return state if isinstance(state, SessionState) else None
