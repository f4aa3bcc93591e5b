"""Trusted in enforce mode: the graduated answer, good work left alone, and model-written text
that does not talk the guard out of a cut. Each pattern in several shapes, on every store."""

from __future__ import annotations

import random
import string
import uuid

import pytest
from conftest import call, final, result, run, user

from agent_breaker._replay import replay_engine, replay_lines
from agent_breaker.config import ConfigError, parse_config

FAILED_TRANSFER = {"to": "ACC-2291", "amount": 500}


def verdicts_of(vs):
    return ["-" if v.heuristic is None else ("warn " if v.allowed else "cut ") + v.heuristic for v in vs]


def cut_at(vs) -> int | None:
    """The 1-based call the guard refused first, or None."""
    return next((i for i, v in enumerate(vs, 1) if not v.allowed), None)


# ----------------------------------------------------------------------------- the graduated answer


def test_a_loop_is_warned_first_then_cut_when_it_goes_on(engine, clock, incidents):
    args = {"query": "SELECT COUNT(*) FROM orders"}
    vs = [run(engine, clock, "search_db", args, False, None) for _ in range(5)]
    assert verdicts_of(vs) == ["-", "-", "-", "warn identical_failure", "cut identical_failure"]
    warned = vs[3]
    assert warned.advisory and warned.severity == "warn" and warned.observation["warning"] == "IDENTICAL_FAILURE"
    assert "refused" in warned.observation["actionable_instruction"]
    assert not vs[4].advisory and vs[4].observation["error"] == "IDENTICAL_FAILURE"
    assert [(i.severity, i.advisory) for i in incidents] == [("warn", True), ("block", False)]
    assert engine.metrics() == {"identical_failure:block": 1, "identical_failure:warn": 1}


def test_a_pattern_that_stops_right_after_its_warning_is_no_loop(engine, clock):
    args = {"command": "cat build/report.txt"}
    for _ in range(3):  # the build has not written it yet
        run(engine, clock, "execute_bash", args, False, None, error="cat: build/report.txt: No such file or directory")
    warned = run(engine, clock, "execute_bash", args, True, {"output": "42 passed"})
    assert warned.allowed and warned.advisory
    after = [run(engine, clock, "execute_bash", {"command": f"cat build/part{i}.txt"}, True, {"output": i}) for i in range(5)]
    assert all(v.allowed and v.heuristic is None for v in after)


@pytest.mark.parametrize("shape", ["oscillation", "same_answer", "identical_call"])
def test_each_graduated_heuristic_warns_before_it_cuts(engine, clock, shape):
    if shape == "oscillation":
        vs = []
        for _ in range(4):
            vs.append(run(engine, clock, "read_file", {"path": "a.py"}, True, {"text": "A"}))
            vs.append(run(engine, clock, "read_file", {"path": "b.py"}, True, {"text": "B"}))
    elif shape == "same_answer":
        vs = [run(engine, clock, "kb_search", {"q": f"refund {w}"}, True, {"hits": []}) for w in "abcdefgh"]
    else:
        vs = [run(engine, clock, "get_report", {"id": 7}, True, {"rows": 3}) for _ in range(8)]
    names = verdicts_of(vs)
    first = next(i for i, n in enumerate(names) if n != "-")
    assert names[first] == f"warn {shape}" and names[first + 1] == f"cut {shape}", names


def test_warn_first_zero_cuts_at_once(make_engine, clock):
    engine = make_engine({"warn_first": {"identical_failure": 0}})
    vs = [run(engine, clock, "search_db", {"q": 1}, False, None) for _ in range(4)]
    assert verdicts_of(vs)[-1] == "cut identical_failure"


def test_deterministic_checks_cut_at_once(make_engine, clock):
    engine = make_engine({"step_limit": {"max_steps": 3}})
    vs = [run(engine, clock, "read", {"n": i}, True, {"n": i}) for i in range(4)]
    assert verdicts_of(vs) == ["-", "-", "-", "cut step_limit"]


@pytest.mark.parametrize(
    "warn_first,message",
    [
        ({"token_budget": 1}, "cut at once or do not exist"),
        ({"unverified_claim": 1}, "cut at once or do not exist"),
        ({"no_such_heuristic": 1}, "cut at once or do not exist"),
        ({"oscillation": -1}, "from 0 to 10"),
        ({"oscillation": 11}, "from 0 to 10"),
    ],
)
def test_warn_first_refuses_what_cannot_warn_naming_it(warn_first, message):
    with pytest.raises(ConfigError, match=message):
        parse_config({"warn_first": warn_first})


