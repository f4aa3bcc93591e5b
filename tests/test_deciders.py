"""The deciders alone (issue 25): pure functions of a session's state and what was read of an
event, run here on a bare SessionState with no engine, store or clock."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from agent_breaker._canonical import Fingerprinter
from agent_breaker._outcomes import classify
from agent_breaker._policy import Policies, Policy
from agent_breaker._state import SessionState
from agent_breaker.breaker import BreakerStateName, Permission
from agent_breaker.config import parse_config
from agent_breaker.engine._decide import (
    UNNAMED_CALL,
    CallInput,
    ResultInput,
    TurnInput,
    decide_assistant,
    decide_final,
    decide_model_call,
    decide_tool_call,
    decide_tool_result,
    decide_user,
)
from agent_breaker.engine._facts import TOOL, call_facts, result_facts
from agent_breaker.engine._outputs import Escalate, Report, Resume
from agent_breaker.events import ToolCall, ToolResult
from agent_breaker.receipts import ReceiptKeys
from agent_breaker.store.codec import encode

FP = Fingerprinter(b"k" * 32)
NOW = 1000.0


def policy(settings: dict[str, Any] | None = None) -> Policy:
    return Policies(parse_config(settings or {}), FP, observe=False).get(None, None, None)


def call_input(p: Policy, tool: str = "search", args: dict[str, Any] | None = None, **kw: Any) -> CallInput:
    ev = ToolCall(session="s", tool=tool, args=args or {"q": "x"}, **kw)
    f = call_facts(FP, ev, p)
    return CallInput(
        call_id=ev.call_id,
        result_promised=ev.result_promised,
        f=f,
        did=p.commands.did(ev.tool, ev.args, p.named),
        p=p,
        now=NOW,
        tenant=None,
        polling_tool=False,
        global_trip=None,
        family_trip=None,
        schema_trip=None,
        view=None,
        effects=None,
        member=0,
        tool_key=FP.labeled(TOOL, tool),
        bkey=tool,
        breaker_on=True,
        churn_on=False,
        effects_on=False,
        share_breakers=True,
        permission=None,
        confirmation=0,
        escalation_id=None,
    )


def result_input(p: Policy, tool: str = "search", result: Any = None, **kw: Any) -> ResultInput:
    ev = ToolResult(session="s", tool=tool, ok=kw.pop("ok", True), result=result, **kw)
    out = classify(ev, p.cfg, p.in_progress, None)
    return ResultInput(
        ev=ev,
        p=p,
        now=NOW,
        out=out,
        r=result_facts(FP, ev, p, out),
        result_trips=[],
        polling=False,
        churn_on=False,
        effects_on=False,
        share_breakers=True,
        fp=FP,
        receipt_keys=None,
        escalation_id=None,
        output=None,
    )


def test_a_fresh_call_is_allowed_and_awaits_its_result():
    s = SessionState("s")
    new, decided = decide_tool_call(s, call_input(policy()))
    assert new is s and decided.verdict.allowed and decided.verdict.call_id == f"{UNNAMED_CALL}1"
    assert list(s.loops.pending) == [f"{UNNAMED_CALL}1"] and s.spend.steps == 1


def test_a_call_id_in_flight_is_refused_and_nothing_is_written():
    s = SessionState("s")
    decide_tool_call(s, call_input(policy(), call_id="c1"))
    new, decided = decide_tool_call(s, call_input(policy(), call_id="c1"))
    assert new is None and (decided.verdict.allowed, decided.verdict.heuristic) == (False, "invalid_event")


def test_a_frozen_session_refuses_and_asks_whether_the_freeze_still_holds():
    s = SessionState("s", escalation="esc-1")
    new, decided = decide_tool_call(s, call_input(policy()))
    assert new is None and decided.frozen == "esc-1" and not decided.verdict.allowed
    assert decided.verdict.route == {"tier": "escalate", "escalation_id": "esc-1"}
    new, decided = decide_model_call(s, policy(), NOW)
    assert new is None and decided.frozen == "esc-1"


def test_a_shared_breaker_that_refuses_blocks_and_a_metrics_only_one_warns():
    p = policy()
    refused = Permission(False, BreakerStateName.OPEN, retry_after_s=5.0)
    _, decided = decide_tool_call(SessionState("s"), replace(call_input(p), permission=refused))
    assert (decided.verdict.allowed, decided.verdict.heuristic) == (False, "circuit_open")
    metrics_only = Permission(True, BreakerStateName.METRICS_ONLY, would_refuse=True)
    _, decided = decide_tool_call(SessionState("s"), replace(call_input(p), permission=metrics_only))
    assert (decided.verdict.allowed, decided.verdict.heuristic) == (True, "circuit_open")


def test_identical_failures_warn_then_cut_and_the_cut_halts_the_session():
    p = policy()
    s = SessionState("s")
    verdicts = []
    for i in range(6):
        _, decided = decide_tool_call(s, replace(call_input(p), now=NOW + i))
        verdicts.append((decided.verdict.allowed, decided.verdict.heuristic))
        if not decided.verdict.allowed:
            break
        r = replace(result_input(p, ok=False, error="boom"), now=NOW + i)
        decide_tool_result(s, r)
    assert verdicts[-1] == (False, "identical_failure")
    assert (True, "identical_failure") in verdicts  # warned first
    assert s.halted is not None and s.halted[0] == "identical_failure"
    _, decided = decide_model_call(s, p, NOW + 10)
    assert (decided.verdict.allowed, decided.verdict.heuristic) == (False, "identical_failure")


def test_a_result_of_no_call_in_flight_is_refused_and_not_written():
    new, decided = decide_tool_result(SessionState("s"), result_input(policy()))
    assert new is None and (decided.verdict.accepted, decided.verdict.heuristic) == (False, "invalid_event")


def test_a_mutating_success_is_receipted_and_its_call_leaves_the_flight():
    p = policy()
    s = SessionState("s")
    decide_tool_call(s, call_input(p, "pay", {"to": "bob", "usd": 5}, mutating=True, call_id="c1"))
    x = replace(result_input(p, "pay", {"status": "paid"}, call_id="c1"), receipt_keys=ReceiptKeys.ephemeral())
    new, decided = decide_tool_result(s, x)
    assert new is s and decided.verdict.accepted and decided.verdict.receipt is not None
    assert not s.loops.pending


def test_the_model_call_decider_counts_the_upcoming_step_and_writes_nothing():
    p = policy({"step_limit": {"max_steps": 2}})
    s = SessionState("s")
    for _ in range(2):
        decide_tool_call(s, call_input(p, args={"q": str(s.spend.steps)}))
    new, decided = decide_model_call(s, p, NOW)
    assert new is None and (decided.verdict.allowed, decided.verdict.heuristic) == (False, "step_limit")
    assert s.spend.steps == 2


def test_an_assistant_turn_spends_and_over_the_ceiling_halts():
    p = policy({"budget": {"max_tokens": 10_000}})
    s = SessionState("s")
    x = TurnInput(p, NOW, 4000, 0.0, (1, 2, 3), 7, None, False)
    _, decided = decide_assistant(s, x)
    assert decided.verdict.allowed and s.spend.tokens == 4000
    _, decided = decide_assistant(s, replace(x, fingerprint=(4, 5, 6)))
    assert (decided.verdict.allowed, decided.verdict.heuristic) == (False, "token_budget")
    assert s.halted is not None and s.halted[0] == "token_budget"


def test_a_user_turn_with_news_lifts_a_loop_halt_and_resumes_its_escalation_a_nudge_does_not():
    p = policy()
    s = SessionState("s", escalation="esc-1")
    s.halted = ("identical_failure", "looped")
    refs = p.claims.references_in("hello")
    _, decided = decide_user(s, refs, None)  # a nudge
    assert s.halted is not None and decided.effects == []
    _, decided = decide_user(s, refs, 42)
    assert s.halted is None and decided.effects == [Resume("esc-1")] and s.escalation is None
    s.halted = ("token_budget", "spent")  # a budget halt stays
    decide_user(s, refs, 43)
    assert s.halted == ("token_budget", "spent")


@pytest.mark.parametrize("escalation_id", [None, "esc-7"])
def test_an_unreceipted_claim_is_rejected_and_escalates_only_when_asked(escalation_id):
    p = policy()
    s = SessionState("s")
    new, decided = decide_final(s, p, "Done. Your reference is TX-99482.", escalation_id)
    assert (decided.verdict.allowed, decided.verdict.heuristic) == (False, "unverified_claim")
    escalates = escalation_id is not None
    assert (new is s) is escalates and s.escalation == escalation_id  # frozen as the id it was given
    assert [type(e) for e in decided.effects] == ([Escalate, Report] if escalates else [Report])


def test_a_decider_run_again_on_the_same_state_decides_the_same():
    # a shared store reruns a decider after a compare-and-set conflict, on the state it read again
    p = policy()
    x = call_input(p, call_id="c1")
    first, second = SessionState("s"), SessionState("s")
    _, a = decide_tool_call(first, x)
    _, b = decide_tool_call(second, x)
    assert a.verdict == b.verdict and encode(first) == encode(second)
