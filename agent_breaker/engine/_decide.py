"""The deciders: one pure function per event, of the session's state and what was read before
(the event as facts, the policy in force, the time, the shared breaker's permission, the tool
view). Each changes the state it is given and returns the state to write (None: write nothing)
and a `Decided`: the verdict and the effects (`_outputs`) to apply outside the session. A shared
store may run a decider more than once (a compare-and-set conflict), so it touches nothing but
the state it is given; ids come in with what was read."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from .. import heuristics as H
from .._canonical import Fingerprinter
from .._ledger import Refs
from .._outcomes import Outcome, finds_nothing, is_acknowledgement
from .._policy import CheckContext, Policy, judge, run_checks
from .._state import (
    FAILED,
    MAX_PENDING,
    MAX_SAID,
    MAX_TENANT_EFFECTS,
    CallFacts,
    ChurnView,
    Effects,
    Pending,
    SessionState,
    put_bounded,
)
from .._work import Did, Reading, Work, check, claims
from ..breaker import BreakerStateName, Permission
from ..breaker import core as breaker_core
from ..config import AgentBreakerConfig
from ..detectors import churn, conversation, failures, loops
from ..events import ToolResult
from ..governor import budget
from ..receipts import ReceiptKeys, empty_mutation_trip, is_empty_result, mint
from ..verdicts import ALLOW, ResultVerdict, Trip, Verdict, verdict_for
from ._facts import ResultFacts, echo_masked, effect_hash, effects_key_of, family_key, view_key_of
from ._outputs import (
    REMEMBER_MIXED,
    BreakerMoved,
    Decided,
    Escalate,
    RecordOutcome,
    ReleaseProbe,
    Report,
    Resume,
    UpdateFamily,
    UpdateView,
    ViewChange,
)

#: the prefix of the ids the engine gives calls made without one (paired by their tool)
UNNAMED_CALL = "~"

V = TypeVar("V", Verdict, ResultVerdict)


# ----------------------------------------------------------------- tool calls
@dataclass(slots=True)
class CallInput:
    """What the tool-call decider reads besides the session."""

    call_id: str | None
    result_promised: bool  # see ToolCall.result_promised
    f: CallFacts
    did: Did | None  # done_claim: the commands it runs and the files it edits
    p: Policy
    now: float
    tenant: str | None
    polling_tool: bool  # the tool is configured as a poll
    global_trip: Trip | None  # the tenant's shared spend window, over
    family_trip: Trip | None  # the call keeps failing in the family of sessions it belongs to
    schema_trip: Trip | None  # the arguments break the tool's schema
    view: ChurnView | None  # the tool's view (session_churn), while the session is in its opening
    effects: Effects | None  # the tenant's effects (duplicate_mutation), for a call that has an effect
    member: int  # the session as views name it
    tool_key: int
    bkey: str  # the breaker the call goes through
    breaker_on: bool
    churn_on: bool
    effects_on: bool  # duplicate_mutation follows the tenant's effects
    share_breakers: bool
    permission: Permission | None  # the shared breaker's answer
    confirmation: int  # the hash of the user's "yes" (duplicate_mutation asks for one)
    escalation_id: str | None  # the id a session-terminal trip freezes the session as (None: no human to go to)


def decide_tool_call(s: SessionState, x: CallInput) -> tuple[SessionState | None, Decided[Verdict]]:
    """May this tool call run?"""
    f, cfg, now, permission = x.f, x.p.cfg, x.now, x.permission
    decided = Decided(ALLOW)
    if s.escalation is not None:
        # frozen for a human: refused, and nothing of the call is kept
        decided.frozen = s.escalation
        decided.verdict = frozen_verdict(s, f.tool)
        return None, decided
    if x.call_id is not None and x.call_id in s.loops.pending:
        # a call id names one call: a second one under it would take the first's result
        reason = f"call_id {x.call_id!r} names a call of {s.loops.pending[x.call_id].facts.tool} still in flight"
        decided.verdict = Verdict(False, H.INVALID_EVENT, "block", "call", reason)
        return None, decided
    budget.account(s, cfg, now, f.tokens, f.cost_usd, f.tool)
    if f.mutating:
        s.ledger.attempt(f.tool)
    halted = halted_verdict(s, cfg, f.tool)
    if halted is not None:
        decided.verdict = halted
        return s, decided
    similar = loops.chain_similarity(s, f, cfg, now)
    polling = x.polling_tool or loops.polled_by_result(s, f)
    found = [x.global_trip, x.schema_trip, x.family_trip]
    block, warn = judge(cfg, found) if any(found) else (None, None)
    if block is None:
        block, call_warn = run_checks(x.p.call_checks, CheckContext(s, f, cfg, now, polling, similar))
        warn = warn or call_warn
        tripped = block or warn
        if tripped is not None and tripped.heuristic == H.DUPLICATE_MUTATION:
            # the agent is told to ask the user: the next "yes" is an answer again
            s.loops.said.pop(x.confirmation, None)
    if block is None and x.view is not None and s.loops.opening is not None:
        block, churn_warn = judge(cfg, [churn.check(x.view, f.values, f.tool, cfg, now)], s, call=True)
        warn = warn or churn_warn
    if block is None and x.effects is not None and f.effect is not None:
        block, effect_warn = judge(cfg, [done_elsewhere(x.effects, f, x.member, cfg, now)], s, call=True)
        warn = warn or effect_warn
    granted, own_probe, whose = permission, None, "every session"
    if block is None and x.breaker_on and (permission is None or (permission.allowed and permission.probe is None)):
        # the session's own breaker: its failures alone open it, for it alone (a shared one
        # waits for breaker.min_sessions sessions). Asked only when the shared one lets the
        # call through unprobed, so neither holds a probe slot for nothing.
        own = breaker_core.acquire(s.breaker(x.bkey), cfg.breaker, now)
        own_probe = own.probe
        if own.transition is not None and not x.share_breakers:
            decided.effects.append(BreakerMoved(own.transition, own.transition.dst))  # shared: the tool's breaker did not move
        if permission is None or breaker_trip(permission, f.tool) is None:
            granted, whose = own, "this session"
    if block is None and granted is not None:
        trip = breaker_trip(granted, f.tool, whose)
        if trip is not None:
            # a metrics-only breaker lets the call through and only reports
            if granted.allowed is False and cfg.mode_of(H.CIRCUIT_OPEN) == "enforce":
                block = trip
            else:
                warn = warn or trip
    if block is not None:
        decided.verdict = settle(s, decided, block, warn, f.tool, escalation_id=x.escalation_id)
        return s, decided
    call_id = x.call_id
    if call_id is None:
        s.loops.auto_ids += 1
        call_id = f"{UNNAMED_CALL}{s.loops.auto_ids}"
    if len(s.loops.pending) >= MAX_PENDING and not forget_lost(s, now - cfg.duplicate_mutation.in_flight_s):
        if x.result_promised:
            # a sender that reports every result: never evict a call in flight, 64 decoys would
            # push a failing call out, and its failure would never count
            reason = f"{MAX_PENDING} calls of this session are in flight; report their results first"
            decided.verdict = Verdict(False, H.INVALID_EVENT, "block", "call", reason)
            return s, decided
        # a sender that may never report it (a coding agent's hooks): the oldest is forgotten,
        # neither evidence nor a reason to refuse this one
        del s.loops.pending[next(iter(s.loops.pending))]
    probe = permission.probe if permission is not None else None
    s.loops.interrupted = False  # the agent went on by itself: no user took the turn
    s.loops.pending[call_id] = Pending(
        f, call_id, x.bkey, probe, similar.text, similar.shape, loops.record_call(s, f, cfg), now, own_probe
    )
    opening = s.loops.opening
    if opening is not None and len(opening) < cfg.session_churn.opening_calls:
        opening.append(x.tool_key)
    elif opening is not None:
        # past its opening: its calls leave the chains of the tools it opened with
        if x.churn_on:
            leave = views_of(churn.leave)
            decided.effects.extend(UpdateView(view_key_of(x.tenant, tool_key), leave) for tool_key in dict.fromkeys(opening))
        s.loops.opening = None
    if s.loops.opening is None:
        decided.effects.append(REMEMBER_MIXED)
    if f.effect is not None and x.effects_on:
        decided.effects.append(UpdateView(effects_key_of(x.tenant), effect_change(f, now, done=None)))
    decided.verdict = settle(s, decided, None, warn, f.tool, escalation_id=x.escalation_id, call_id=call_id)
    if decided.verdict.heuristic is not None:
        s.loops.pending[call_id].warning = decided.verdict.observation
    if x.did is not None:
        s.work = s.work or Work()
        s.work.await_call(call_id, x.did)
    return s, decided


def family_change(key: str, f: CallFacts, heard: loops.Heard, out: Outcome, cfg: AgentBreakerConfig) -> UpdateFamily:
    """A sub-agent's result as its family's failing streaks take it (recorded in the parent's
    session `key`, which every session of the family reads)."""
    outcome = FAILED if out.dependency or heard.failure is None else heard.failure
    return UpdateFamily(key, f, cfg, out.failed, out.dependency, outcome, heard)


def record_in_family(parent: SessionState, u: UpdateFamily) -> None:
    """Apply a sub-agent's result to its family's session (the parent's)."""
    heard = u.heard
    failures.record(
        parent,
        u.facts,
        u.cfg,
        failed=u.failed,
        transient=u.transient,
        out=u.outcome,
        words=heard.failure_words,
        shape=heard.failure_shape,
        told=heard.failure_values,
        counts=heard.failure_counts,
    )


def views_of(change: Callable[[ChurnView, int], bool | None]) -> ViewChange:
    """A change of a tool view as a change of its pseudo-session."""

    def changed(state: SessionState, member: int) -> bool | None:
        if state.churn is None:
            state.churn = ChurnView()
        return change(state.churn, member)

    return changed


def done_elsewhere(effects: Effects, f: CallFacts, member: int, cfg: AgentBreakerConfig, now: float) -> Trip | None:
    """The call's action in flight, or done within the window, in another session of the tenant."""
    assert f.effect is not None
    # sessions replayed out of order have no common clock: a gap either way is a gap
    seen = effects.inflight.get(f.effect)
    if seen is not None and seen[0] != member and abs(now - seen[1]) <= cfg.duplicate_mutation.in_flight_s:
        return loops.duplicate_in_flight(f, abs(now - seen[1]), other_text=seen[2] != f.effect_text, where="another session")
    seen = effects.done.get(f.effect)
    if seen is not None and seen[0] != member and abs(now - seen[1]) <= cfg.duplicate_mutation.window_s:
        since = abs(now - seen[1])
        return loops.duplicate_done(f, since, cfg, other_text=seen[2] != f.effect_text, where=" in another session")
    return None


def effect_change(f: CallFacts, now: float, *, done: bool | None) -> ViewChange:
    """A call's action in the tenant's effects: in flight (`done` None), done (True), or failed
    (False: no longer in flight)."""
    effect = f.effect
    assert effect is not None

    def change(state: SessionState, member: int) -> bool:
        if state.effects is None:
            state.effects = Effects()
        inflight = state.effects.inflight
        if done is None:
            put_bounded(inflight, effect, (member, now, f.effect_text), MAX_TENANT_EFFECTS)
            return True
        ours = inflight.get(effect)
        if ours is not None and ours[0] == member:
            del inflight[effect]
        if done:
            state.effects.done.pop(effect, None)  # the newest last: the oldest goes first at the cap
            put_bounded(state.effects.done, effect, (member, now, f.effect_text), MAX_TENANT_EFFECTS)
        return done or ours is not None

    return change


def decide_model_call(s: SessionState, p: Policy, now: float) -> tuple[None, Decided[Verdict]]:
    """May the session pay for one more model call? Refused when it is frozen, halted, or the
    step the call would produce is over a session ceiling. Nothing is written."""
    decided = Decided(ALLOW)
    if s.escalation is not None:
        decided.frozen = s.escalation
        decided.verdict = frozen_verdict(s, None)
        return None, decided
    halted = halted_verdict(s, p.cfg, None)
    if halted is not None:
        decided.verdict = halted
        return None, decided
    # the ceilings as the call's step will meet them: one more step, its spend not known yet
    upcoming = replace(s, spend=replace(s.spend, steps=s.spend.steps + 1))
    block, _ = run_checks(p.session_limits, CheckContext(upcoming, None, p.cfg, now, False, loops.NOT_SIMILAR))
    if block is not None:
        decided.verdict = verdict_for(block, "block", None)
    return None, decided


# ----------------------------------------------------------------- tool results
@dataclass(slots=True)
class ResultInput:
    """What the tool-result decider reads besides the session."""

    ev: ToolResult
    p: Policy
    now: float
    out: Outcome  # the result classified: failed, whose fault, slow
    r: ResultFacts
    result_trips: list[Trip]  # the result breaks its schema (schema_violation, schema_drift)
    polling: bool
    churn_on: bool
    effects_on: bool  # duplicate_mutation follows the tenant's effects
    share_breakers: bool
    fp: Fingerprinter  # echoes are masked against the call's own facts, known only from the state
    receipt_keys: ReceiptKeys | None
    escalation_id: str | None
    output: Reading | None  # done_claim: what a command's output says of its run (None: not a command's)


#: the placeholder verdict of a result until its fields are known (a frozen dataclass costs ~1 us to build)
_ACCEPTED = ResultVerdict(True)


def decide_tool_result(s: SessionState, x: ResultInput) -> tuple[SessionState | None, Decided[ResultVerdict]]:
    """Record what a tool returned; mint a receipt for a mutating tool's success."""
    ev, out, r, cfg, now, fp = x.ev, x.out, x.r, x.p.cfg, x.now, x.fp
    pending = pop_pending(s, ev)
    if pending is None:
        # a result of a call the guard never let through (or already recorded) counts toward
        # nothing and mints nothing: the session is not even written
        which = f"with call_id {ev.call_id!r}" if ev.call_id is not None else "without a call_id"
        reason = f"no call of {ev.tool} {which} was allowed in this session and awaits its result"
        return None, Decided(ResultVerdict(False, H.INVALID_EVENT, reason))
    decided = Decided(_ACCEPTED)
    s.loops.answered = max(s.loops.answered, pending.history_index)
    heuristic: str | None = None
    breaker_state: str | None = None
    reason = ""
    for trip in x.result_trips:
        decided.effects.append(Report(trip, "block" if trip.heuristic == H.SCHEMA_VIOLATION and out.failed else "warn"))
        heuristic, reason = trip.heuristic, trip.reason
    f = pending.facts
    if s.work is not None:
        s.work.record(pending.call_id, out.failed, ev.error, x.output)
    if ev.mutating and not f.mutating:
        f.mutating = True  # the result says so (the facts were taken out of the state: a copy)
    if r.references is not None:
        s.ledger.observe(r.references)
    if x.share_breakers and not out.breaker_ignores:
        decided.effects.append(RecordOutcome(pending.breaker_key, pending.probe, out))
    elif x.share_breakers and pending.probe is not None:  # the probe proved nothing: its slot is free for another
        decided.effects.append(ReleaseProbe(pending.breaker_key, pending.probe))
    st = s.breaker(pending.breaker_key)
    # a breaker judges the dependency: the call's own failures count neither way
    if out.breaker_ignores:
        if pending.own_probe is not None:
            breaker_core.release(st, pending.own_probe)
    else:
        moved = breaker_core.record(st, cfg.breaker, now, failed=out.dependency, slow=out.slow, probe=pending.own_probe)
        if moved is not None and not x.share_breakers:
            decided.effects.append(BreakerMoved(moved, moved.dst))
    if not x.share_breakers:
        breaker_state = st.state.value
    decided.verdict = ResultVerdict(
        True, heuristic, reason, failed=out.failed, breaker_state=breaker_state, warning=pending.warning
    )
    if s.loops.opening is not None and x.churn_on and out.failed and not out.dependency and r.failure is not None:
        # a failure of the call's own in the session's opening (an outage is the breaker's)
        failure = r.failure

        def record(view: ChurnView, member: int) -> None:
            churn.record_outcome(view, member, f.values, failure, True, now, cfg)

        decided.effects.append(UpdateView(view_key_of(ev.tenant, r.tool_key), views_of(record)))
    if f.effect is not None and x.effects_on:
        decided.effects.append(UpdateView(effects_key_of(ev.tenant), effect_change(f, now, done=not out.failed)))
    # the answer (to compare with the tool's answers to other calls) and the news (whether the
    # tool said it before), an echo of the call's own argument masked in both
    echoed = echo_masked(fp, x.p, r.timed, ev.result, f)
    answer = r.timed_hash if echoed == r.timed else fp.hash64(echoed)
    echoed_masked = r.masked if echoed == r.timed else echo_masked(fp, x.p, r.masked, ev.result, f)
    news = r.repeat_hash if echoed_masked == r.masked else fp.hash64(echoed_masked)
    effect = effect_hash(fp, r.masked) if f.effect is not None and not out.failed else None
    ack = is_acknowledgement(ev.result)
    heard = loops.Heard(
        r.repeat_hash,
        answer,
        r.tool_key,
        r.failure,
        r.failure_shape,
        r.failure_words,
        r.failure_counts,
        r.failure_values,
        ack,
        effect,
        news,
        finds_nothing(ev.result),
    )
    if loops.record_result(s, pending, heard, out, r.blank, x.polling, now, cfg):
        # new information: assistant turns start a new stretch, and so do this session's own
        # breaker streaks
        s.turns.clear()
        s.restart_breaker_streaks()
    family = family_key(ev)
    if family is not None:
        decided.effects.append(family_change(family, pending.facts, heard, out, cfg))
    if out.interrupted:
        s.loops.interrupted = True
    if out.failed or not f.mutating:
        return s, decided
    s.ledger.attempt(f.tool)
    _receipt(s, decided, x, pending)
    return s, decided


def _receipt(s: SessionState, decided: Decided[ResultVerdict], x: ResultInput, pending: Pending) -> None:
    """A mutating tool's success: a receipt, unless its empty payload is refused; the
    references of a receipted result may be cited as confirmations."""
    f = pending.facts
    anomaly = None
    if is_empty_result(x.ev.result):
        block, warn = judge(x.p.cfg, [empty_mutation_trip(f.tool)])
        anomaly = settle(s, decided, block, warn, f.tool, escalation_id=x.escalation_id)
        if block is not None:  # enforce: no receipt for an action that may not have happened
            decided.verdict = replace(decided.verdict, accepted=False, heuristic=anomaly.heuristic, reason=anomaly.reason)
            return
    receipt = None
    if x.receipt_keys is not None:
        receipt = mint(
            x.receipt_keys,
            tenant=s.tenant,
            session=s.sid,
            call_id=pending.call_id,
            tool=f.tool,
            args_hash=f.key,
            result_hash=x.r.canonical_hash,
            ts=x.now,
        )
        s.ledger.add(receipt, f.tool)
        if x.r.references is not None:
            s.ledger.confirm(x.r.references)
    if anomaly is not None and anomaly.heuristic is not None:  # observed: reported, not withheld
        decided.verdict = replace(decided.verdict, heuristic=anomaly.heuristic, reason=anomaly.reason, receipt=receipt)
    else:
        decided.verdict = replace(decided.verdict, receipt=receipt)


# ----------------------------------------------------------------- turns
@dataclass(slots=True)
class TurnInput:
    """What the assistant-turn decider reads besides the session."""

    p: Policy
    now: float
    tokens: int
    cost_usd: float
    fingerprint: tuple[int, ...]  # the turn's token hashes
    agent: int  # keyed 32-bit hash of the agent's name
    global_trip: Trip | None
    escalation_id: str | None


def decide_assistant(s: SessionState, x: TurnInput) -> tuple[SessionState, Decided[Verdict]]:
    """An assistant turn with text and no tool call: spend, echo and deadlock checks."""
    cfg, now = x.p.cfg, x.now
    decided = Decided(ALLOW)
    budget.account(s, cfg, now, x.tokens, x.cost_usd, None)
    halted = halted_verdict(s, cfg, None)
    if halted is not None:
        decided.verdict = halted
        return s, decided
    turn = conversation.record_turn(s, x.agent, x.fingerprint, cfg)
    block, warn = judge(cfg, [x.global_trip]) if x.global_trip is not None else (None, None)
    if block is None:
        block, limit_warn = run_checks(x.p.session_limits, CheckContext(s, None, cfg, now, False, loops.NOT_SIMILAR))
        warn = warn or limit_warn
    if block is None:
        block, turn_warn = judge(cfg, list[Trip | None](conversation.check_turn(turn, cfg)), s)
        warn = warn or turn_warn
    decided.verdict = settle(s, decided, block, warn, None, escalation_id=x.escalation_id)
    return s, decided


def decide_user(s: SessionState, references: Refs, said: int | None) -> tuple[SessionState, Decided[Verdict]]:
    """A user turn. With new information (`said`: the hash of what it says, None for a nudge or
    an auto-reply) loop streaks start over and loop halts are lifted; what the user already said
    restarts nothing."""
    s.ledger.observe(references)  # the user's own references may be quoted back
    decided = Decided(ALLOW)
    if s.work is not None:
        s.work.refused, s.work.said = 0, None  # the user's turn: the agent's stops may be refused anew
    # after stopping a call, whatever the user says ("continue" too) is theirs to decide: a
    # harness only hands the turn back to them; an agent's own retries never reach here
    if s.loops.interrupted or (said is not None and said not in s.loops.said):
        s.loops.interrupted = False
        s.reset_streaks()
        if s.halted is not None and s.halted[0] in H.LOOPS:  # budget halts stay
            s.halted = None
            # the user is a human too: what they said resumes the escalation of a loop
            if s.escalation is not None:
                decided.effects.append(Resume(s.escalation))
            s.escalation = None
        if said is not None:
            put_bounded(s.loops.said, said, None, MAX_SAID)
    return s, decided


def decide_final(
    s: SessionState, p: Policy, text: str, escalation_id: str | None, continued: bool | None = None
) -> tuple[SessionState | None, Decided[Verdict]]:
    """A final answer: every reference it cites must come from a tool result of this session,
    every completed action it claims needs a receipt, and every claim of work done (done_claim)
    the session's tool outcomes. A frozen session's answers are still checked (an honest one
    may reach the user); a rejected one escalates nothing more. A stop refused for done_claim
    sends the agent back to work: at most done_claim.max_refusals_per_turn times a turn, then
    the claim is let through as a warning (recorded; the user is told)."""
    decided = Decided(ALLOW)
    trips = [p.claims.check(text, s.ledger)] if p.cfg.mode_of(H.UNVERIFIED_CLAIM) != "off" else []
    work, counted = s.work, False
    if p.cfg.mode_of(H.DONE_CLAIM) != "off":
        if continued is False and work is not None and work.refused:
            work.refused, counted = 0, True  # the agent's word: a new turn
        said = text if work is None else work.unsaid(text, p.named)
        found = check(claims(said), work or Work(), p.named)
        if found is not None:
            # the reason says what to do: a final answer's verdict event carries no observation
            trip = Trip(H.DONE_CLAIM, "session", f"{found[0]}. {found[1]}", "")
            cap = p.cfg.done_claim.max_refusals_per_turn
            if (work.refused if work is not None else 0) >= cap:
                trip = replace(trip, reason=f"{found[0]} (let through: {cap} stops refused this turn)")
                decided.verdict = settle(s, decided, None, trip, None, escalation_id=None)
                return s if counted else None, decided
            trips.append(trip)
    block, warn = judge(p.cfg, trips)
    decided.verdict = settle(s, decided, block, warn, None, escalation_id=escalation_id)
    if block is not None and block.heuristic == H.DONE_CLAIM:
        s.work = work or Work()
        s.work.refused += 1
        s.work.said = (len(text), p.named(text))
        counted = True
    # reading an answer changes no state, unless it froze the session for a human or counted a
    # refused stop
    froze = any(isinstance(e, Escalate) for e in decided.effects)
    return (s if froze or counted else None), decided


# ----------------------------------------------------------------- shared by the deciders
def settle(
    s: SessionState,
    decided: Decided[V],
    block: Trip | None,
    warn: Trip | None,
    tool: str | None,
    *,
    escalation_id: str | None,
    call_id: str | None = None,
) -> Verdict:
    """Turn the checks' outcome into a verdict; a session-terminal block halts the session,
    and one that goes to a human freezes it in the same update, as `escalation_id` (the record
    follows it)."""
    if block is not None:
        if warn is not None and warn.advisory:
            decided.effects.append(Report(warn, "warn"))  # spent beside the refusal: counted and reported
        if block.heuristic in H.SESSION_TERMINAL:
            s.halted = (block.heuristic, block.reason)
        if block.heuristic in H.ESCALATING and s.escalation is None and escalation_id is not None:
            s.escalation = escalation_id
            decided.effects.append(Escalate(block, escalation_id))
        decided.effects.append(Report(block, "block"))
        return verdict_for(block, "block", tool)
    if warn is not None:
        decided.effects.append(Report(warn, "warn"))
        return verdict_for(warn, "warn", tool, call_id)
    return ALLOW if call_id is None else Verdict(True, call_id=call_id)


def frozen_verdict(s: SessionState, tool: str | None) -> Verdict:
    handed = f"handed to a human ({s.escalation}); every call waits for their decision"
    if s.halted is not None:
        heuristic, reason = s.halted[0], f"session halted earlier: {s.halted[1]}; {handed}"
    else:
        heuristic, reason = H.ESCALATED, f"session {handed}"
    trip = Trip(heuristic, "session", reason, "Stop and tell the user a person is looking into it.")
    return replace(verdict_for(trip, "block", tool), route={"tier": "escalate", "escalation_id": s.escalation})


def halted_verdict(s: SessionState, cfg: AgentBreakerConfig, tool: str | None) -> Verdict | None:
    if s.halted is None:
        return None
    heuristic, reason = s.halted
    if cfg.mode_of(heuristic) != "enforce":
        return None
    # a coding agent's user is at the keyboard: the agent stops this approach and hands back,
    # whatever it was doing (a user turn with news lifts a loop's halt)
    instruction = "Stop this approach: tell the user what failed and what you tried, and wait for their answer."
    return verdict_for(Trip(heuristic, "session", f"session halted earlier: {reason}", instruction), "block", tool)


def breaker_trip(permission: Permission, tool: str, whose: str = "every session") -> Trip | None:
    """The trip of a breaker that refuses (or would): `whose` breaker it is, the tool's shared
    one ("every session") or the session's own ("this session")."""
    if permission.allowed and not permission.would_refuse:
        return None
    state = permission.state.value
    if permission.state is BreakerStateName.HALF_OPEN:
        heuristic, reason = H.CIRCUIT_HALF_OPEN, f"{tool} is recovering: its probe calls are in flight"
        instruction = f"Wait for {tool} to recover, or use another tool."
    else:
        heuristic, reason = H.CIRCUIT_OPEN, f"{tool} is failing for {whose}; its circuit breaker is {state}"
        instruction = f"Do not call {tool} now. Use another tool, or tell the user the service is unavailable."
    return Trip(heuristic, "tool", reason, instruction, {"state": state}, permission.retry_after_s)


def schema_violation(tool: str, what: str, problem: str) -> Trip:
    """Arguments (before the call) or a result (after it) that break the tool's schema: the
    observation names the field and what is wrong, so the agent can fix the call."""
    fix = (
        f"Fix the arguments and call {tool} again: {problem}."
        if what == "arguments"
        else f"{tool} returned a result that does not meet its schema: do not rely on it; try again or use another tool."
    )
    return Trip(H.SCHEMA_VIOLATION, "call", f"{tool} {what}: {problem}", fix, {"part": what})


def forget_lost(s: SessionState, before: float) -> bool:
    """Forget the calls let through before `before` that never answered (taken as lost);
    True if any was."""
    lost = [cid for cid, p in s.loops.pending.items() if p.ts < before]
    for cid in lost:
        del s.loops.pending[cid]
    return bool(lost)


def pop_pending(s: SessionState, ev: ToolResult) -> Pending | None:
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