def test_an_override_may_change_warn_first_for_one_tenant(make_engine, clock):
    engine = make_engine({"overrides": [{"tenant": "bank", "settings": {"warn_first": {"identical_failure": 0}}}]})
    strict = [run(engine, clock, "pay", {"q": 1}, False, None, session="a", tenant="bank") for _ in range(4)]
    lenient = [run(engine, clock, "pay", {"q": 1}, False, None, session="b", tenant="shop") for _ in range(4)]
    assert verdicts_of(strict)[-1] == "cut identical_failure" and verdicts_of(lenient)[-1] == "warn identical_failure"


def test_replay_counts_warnings_apart_from_trips():
    lines = []
    for i in range(4):
        lines.append(f'{{"session":"s","type":"tool_call","tool":"t","args":{{"q":1}},"call_id":"c{i}","ts":{i}}}')
        lines.append(f'{{"session":"s","type":"tool_result","tool":"t","call_id":"c{i}","ok":false,"ts":{i}.5}}')
    rows, _ = replay_lines(lines, replay_engine(parse_config(None)))
    assert rows[0]["tripped"] is False and rows[0]["warnings"] == 1 and rows[0]["warned_by"] == {"identical_failure": 1}
    assert rows[0]["warn_event"] == 7
    observed, _ = replay_lines(lines, replay_engine(parse_config(None), observe=True))
    assert observed[0]["tripped"] is False and observed[0]["warnings"] == 1


# ----------------------------------------------------------------------------- references in prose full of numbers


def receipted_user(engine, clock):
    run(
        engine,
        clock,
        "get_user_details",
        {"user_id": "mia_li_3668"},
        True,
        {
            "address": {"address1": "1801 Guadalupe St", "city": "Austin", "state": "TX", "zip": "78712"},
            "payment_methods": {"credit_card_4190576": {"brand": "visa", "last_four": "7334"}},
            "orders": ["#W2378156"],
        },
    )
    run(
        engine,
        clock,
        "get_product_details",
        {"product_id": "6086499569"},
        True,
        {"variants": {"7292993796": {"item_id": "7292993796", "price": 54.04, "options": {"size": "XL"}}}},
    )


@pytest.mark.parametrize(
    "text",
    [
        "The order ships to 1801 Guadalupe St, Austin, TX 78712.",
        "Your item ID 7292993796 (size XL) costs $54.04.",
        "I used your Visa ending in XXXX-7334.",
        "It was charged to **** 7334 for a total of USD 1,250.00 (EUR 1150.50).",
        "Delivery on 2024-05-24, between 14:00 and 16:30, 3 boxes of 250 units.",
        "You run Python 3.11.7 on Ubuntu 22.04, see ISO 8601 and RFC 7231.",
        "Item ID: 7292993796, quantity 2, order #W2378156.",
    ],
)
def test_prose_full_of_numbers_that_tools_returned_is_no_invented_reference(engine, clock, text):
    receipted_user(engine, clock)
    v = engine.verify_final(final(text))
    assert v.allowed and v.heuristic is None, v.reason


@pytest.mark.parametrize(
    "text",
    [
        "Your new item ID 6065192424 is on the way.",
        "I used your card XXXX-9921.",
        "Refund reference RF 55821 was issued.",
        "Your ticket is TCK-30291.",
    ],
)
def test_an_id_whose_digits_no_tool_returned_is_still_refused(engine, clock, text):
    receipted_user(engine, clock)
    v = engine.verify_final(final(text))
    assert not v.allowed and v.heuristic == "unverified_claim" and v.counters == {"unverified_references": 1}


@pytest.mark.parametrize(
    "text",
    [
        "Confirmation number: TX-48213.",
        "The confirmation code for your transfer to the landlord is TX-48213.",
        "It went through, confirmed as TX-48213.",
        "Keep this receipt: TX-48213.",
    ],
)
def test_an_id_a_search_only_echoed_back_confirms_nothing(engine, clock, text):
    run(engine, clock, "wire_transfer", FAILED_TRANSFER, False, None, error="declined")
    run(engine, clock, "search_transfers", {"reference": "TX-48213"}, True, {"reference": "TX-48213", "matches": []})
    assert engine.verify_final(final(text)).heuristic == "unverified_claim", text


