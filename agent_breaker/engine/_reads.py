"""What a decision reads before its session's update, gathered into the decider's typed input:
the event as facts, the shared spend windows, the tool view and the tenant's effects, the shared
breaker's permission, the family's streaks, and the id an escalation would take. A read the
decision cannot do without (a spend window, the shared breaker) that fails ends the decision
early with the storage failure policy's verdict; the others cost only what they would add."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, NamedTuple, cast

from .. import heuristics as H
from .._canonical import Fingerprinter
from .._outcomes import FailurePredicate, classify
from .._policy import Policies
from .._state import SessionState
from .._text import normalize_text
from .._work import reading as command_reading
from .._work import reads_output
from ..breaker import BreakerState
from ..breaker.states import MANUAL_STATES
from ..detectors import failures
from ..escalations.records import new_id as new_escalation_id
from ..events import Assistant, ToolCall, ToolResult
from ..governor import budget
from ..metrics import Metrics
from ..receipts import ReceiptKeys
from ..store import StorageError, Store
from ..store.base import Reading, SpendAdd, key_parts
from ..verdicts import ResultVerdict, Trip, Verdict
from . import _fallback
from ._decide import CallInput, ResultInput, TurnInput, schema_violation
from ._escalation import Escalations
from ._facts import TOOL, Step, breaker_key_of, call_facts, effects_key_of, family_key, result_facts, view_key_of
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
        # a tenant's sessions are one party's: its actions are followed across them (sessions that
        # name no tenant may be anyone's)
        effects_on = ev.tenant is not None and p.mode(H.DUPLICATE_MUTATION) != "off"
        tool_key = self._fp.labeled(TOOL, f.tool)
        view_key = view_key_of(ev.tenant, tool_key) if churn_on and not self._views.is_mixed(step.key) else None
        effects_key = effects_key_of(ev.tenant) if effects_on and f.effect is not None else None
        family = family_key(ev) if p.mode(H.IDENTICAL_FAILURE) != "off" else None
        bkey = breaker_key_of(cfg, ev.tenant, f.tool, shared=self._share_breakers)
        shared = breaker_on and self._share_breakers
        dependency = p.dependency(f.tool, ev.args) if shared else None
        windows = self._windows(step)
        sessions = [key for key in (view_key, effects_key, family) if key is not None]
        # a shared breaker is asked first (a half-open probe slot is released if the session
        # refuses the call): the session's decision must not touch the store
        permission = None
        try:
            got = self._read(step, windows, f.tokens, f.cost_usd, sessions, [] if dependency is None else [bkey])
            if dependency is not None:
                bkey = self._dependency_breaker(step, f.tool, dependency, bkey, got.breakers[0])
            if shared:
                permission = self._store.breaker_acquire(bkey, cfg.breaker, now)
        except StorageError as exc:
            return cast(Verdict, self._unavailable(step, exc, f.tool))  # not a result
        read = dict(zip(sessions, got.sessions, strict=True))
        return CallInput(
            call_id=ev.call_id,
            result_promised=ev.result_promised,
            f=f,
            did=p.commands.did(f.tool, ev.args, p.named) if p.mode(H.DONE_CLAIM) != "off" else None,
            p=p,
            now=now,
            tenant=ev.tenant,
            polling_tool=p.polling(ev.tool),
            global_trip=self._over(windows, got.spent, now),
            family_trip=None if family is None else failures.check_family(_session(read[family]), f, cfg),
            schema_trip=None if problem is None else schema_violation(f.tool, "arguments", problem),
            view=None if view_key is None else getattr(read[view_key], "churn", None),
            effects=None if effects_key is None else getattr(read[effects_key], "effects", None),
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
            # read here, out of the session's lock (and of a shared store's retries)
            output=command_reading(ev.result if ev.result is not None else ev.error)
            if p.mode(H.DONE_CLAIM) != "off" and reads_output(ev.tool)
            else None,
        )

    def turn(self, step: Step[Assistant]) -> TurnInput | Verdict:
        """What the assistant-turn decider reads, or the verdict that ends the turn here."""
        ev, p = step.ev, step.p
        tokens = ev.input_tokens + ev.output_tokens
        cost = budget.step_cost_usd(p.cfg, ev.input_tokens, ev.output_tokens, ev.cost_usd, ev.model)
        windows = self._windows(step)
        try:
            spent = self._read(step, windows, tokens, cost, [], []).spent
        except StorageError as exc:
            return cast(Verdict, self._unavailable(step, exc, None))  # not a result
        return TurnInput(
            p=p,
            now=step.now,
            tokens=tokens,
            cost_usd=cost,
            fingerprint=tuple(sorted(self._fp.tokens(normalize_text(ev.text)))),
            agent=self._fp.hash64(ev.agent or "") & 0xFFFF_FFFF,
            global_trip=self._over(windows, spent, step.now),
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

    def _windows(self, step: Step[ToolCall] | Step[Assistant]) -> list[_Window]:
        """The shared spend windows a step's spend goes to: its tenant's and feature's, and its
        tenant's over all features. The tenant's ceiling is read from its own settings: a
        feature or agent label does not choose it."""
        tenant = step.ev.tenant or ""
        windows = []
        g = step.p.cfg.global_budget
        if (g.max_tokens is not None or g.max_cost_usd is not None) and step.p.cfg.mode_of(H.GLOBAL_BUDGET) != "off":
            feature = key_parts(tenant, step.ev.feature or "")
            windows.append(_Window(feature, g.max_tokens, g.max_cost_usd, g.window_s, "tenant and feature"))
        own = self._policies.get(step.ev.tenant, None, None).cfg
        t = own.global_budget
        t_tokens = t.tenant_max_tokens if t.tenant_max_tokens is not None else t.max_tokens
        t_cost = t.tenant_max_cost_usd if t.tenant_max_cost_usd is not None else t.max_cost_usd
        if (t_tokens is not None or t_cost is not None) and own.mode_of(H.GLOBAL_BUDGET) != "off":
            windows.append(_Window(key_parts(tenant), t_tokens, t_cost, t.window_s, "tenant"))
        return windows

    def _read(
        self,
        step: Step[Any],
        windows: list[_Window],
        tokens: int,
        cost_usd: float,
        sessions: list[str],
        breakers: list[str],
    ) -> Reading:
        """The step's spend added to its windows (once each, before the session update, which a
        shared store may run again) and the sessions and breakers read, in one store call; a
        failure with only sessions asked reads them as unknown, as a failed peek is."""
        spends = [SpendAdd(w.key, tokens, cost_usd, w.window_s) for w in windows]
        if not (spends or sessions or breakers):
            return Reading([], [], [])
        try:
            return self._store.read_many(step.now, spends, sessions, breakers)
        except StorageError:
            if spends or breakers:
                raise
            return Reading([], [None] * len(sessions), [])

    @staticmethod
    def _over(windows: list[_Window], spent: list[tuple[float, float]], now: float) -> Trip | None:
        """The global_budget trip of the first window over its ceiling, if any."""
        for w, totals in zip(windows, spent, strict=True):
            trip = budget.check_global_budget(totals, w.max_tokens, w.max_cost_usd, w.window_s, now, w.whose)
            if trip is not None:
                return trip
        return None

    @staticmethod
    def _dependency_breaker(step: Step[ToolCall], tool: str, dependency: str, tool_key: str, held: BreakerState | None) -> str:
        """The breaker a call goes through: its dependency's (`tool@host`), so that failures of
        a host the agent chose open that host only; the tool's own (`held`) while an operator
        holds it (forced open, disabled, metrics only), so the operator's switch covers every host."""
        if held is not None and held.state in MANUAL_STATES:
            return tool_key
        return breaker_key_of(step.p.cfg, step.ev.tenant, f"{tool}@{dependency}", shared=True)


class _Window(NamedTuple):
    """A shared spend window a step's spend goes to, and its ceilings."""

    key: str
    max_tokens: int | None
    max_cost_usd: float | None
    window_s: float
    whose: str  # named in the trip: "tenant and feature", "tenant"


def _session(state: object | None) -> SessionState | None:
    return state if isinstance(state, SessionState) else None
