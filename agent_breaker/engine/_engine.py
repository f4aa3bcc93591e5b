"""The guard engine: one decision per agent event.

`Engine` is the single code path behind `agent-breaker replay`, the NeMo actions and direct
Python use. A decision begins (the event parsed, its session's key, its time, the policy in
force), reads what it needs into its decider's input (`_reads`: the event as facts, the shared
spend windows, the shared breaker's permission, the tool view, the family's streaks), decides
purely on the session's state in one store update (`_decide`, which a shared store may run
again on a compare-and-set conflict, so it touches nothing else), and has what the decision
asked for outside the session (`_outputs`) done in one place (`_apply`). The operator's and
the receipts' methods are facades of their own (`engine.operator`, `engine.receipts`).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar, cast

from .. import heuristics as H
from .._canonical import Fingerprinter
from .._outcomes import FailurePredicate
from .._policy import CONFIRMATION, Policies
from .._sinks import sinks_for
from .._state import SessionState
from .._text import normalize_name
from .._tracing import configured_tracer
from .._work import sent_back
from ..clock import Clock, SystemClock
from ..config import FINGERPRINT_SECRET_ENV, AgentBreakerConfig, ConfigError, parse_config
from ..escalations import EscalationStore
from ..events import Assistant, Final, InvalidEventError, ToolCall, ToolResult, User, parse_event, parse_typed
from ..governor import budget
from ..metrics import Metrics
from ..metrics import shared as shared_metrics
from ..receipts import ReceiptKeys
from ..store import MemoryStore, StorageError, Store, store_from_uri
from ..verdicts import ALLOW, ResultVerdict, Trip, Verdict, verdict_for
from . import _fallback
from ._apply import Applier
from ._decide import (
    decide_assistant,
    decide_final,
    decide_model_call,
    decide_tool_call,
    decide_tool_result,
    decide_user,
)
from ._escalation import Escalations
from ._facts import AnyEvent, E, Step, said_hash, session_key_of
from ._instrument import Listener, Reporter, log_incident, measured
from ._operator import Operator
from ._outputs import BreakerMoved, Decided, ReleaseProbe
from ._reads import Reads
from ._receipts import Receipts
from ._views import ToolViews

log = logging.getLogger("agent_breaker")

V = TypeVar("V", Verdict, ResultVerdict)
#: how many lifted freezes one call goes through before it is refused (each needs a resume)
MAX_THAWS = 3


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
        self.receipt_keys = receipt_keys or receipt_keys_for(self.config, observe=observe)
        self.fingerprints = fingerprinter or fingerprinter_for(
            self.config, shared=not isinstance(self.store, MemoryStore), receipt_keys=self.receipt_keys
        )
        self.policies = Policies(self.config, self.fingerprints, observe=observe)
        self.escalations = Escalations(self.config, self.store, self.fingerprints, escalations, telemetry=self.telemetry)
        self.views = ToolViews(self.store, self.fingerprints)
        self.applier = Applier(
            self.store,
            self.views,
            self.reporter,
            self.escalations,
            self.telemetry,
            self.config.storage,
            share_breakers=share_breakers,
        )
        self.reads = Reads(
            self.store,
            self.views,
            self.fingerprints,
            self.policies,
            self.escalations,
            self.telemetry,
            self.applier.unavailable,
            share_breakers=share_breakers,
            failure_predicates={normalize_name(tool): fn for tool, fn in (failure_predicates or {}).items()},
            receipt_keys=self.receipt_keys,
            confirmation=said_hash(self.fingerprints, CONFIRMATION),
        )
        #: the operator's controls (`breaker_state`, `force_breaker`, `breakers`)
        self.operator = Operator(self.store, self.policies, self.clock, self.reporter, self.tracer, share_breakers=share_breakers)
        #: receipt verification for downstream systems (`verify`)
        self.receipts = Receipts(self.receipt_keys, self.fingerprints, self.policies)

    @property
    def listeners(self) -> list[Listener]:
        """Who is told of each incident (append to add one)."""
        return self.reporter.listeners

    def session_key(self, ev: AnyEvent) -> str:
        """The key of an event's session: its id within its tenant, so tenants cannot reach
        each other's sessions whatever ids they choose."""
        return session_key_of(self.fingerprints, ev)

    # ----------------------------------------------------------------- one decision
    def _begin(self, event: E | Mapping[str, Any], cls: type[E]) -> Step[E]:
        ev: E = event if isinstance(event, cls) else parse_typed(cls, event)  # type: ignore[arg-type]  # validated there
        now = ev.ts if self.trust_event_time and ev.ts is not None else self.clock.now()
        return Step(ev, session_key_of(self.fingerprints, ev), now, self.policies.get(ev.tenant, ev.feature, ev.agent))

    def _commit(
        self, step: Step[Any], decide: Callable[[SessionState], tuple[SessionState | None, Decided[V]]], tool: str | None
    ) -> V:
        """Run the decider in one store update, then apply what it asked for. A shared store may
        run `decide` more than once; it is run again when a human lifted the freeze it found
        (a few times at most: each lift needs a resume)."""
        outcome: list[tuple[SessionState, Decided[V]]] = []

        def update(state: object | None) -> tuple[SessionState | None, None]:
            s = step.session(state)
            new_state, decided = decide(s)
            outcome[:] = [(s, decided)]
            return new_state, None

        for _ in range(1 + MAX_THAWS):
            try:
                self.store.update_session(step.key, step.now, update)
            except StorageError as exc:
                return cast(V, self.applier.unavailable(step, exc, tool))  # a result's verdict for a result
            s, decided = outcome[0]
            if decided.frozen is None or not self.escalations.thawed(step, decided.frozen):
                return self.applier.apply(step, s, decided.effects, decided.verdict, tool)
        trip = Trip(H.ESCALATED, "session", "the session's escalations keep changing", "Stop and try again later.")
        refused: Verdict | ResultVerdict = verdict_for(trip, "block", tool)
        return cast(V, refused)  # only a call or a model call is ever frozen

    # ----------------------------------------------------------------- the decisions
    @measured("tool_call")
    def check_tool_call(self, event: ToolCall | Mapping[str, Any]) -> Verdict:
        """Decide, before it runs, whether a tool call may run."""
        step = self._begin(event, ToolCall)
        if step.p.cfg.mode == "off":
            return ALLOW
        x = self.reads.tool_call(step)
        if isinstance(x, Verdict):
            return x
        tool, permission = x.f.tool, x.permission
        if permission is not None:
            self.applier.apply(step, None, (BreakerMoved(permission.transition, permission.state),), ALLOW, tool)
        verdict = self._commit(step, lambda s: decide_tool_call(s, x), tool)
        if permission is not None and permission.probe is not None and not verdict.allowed:
            self.applier.apply(step, None, (ReleaseProbe(x.bkey, permission.probe),), verdict, tool)
        if not verdict.allowed and verdict.heuristic in _fallback.TOOL_DOWN:
            verdict = _fallback.fallback(
                step,
                tool,
                verdict,
                serving=lambda alt: self.reads.serving(step, alt),
                escalate=lambda trip: self.escalations.escalate(step, None, trip, tool),
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
        return self._commit(step, lambda s: decide_model_call(s, step.p, step.now), None)

    @measured("tool_result")
    def record_tool_result(self, event: ToolResult | Mapping[str, Any]) -> ResultVerdict:
        """Record what a tool returned (after it ran); mint a receipt for a mutating tool's success."""
        step = self._begin(event, ToolResult)
        if step.p.cfg.mode == "off":
            return ResultVerdict(True)
        x = self.reads.tool_result(step)
        return self._commit(step, lambda s: decide_tool_result(s, x), step.ev.tool)

    @measured("assistant")
    def record_assistant(self, event: Assistant | Mapping[str, Any]) -> Verdict:
        """An assistant turn with text and no tool call: spend, echo and deadlock checks."""
        step = self._begin(event, Assistant)
        if step.p.cfg.mode == "off":
            return ALLOW
        x = self.reads.turn(step)
        if isinstance(x, Verdict):
            return x
        return self._commit(step, lambda s: decide_assistant(s, x), None)

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
        if sent_back(text):
            return ALLOW  # a refused stop's reason, sent back by the agent as a prompt: not the user's
        references = p.claims.references_in(text)
        said = p.user_turn(text)
        said_as = None if said is None else said_hash(self.fingerprints, said)
        return self._commit(step, lambda s: decide_user(s, references, said_as), None)

    @measured("final")
    def verify_final(self, event: Final | Mapping[str, Any]) -> Verdict:
        """Check a final answer before it reaches the user: every reference it cites must come
        from a tool result of this session, every completed action it claims needs a receipt."""
        step = self._begin(event, Final)
        cfg = step.p.cfg
        if cfg.mode_of(H.UNVERIFIED_CLAIM) == "off" and cfg.mode_of(H.DONE_CLAIM) == "off":
            return ALLOW
        escalation_id = self.reads.escalation_id()
        ev = step.ev
        return self._commit(step, lambda s: decide_final(s, step.p, ev.text, escalation_id, ev.continued), None)

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
        return self._pending(session, tenant, lost_too=True)

    def in_flight(self, session: str, *, tenant: str | None = None) -> dict[str, str]:
        """The calls of `awaiting_results` not yet taken as lost: let through within the last
        `duplicate_mutation.in_flight_s` (a call the user declined never answers)."""
        return self._pending(session, tenant, lost_too=False)

    def _pending(self, session: str, tenant: str | None, *, lost_too: bool) -> dict[str, str]:
        step = self._begin({"session": session, "tenant": tenant}, User)
        state = self.store.peek_session(step.key)
        if not isinstance(state, SessionState):
            return {}
        since = -math.inf if lost_too else step.now - step.p.cfg.duplicate_mutation.in_flight_s
        return {cid: p.facts.tool for cid, p in state.loops.pending.items() if p.ts >= since}

    def record_of(self, session: str, *, tenant: str | None = None) -> tuple[int, tuple[str, str] | None] | None:
        """(steps taken, halt: (heuristic, reason) or None) of the session as the store holds it
        now; None when it holds nothing of it. For a witness of the store (the hook daemon),
        which tells a record that went back from one that moved on."""
        step = self._begin({"session": session, "tenant": tenant}, User)
        state = self.store.peek_session(step.key)
        if not isinstance(state, SessionState):
            return None
        return state.spend.steps, state.halted

    def step_cost_usd(self, ev: ToolCall | Assistant) -> float:
        """The model spend of one step: its cost_usd, or its tokens at the configured price."""
        cfg = self.policies.get(ev.tenant, ev.feature, ev.agent).cfg
        return budget.step_cost_usd(cfg, ev.input_tokens, ev.output_tokens, ev.cost_usd, ev.model)

    def metrics(self) -> dict[str, int]:
        """Trips so far, as {"heuristic:severity": count}."""
        return self.reporter.trips()


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