def test_an_id_the_agent_looked_up_may_be_named_back(engine, clock):
    """The user's order id (in a message no guard sees, through a drop-in) looked up: the lookup
    returned it, so the answer may name it."""
    run(engine, clock, "get_order_details", {"order_id": "ORD-12345"}, True, {"order_id": "ORD-12345", "status": "shipped"})
    assert engine.verify_final(final("Your order ORD-12345 has shipped.")).allowed


def test_a_receipted_id_stays_citable_after_pages_of_numbers(engine, clock):
    run(engine, clock, "create_order", {"sku": "A"}, True, {"order_id": "ORD-55555", "status": "placed"}, mutating=True)
    for page in range(9):
        items = [{"sku": f"{10000 + page * 1000 + i}", "price": f"{20000 + i}"} for i in range(300)]
        run(engine, clock, "list_products", {"page": page}, True, {"items": items})
    assert engine.verify_final(final("Your order ORD-55555 has been placed.")).allowed


def test_a_made_up_id_is_not_backed_by_a_count_or_a_price(engine, clock):
    run(engine, clock, "search_flights", {"to": "SFO"}, True, {"flights": [{"seats": 4500, "price": 1234, "gate": 1777}]})
    for text in ("Your booking reference is BK-4500.", "Refund ID RF-1234 has been issued.", "Use code GT-1777."):
        assert engine.verify_final(final(text)).heuristic == "unverified_claim", text


def test_a_confirmation_needs_a_receipted_result_but_a_lookup_may_be_cited(engine, clock):
    run(engine, clock, "list_transactions", {"account": "checking"}, True, {"transactions": [{"id": "TX-48213"}]})
    assert engine.verify_final(final("Your last transaction, TX-48213, is listed.")).allowed
    v = engine.verify_final(final("Your payment is confirmed, confirmation TX-48213."))
    assert not v.allowed and "no receipted tool result confirmed" in v.reason


def test_a_confirmation_from_a_receipted_result_passes(engine, clock):
    run(engine, clock, "wire_transfer", FAILED_TRANSFER, True, {"tx_id": "TX-80276", "status": "settled"})
    assert engine.verify_final(final("Transferred $500. Your confirmation number is TX-80276.")).allowed


# ----------------------------------------------------------------------------- claims read by their scope


@pytest.mark.parametrize(
    "text",
    [
        "No doubt I transferred the $500 this morning.",
        "Not only was it transferred, it has already arrived.",
        "No problem at all: the $500 was wired to ACC-2291.",
        "Without a doubt, I have paid your landlord.",
        "I can't say it enough: the money was sent.",
        "Nothing to worry about, I sent the $500.",
        "No worries - the rent was transferred to your landlord.",
        "No doubt the rent was transferred on time.",
        "I transferred the rent, is there anything else you need?",
        "The rent was sent to your landlord \u2014 anything else I can do?",
        "The transferred rent is now in your landlord's account.",
        "Your landlord has received the transferred rent.",
        "I sent your landlord an e-mail and the $500.",
        "Regarding the rent of $500: sent.",
        "I sent your landlord five hundred dollars.",
    ],
)
def test_a_negation_that_governs_another_word_does_not_excuse_a_claim(engine, clock, text):
    run(engine, clock, "wire_transfer", FAILED_TRANSFER, False, None, error="declined")
    v = engine.verify_final(final(text))
    assert not v.allowed and v.heuristic == "unverified_claim", text


@pytest.mark.parametrize(
    "text",
    [
        "The money was not transferred.",
        "I could not get it transferred: the bank declined it.",
        "Nothing was transferred and no payment was sent.",
        "No payment to your landlord was sent today.",
        "The transfer was never completed.",
        "I have not yet wired the funds.",
        "Has it been transferred? Not yet: the bank declined it.",
        "Refunds for canceled transfers go back to the original account.",
        "Once it is transferred you will get an e-mail.",
        "Neither the fee nor the rent was transferred.",
        "Was the rent sent? No: the bank declined it.",
    ],
)
def test_an_honest_report_of_a_failed_transfer_passes(engine, clock, text):
    run(engine, clock, "wire_transfer", FAILED_TRANSFER, False, None, error="declined")
    v = engine.verify_final(final(text))
    assert v.allowed and v.heuristic is None, (text, v.reason)


@pytest.mark.parametrize(
    "text",
    [
        "I sent the $500 and updated the ticket.",
        "I updated the ticket and sent the money.",
        "The payment of 500 USD went out: I sent it and closed the ticket.",
    ],
)
def test_another_receipted_action_does_not_cover_a_claim_it_could_not_do(engine, clock, text):
    run(engine, clock, "wire_transfer", FAILED_TRANSFER, False, None, error="declined")
    run(engine, clock, "update_ticket", {"id": "T-1", "status": "done"}, True, {"ticket": "T-1", "status": "done"})
    v = engine.verify_final(final(text))
    assert not v.allowed and "wire_transfer" in v.reason, text


def test_a_claim_a_receipted_action_could_do_as_a_side_effect_passes(engine, clock):
    """An update that refunds or charges: no refund tool was tried, so the update backs it."""
    run(engine, clock, "update_reservation_flights", {"id": "M20IZO", "cabin": "business"}, True, {"id": "M20IZO"})
    text = "Your reservation was updated; the difference of $114 has been charged to your card and $20 refunded."
    assert engine.verify_final(final(text)).allowed


def test_a_generic_claim_needs_a_tool_able_to_do_it_among_the_receipted_ones(engine, clock):
    run(engine, clock, "send_email", {"to": "a@example.com", "body": "Hi"}, True, {"id": "m-1"})
    run(engine, clock, "wire_transfer", FAILED_TRANSFER, False, None, error="declined")
    assert engine.verify_final(final("I sent you the summary by e-mail.")).allowed
    assert engine.verify_final(final("I sent the $500 to your landlord.")).heuristic == "unverified_claim"


# ----------------------------------------------------------------------------- repeated side effects


def test_parallel_duplicate_transfers_in_one_turn_are_refused(engine, clock):
    ids = [f"call_{i}" for i in range(3)]
    vs = [engine.check_tool_call(call("wire_transfer", FAILED_TRANSFER, call_id=i)) for i in ids]
    assert [v.allowed for v in vs] == [True, False, False]
    assert {v.heuristic for v in vs[1:]} == {"duplicate_mutation"} and not any(v.advisory for v in vs)
    assert vs[1].counters["in_flight"] == 1
    clock.advance(0.5)
    rv = engine.record_tool_result(result("wire_transfer", True, {"tx": "TX-1"}, call_id="call_0"))
    assert rv.receipt is not None
    # the refused ones never ran: their results are not taken
    assert engine.record_tool_result(result("wire_transfer", True, {"tx": "TX-2"}, call_id="call_1")).accepted is False


def test_a_failed_transfer_in_flight_may_be_retried_once_it_answered(engine, clock):
    assert engine.check_tool_call(call("wire_transfer", FAILED_TRANSFER, call_id="a")).allowed
    engine.record_tool_result(result("wire_transfer", False, None, call_id="a", error="declined"))
    assert engine.check_tool_call(call("wire_transfer", FAILED_TRANSFER, call_id="b")).allowed


def test_an_old_call_that_never_answered_is_taken_as_lost(make_engine, clock):
    engine = make_engine({"duplicate_mutation": {"in_flight_s": 60}})
    assert engine.check_tool_call(call("wire_transfer", FAILED_TRANSFER, call_id="a")).allowed
    clock.advance(61)
    assert engine.check_tool_call(call("wire_transfer", FAILED_TRANSFER, call_id="b")).allowed


def test_a_call_id_in_flight_is_refused_and_keeps_its_call(engine, clock):
    assert engine.check_tool_call(call("send_email", {"to": "a@x.com"}, call_id="c1")).allowed
    again = engine.check_tool_call(call("delete_file", {"path": "/"}, call_id="c1"))
    assert not again.allowed and again.heuristic == "invalid_event" and "still in flight" in again.reason
    assert engine.record_tool_result(result("send_email", True, {"id": "m"}, call_id="c1")).accepted
    assert not engine.record_tool_result(result("delete_file", True, {}, call_id="c1")).accepted


def test_the_same_send_repeated_with_nothing_learned_is_cut_after_its_warning(engine, clock):
    args = {"to": "a@example.com", "subject": "Invoice", "body": "Please find it attached."}
    vs = [run(engine, clock, "send_email", args, True, {"status": "sent", "id": f"msg-{uuid.uuid4().hex[:8]}"}) for _ in range(4)]
    assert verdicts_of(vs) == ["-", "warn duplicate_mutation", "cut duplicate_mutation", "cut duplicate_mutation"]


SONGS = ["Blue in Green", "So What", "Naima", "Moanin'", "Take Five", "Footprints", "Maiden Voyage", "Round Midnight"]
SUBJECTS = ["Invoice overdue", "Lunch on Friday?", "Build failed", "Re: contract", "Welcome aboard", "Q3 plan", "Hi", "Minutes"]


@pytest.mark.parametrize(
    "effect",
    [lambda i: {"status": "sent", "balance": 2000 - 500 * i}, lambda i: {"status": "settled", "confirmation": f"TX-{99480 + i}"}],
)
def test_the_same_amount_moved_again_is_refused_at_once(engine, clock, effect):
    """A payment asked for again after it succeeded moves the money twice: refused, whatever its
    results say (a balance, a new confirmation); the agent is told to ask the user."""
    vs = [run(engine, clock, "wire_transfer", FAILED_TRANSFER, True, effect(i), step_s=30.0) for i in range(4)]
    assert verdicts_of(vs) == ["-", "cut duplicate_mutation", "cut duplicate_mutation", "cut duplicate_mutation"]


def test_an_action_that_moves_no_amount_done_again_with_the_same_effect_is_cut_after_its_warning(engine, clock):
    vs = [
        run(engine, clock, "archive_thread", {"thread": "T-9"}, True, {"status": "archived", "at": 100 + i}, mutating=True)
        for i in range(4)
    ]
    assert verdicts_of(vs) == ["-", "warn duplicate_mutation", "cut duplicate_mutation", "cut duplicate_mutation"]


@pytest.mark.parametrize("shape", ["bisect", "next_song", "step_through_list", "batch_notifications"])
def test_a_repeated_action_that_does_new_work_each_time_is_never_cut(engine, clock, shape):
    vs = []
    for i in range(8):
        if shape == "bisect":
            out = {"output": f"Bisecting: {64 >> i} revisions left to test after this (roughly {7 - i} steps)"}
            vs.append(run(engine, clock, "git_bisect", {"verdict": "good" if i % 3 else "bad"}, True, out, mutating=True))
            vs.append(run(engine, clock, "run_tests", {"cmd": "pytest -x tests/test_io.py"}, True, {"out": f"{i} passed"}))
        elif shape == "next_song":
            vs.append(run(engine, clock, "skip_to_next_song", {}, True, {"now_playing": SONGS[i]}, mutating=True))
        elif shape == "step_through_list":
            vs.append(
                run(engine, clock, "advance_cursor", {"list": "inbox"}, True, {"item": i, "subject": SUBJECTS[i]}, mutating=True)
            )
        else:
            vs.append(run(engine, clock, "process_batch", {"batch": i}, True, {"rows": 100 + i}))
            vs.append(run(engine, clock, "send_notification", {"channel": "#ops", "text": "Batch complete"}, True, {"ok": True}))
    assert all(v.allowed for v in vs), verdicts_of(vs)


# ----------------------------------------------------------------------------- model-written text that churns

_RNG = random.Random(23)
SALTS = {
    "8 letters": lambda: "".join(_RNG.choice(string.ascii_lowercase) for _ in range(8)),
    "two words": lambda: f"{_RNG.choice(['amber', 'tiger', 'ocean', 'maple'])} {_RNG.choice(['river', 'stone', 'cloud'])}",
    "15 hex digits": lambda: f"{_RNG.getrandbits(60):015x}",
    "an emoji run": lambda: "".join(_RNG.choice("\U0001f600\U0001f680\U0001f525\U0001f308") for _ in range(4)),
    "a SQL comment": lambda: f"/* {_RNG.getrandbits(24):x} */",
    "a number": lambda: _RNG.randint(1, 10**6),
}


@pytest.mark.parametrize("key", ["note", "cache_key", "trace_name", "request_uuid", "x"])
@pytest.mark.parametrize("salt", sorted(SALTS))
def test_a_salt_under_any_key_does_not_make_a_failing_call_new(engine, clock, salt, key):
    vs = [
        run(engine, clock, "run_sql", {"q": "SELECT * FROM orders", key: SALTS[salt]()}, False, None, error="relation missing")
        for _ in range(6)
    ]
    assert cut_at(vs) == 5, verdicts_of(vs)


@pytest.mark.parametrize("key", ["cache_key", "trace_name", "request_uuid"])
def test_a_uuid_under_a_naming_key_does_not_make_a_failing_call_new(engine, clock, key):
    vs = [run(engine, clock, "deploy_check", {"env": "prod", key: str(uuid.uuid4())}, False, None) for _ in range(6)]
    assert cut_at(vs) == 5, verdicts_of(vs)


def test_a_salt_inside_the_value_does_not_make_a_failing_call_new(engine, clock):
    vs = [
        run(
            engine,
            clock,
            "run_sql",
            {"q": f"SELECT name FROM customers -- {_RNG.getrandbits(32):x}"},
            False,
            None,
            error="no table",
        )
        for _ in range(6)
    ]
    assert cut_at(vs) == 5, verdicts_of(vs)


def test_a_list_of_salts_does_not_make_a_failing_call_new(engine, clock):
    vs = [
        run(
            engine, clock, "run_sql", {"q": "SELECT * FROM orders", "tags": [SALTS["8 letters"]() for _ in range(8)]}, False, None
        )
        for _ in range(6)
    ]
    assert cut_at(vs) == 5, verdicts_of(vs)


def test_an_error_that_echoes_the_salt_is_still_the_same_error(engine, clock):
    vs = []
    for _ in range(6):
        salt = SALTS["8 letters"]()
        vs.append(
            run(
                engine,
                clock,
                "run_sql",
                {"q": "SELECT * FROM orders", "note": salt},
                False,
                None,
                error=f"relation missing ({salt})",
            )
        )
    assert cut_at(vs) == 5, verdicts_of(vs)


@pytest.mark.parametrize(
    "calls",
    [
        [("bash", {"cmd": f"grep -rn '{p}' src/"}) for p in ("TODO", "def main", "import os", "class User", "raise")],
        [("get_user", {"username": n}) for n in ("ann", "bob", "cy", "dee", "eve")],
        [("read_file", {"path": p}) for p in ("a/x.py", "b/y.md", "docs/z.rst", "setup.cfg", "Makefile")],
    ],
    ids=["greps", "users", "paths"],
)
def test_calls_of_one_tool_with_nothing_in_common_failing_alike_are_not_cut(engine, clock, calls):
    vs = [run(engine, clock, tool, args, True, {"exit_code": 1, "stdout": "", "stderr": "not found"}) for tool, args in calls]
    assert all(v.allowed for v in vs), verdicts_of(vs)


@pytest.mark.parametrize("edit", ["sed", "edit_file"])
def test_a_test_and_fix_loop_is_never_cut(engine, clock, edit):
    """Run the tests, fix one failure, run them again: the failures change, edits say nothing."""
    vs = []
    for i in range(12):
        failing = [f"test_case_{j}" for j in range(i, 12)]
        out = {
            "exit_code": 1,
            "stdout": "\n".join(f"FAILED tests/test_app.py::{t}" for t in failing) + f"\n{len(failing)} failed",
        }
        vs.append(run(engine, clock, "bash", {"cmd": "pytest -q tests/"}, True, out))
        if edit == "sed":
            vs.append(run(engine, clock, "bash", {"cmd": f"sed -i 's/bug{i}/fix{i}/' app.py"}, True, ""))
        else:
            vs.append(run(engine, clock, "edit_file", {"path": "app.py", "old": f"bug{i}", "new": f"fix{i}"}, True, {"ok": True}))
    assert all(v.allowed and v.heuristic is None for v in vs), str(verdicts_of(vs))


def test_different_calls_that_fail_alike_are_a_search_not_a_retry(engine, clock):
    vs = [run(engine, clock, "click", {"arg": name}, False, None, error="Invalid action!") for name in ("B0AX1", "Blue", "Large")]
    vs.append(run(engine, clock, "click", {"arg": "Buy Now"}, True, {"page": "thanks"}))
    assert all(v.allowed and v.heuristic is None for v in vs)


def test_an_edit_rejected_by_the_linter_each_time_is_cut(engine, clock):
    vs = []
    for i in range(6):
        body = f"def handler(event):\n    return process(event, retries={i})  # {'x' * (90 + i)}\n"
        vs.append(
            run(engine, clock, "write_file", {"path": "app/handler.py", "content": body}, False, None, error="E501 line too long")
        )
    assert cut_at(vs) == 5 and vs[-1].heuristic == "identical_failure", verdicts_of(vs)


@pytest.mark.parametrize("shape", ["sub_agents", "processes"])
def test_new_workers_that_fail_the_same_way_are_cut(engine, clock, shape):
    vs = []
    for _ in range(6):
        if shape == "sub_agents":
            args = {"task": "migrate the billing table", "name": f"worker-{uuid.uuid4().hex[:6]}"}
            out = {"agent_id": str(uuid.uuid4()), "status": "failed", "error": "could not connect to billing-db"}
            vs.append(run(engine, clock, "spawn_agent", args, True, out))
        else:
            args = {"cmd": "python train.py", "seed": _RNG.randint(1, 10**6)}
            out = {"pid": _RNG.randint(1000, 9999), "exit_code": 1, "stderr": "ModuleNotFoundError: No module named 'torch'"}
            vs.append(run(engine, clock, "run_process", args, True, out))
    assert cut_at(vs) == 5, verdicts_of(vs)


FORM = ('textbox "Email"', 'textbox "Password"', 'alert "Invalid login"')


def test_a_login_retried_with_fresh_element_refs_is_cut(engine, clock):
    vs, ref = [], 0
    for _ in range(10):
        for element, text in (("Email", "alice@example.com"), ("Password", "hunter2"), ("Sign in", None)):
            ref += 1
            page = "\n".join(f"- {what} [ref=e{ref * 3 + i}]" for i, what in enumerate(FORM))
            args = {"element": element, "ref": f"e{ref}"} | ({"text": text} if text else {})
            vs.append(run(engine, clock, "browser_click" if text is None else "browser_type", args, True, {"snapshot": page}))
            if not vs[-1].allowed:
                break
        if not vs[-1].allowed:
            break
    assert not vs[-1].allowed and len(vs) <= 15, verdicts_of(vs)


@pytest.mark.parametrize("shape", ["echoed_query", "bare_list", "counted", "nested_echo"])
def test_reworded_searches_that_stay_empty_are_cut(engine, clock, shape):
    answers = {
        "echoed_query": lambda q: {"query": q, "results": []},
        "bare_list": lambda q: [],
        "counted": lambda q: {"hits": [], "total": 0, "took_ms": _RNG.randint(3, 90), "q": q.upper()},
        "nested_echo": lambda q: {"meta": {"query": f" {q} "}, "hits": []},
    }
    # the searches that ask about refunds count; those about something else in between ("returns",
    # "money back") neither count nor end the streak: a sweep over other things is work
    words = ["refund policy", "refund rules", "refunds", "refund terms", "returns", "refund faq", "money back"]
    words += ["refund time", "refund deadline", "refund status"]
    vs = [run(engine, clock, "kb_search", {"query": q}, True, answers[shape](q)) for q in words]
    assert cut_at(vs) == 9 and vs[7].advisory, verdicts_of(vs)


@pytest.mark.parametrize("ack", [{"status": "ok"}, {"ok": True}, "Saved.", "OK.", {"success": True, "message": "Field updated"}])
def test_a_form_filled_field_by_field_with_the_same_acknowledgement_is_work(engine, clock, ack):
    fields = [("name", "Ada Lovelace"), ("email", "ada@example.com"), ("phone", "555-0100"), ("city", "London")]
    fields += [(f"line_{i}", f"value {i}") for i in range(8)]
    vs = [run(engine, clock, "fill_field", {"field": f, "value": v}, True, ack) for f, v in fields]
    assert all(v.allowed and v.heuristic is None for v in vs), str(verdicts_of(vs))


@pytest.mark.parametrize(
    "record", [lambda i: {"order_id": i, "status": "shipped"}, lambda i: {"sku": i, "in_stock": 0, "backorder": False}]
)
def test_lookups_of_records_that_read_alike_beside_their_echoed_ids_are_work(engine, clock, record):
    vs = [run(engine, clock, "get_record", {"id": i}, True, record(i)) for i in range(12)]
    assert all(v.allowed and v.heuristic is None for v in vs), str(verdicts_of(vs))


def test_paging_past_the_last_page_that_echoes_the_page_is_cut(engine, clock):
    vs = []
    for page in range(1, 14):
        out = {"items": [f"i{page}-{k}" for k in range(3)], "page": page} if page <= 4 else {"items": [], "page": page}
        vs.append(run(engine, clock, "list_items", {"page": page, "per_page": 50}, True, out))
    assert cut_at(vs) == 11, verdicts_of(vs)


def test_polls_every_few_minutes_that_never_move_are_cut_within_the_hour(engine, clock):
    vs = []
    for _ in range(30):
        vs.append(run(engine, clock, "get_job", {"job_id": "J-7"}, True, {"state": "running", "pct": 30}, step_s=240.0))
        if not vs[-1].allowed:
            break
    assert not vs[-1].allowed and vs[-1].heuristic == "stuck_polling" and len(vs) <= 12, verdicts_of(vs)


@pytest.mark.parametrize("every", [1, 3, 6])
def test_a_slow_job_whose_progress_sits_in_a_nested_field_is_never_cut(engine, clock, every):
    for i in range(60):
        status = {"job": {"state": "running", "detail": {"chunks": {"done": i // every, "of": 60}}}, "polled_at": i}
        assert run(engine, clock, "get_job", {"job_id": "J-9"}, True, status, step_s=180.0).allowed


# ----------------------------------------------------------------------------- split identity


@pytest.mark.parametrize("new_agent", [False, True])
def test_a_new_session_per_retry_is_cut_despite_healthy_sessions_of_the_tool(engine, clock, new_agent):
    vs = []
    for i in range(6):
        agent = f"agent-{i}" if new_agent else "reporter"
        salt = {"nonce_ish": SALTS["8 letters"]()}
        vs.append(
            run(
                engine,
                clock,
                "fetch_report",
                {"report": "Q3"} | salt,
                False,
                None,
                error="report Q3 not found",
                session=f"retry-{uuid.uuid4().hex[:6]}",
                tenant="acme",
                agent=agent,
            )
        )
        healthy = run(
            engine,
            clock,
            "fetch_report",
            {"report": f"Q{i % 2 + 1}"},
            True,
            {"rows": i},
            session=f"ok-{i}",
            tenant="acme",
            agent="other",
        )
        assert healthy.allowed
    assert cut_at(vs) == 4 and vs[3].heuristic == "session_churn", verdicts_of(vs)


def test_edits_with_content_between_runs_of_the_same_failing_tests_are_work(engine, clock):
    out = {"exit_code": 1, "stdout": "FAILED tests/test_app.py::test_login - AssertionError: 401 != 200\n1 failed"}
    vs = []
    for i in range(8):
        vs.append(run(engine, clock, "bash", {"cmd": "pytest -q tests/"}, True, out))
        body = f"def login(user):\n    token = issue_token(user, attempt={i})\n    return verify(user, token)\n"
        vs.append(
            run(engine, clock, "str_replace", {"path": "app.py", "new_str": body}, True, "The file app.py has been edited.")
        )
    assert all(v.allowed and v.heuristic is None for v in vs), str(verdicts_of(vs))


def test_retries_from_long_ago_do_not_count_toward_churn(engine, clock):
    for i in range(3):
        run(engine, clock, "fetch_report", {"report": "Q3"}, False, None, session=f"old-{i}", tenant="acme")
    clock.advance(7 * 24 * 3600)
    vs = [run(engine, clock, "fetch_report", {"report": "Q3"}, False, None, session=f"new-{i}", tenant="acme") for i in range(2)]
    assert all(v.allowed for v in vs), verdicts_of(vs)


def test_another_tenants_retries_are_its_own(engine, clock):
    for i in range(3):
        run(engine, clock, "fetch_report", {"report": "Q3"}, False, None, session=f"a-{i}", tenant="acme")
    assert run(engine, clock, "fetch_report", {"report": "Q3"}, False, None, session="b-0", tenant="globex").allowed


def test_parallel_runs_that_start_alike_and_go_on_are_no_churn(engine, clock):
    """Every run starts with the same call, five at a time before the first of them goes on."""
    sessions = [f"run-{i}" for i in range(30)]
    for i, s in enumerate(sessions + [None] * 5):
        if s is not None:
            assert run(engine, clock, "list_repo", {"path": "/repo"}, True, {"files": ["a.py"]}, session=s, tenant="t").allowed
        if i >= 5:
            before = sessions[i - 5]
            assert run(
                engine, clock, "open_file", {"path": f"{before}.py"}, True, {"text": before}, session=before, tenant="t"
            ).allowed


# ----------------------------------------------------------------------------- the engine across processes


def test_graduated_state_survives_a_shared_store(make_engine, clock, store_kind):
    """Two engines on one store (two workers): the warning given by one is spent for the other."""
    first, second = make_engine(), make_engine()
    for _ in range(3):
        run(first, clock, "search_db", {"q": 1}, False, None)
    warned = run(first, clock, "search_db", {"q": 1}, False, None)
    assert warned.advisory
    if store_kind == "memory":
        return  # two in-memory engines share nothing
    assert not second.check_tool_call(call("search_db", {"q": 1})).allowed


def test_a_user_turn_with_news_gives_the_warnings_back(engine, clock):
    for _ in range(4):
        run(engine, clock, "search_db", {"q": 1}, False, None)
    engine.record_user(user("The table is called sales_orders now."))
    vs = [run(engine, clock, "search_db", {"q": 1}, False, None) for _ in range(5)]
    assert verdicts_of(vs)[3:] == ["warn identical_failure", "cut identical_failure"]
