"""The second round of loop patterns, each as a runaway to cut and a legitimate near-miss to
leave alone, on both stores: duplicate side effects, results that churn, many calls with one
answer, slow stuck polls, user turns that add nothing, failures that are not the tool's."""

from __future__ import annotations

import uuid

import pytest
from conftest import CALL_ERROR, OUTAGE, call, final, result, run, say, user

# ----------------------------------------------------------------------------- whose failure


def test_three_identical_server_errors_then_a_success_after_backoff_is_legitimate(engine, clock):
    args = {"url": "https://api.example.com/v1/items/14"}
    for _ in range(3):
        assert run(engine, clock, "fetch_url", args, False, None, error="HTTP 500 Internal Server Error").allowed
    assert run(engine, clock, "fetch_url", args, True, {"item": "widget"}, step_s=30.0).allowed


def test_a_rate_limit_in_the_payload_gets_a_transient_errors_retries(engine, clock):
    args = {"q": "orders"}
    for _ in range(4):
        assert run(engine, clock, "crm_search", args, False, {"error": {"status": 429, "message": "slow down"}}).allowed
    assert run(engine, clock, "crm_search", args, True, {"rows": [1]}).allowed


def test_a_not_found_in_the_payload_is_the_calls_own_and_stops_at_three(engine, clock):
    args = {"customer": "C-404"}
    for _ in range(3):
        assert run(engine, clock, "crm_lookup", args, False, {"error": {"status": 404, "message": "no such customer"}}).allowed
    assert engine.check_tool_call(call("crm_lookup", args)).heuristic == "identical_failure"


def test_a_dead_dependency_still_stops_after_the_transient_allowance(engine, clock):
    # identical_failure only warns the sixth call: the tool's breaker, open after five outages, refuses it
    args = {"q": "orders"}
    for _ in range(5):
        assert run(engine, clock, "crm_search", args, False, {"error": {"status": 503}}).allowed
    v = engine.check_tool_call(call("crm_search", args))
    assert (v.allowed, v.heuristic) == (False, "circuit_open")


def test_without_the_breaker_a_dead_dependency_is_warned_after_the_transient_allowance_then_cut(make_engine, clock):
    engine = make_engine({"modes": {"circuit_open": "off"}})
    args = {"q": "orders"}
    for _ in range(5):
        assert run(engine, clock, "crm_search", args, False, {"error": {"status": 503}}).heuristic is None
    warned = run(engine, clock, "crm_search", args, False, {"error": {"status": 503}})
    assert (warned.allowed, warned.heuristic, warned.advisory) == (True, "identical_failure", True)
    v = engine.check_tool_call(call("crm_search", args))
    assert (v.allowed, v.heuristic) == (False, "identical_failure")


def test_an_agents_failing_commands_never_open_the_tools_breaker(make_engine, clock):
    """A shared breaker across tenants (key_by_tenant off): one tenant's failing commands are
    no outage, so the tool stays closed for everyone."""
    engine = make_engine({"breaker": {"key_by_tenant": False}})
    for i in range(25):
        run(engine, clock, "execute_bash", {"command": f"pytest -k case{i}"}, False, None, error="exit code 1", tenant="a")
    assert engine.operator.breaker_state("execute_bash").value == "closed"
    assert engine.check_tool_call(call("execute_bash", {"command": "ls"}, session="b1", tenant="b")).allowed


def test_the_calls_own_failures_neither_reset_an_outage_streak_nor_pass_a_probe(make_engine, clock):
    engine = make_engine({"breaker": {"key_by_tenant": False, "open_s": 30.0, "half_open_probes": 1}})
    for i in range(4):
        run(engine, clock, "warehouse", {"q": i}, False, None, error=OUTAGE, session=f"s{i}")
        run(engine, clock, "warehouse", {"bad": i}, False, None, error=CALL_ERROR, session=f"b{i}")
    run(engine, clock, "warehouse", {"q": 9}, False, None, error=OUTAGE, session="s9")
    assert engine.operator.breaker_state("warehouse").value == "open"  # five outages in a row, bad calls aside
    clock.advance(30)
    probe = engine.check_tool_call(call("warehouse", {"bad": "p"}, session="p"))
    assert probe.allowed
    engine.record_tool_result(result("warehouse", False, None, call_id=probe.call_id, session="p", error=CALL_ERROR))
    assert engine.operator.breaker_state("warehouse").value == "half_open"  # a 404 proves nothing: still probing
    second = engine.check_tool_call(call("warehouse", {"q": "p2"}, session="p2"))
    assert second.allowed  # the slot the bad call held is free again
    engine.record_tool_result(result("warehouse", True, {"rows": 1}, call_id=second.call_id, session="p2"))
    assert engine.operator.breaker_state("warehouse").value == "closed"


def test_dependency_failures_still_open_the_breaker(make_engine, clock):
    engine = make_engine({"breaker": {"key_by_tenant": False}})
    for i in range(5):
        run(engine, clock, "warehouse", {"q": i}, False, None, error=OUTAGE, session=f"s{i}")
    assert engine.check_tool_call(call("warehouse", {"q": 9}, session="other")).heuristic == "circuit_open"


def test_a_retry_sooner_than_retry_after_is_refused_and_one_that_waits_goes_through(engine, clock):
    limited = {"error": {"status": 429, "message": "slow down", "retry_after": 30}}
    assert run(engine, clock, "crm_search", {"q": "a"}, False, limited).allowed
    v = run(engine, clock, "crm_search", {"q": "b"}, True, {"rows": [1]})  # 2 s later, other args: same service
    assert (v.allowed, v.heuristic, v.scope) == (False, "early_retry", "call")
    assert v.observation["retry_after_s"] == 28.0  # asked at t+2.5 for 30 s; retried at t+4.5
    assert run(engine, clock, "other_tool", {"q": "a"}, True, {"rows": [2]}).allowed  # the session goes on
    assert run(engine, clock, "crm_search", {"q": "a"}, True, {"rows": [3]}, step_s=30.0).allowed


def test_retry_after_units_are_read(engine, clock):
    for error, wait in (("429 Too Many Requests; retry after 500ms", 0.5), ("503; Retry-After: 2 minutes", 120.0)):
        tool = f"api_{int(wait * 10)}"
        assert run(engine, clock, tool, {"u": 1}, False, None, error=error).allowed
        v = run(engine, clock, tool, {"u": 2}, True, {"ok": 1}, step_s=1.0)  # a second later
        assert (v.heuristic == "early_retry") is (wait > 1.0), (error, v)


def test_retry_after_in_the_error_text_is_honoured_and_capped(engine, clock):
    assert run(
        engine, clock, "fetch_url", {"u": 1}, False, None, error="HTTP 503 Service Unavailable; Retry-After: 99999"
    ).allowed
    v = run(engine, clock, "fetch_url", {"u": 1}, True, {"ok": 1})
    assert v.heuristic == "early_retry" and v.observation["retry_after_s"] <= 3600


def test_a_calls_own_failure_asks_for_no_wait(engine, clock):
    assert run(engine, clock, "crm_lookup", {"id": 1}, False, {"error": {"status": 404, "retry_after": 60}}).allowed
    assert run(engine, clock, "crm_lookup", {"id": 2}, True, {"name": "x"}).allowed


# ----------------------------------------------------------------------------- duplicate_mutation

EMAIL = {"to": "dana@example.com", "subject": "Your invoice", "body": "Please find your invoice attached."}


def send(engine, clock, args, *, tool="send_email", ok=True, **kw):
    return run(engine, clock, tool, args, ok, {"message_id": uuid.uuid4().hex, "status": "sent"} if ok else None, **kw)


def test_the_same_email_sent_again_after_it_succeeded_is_warned_then_refused(engine, clock):
    assert send(engine, clock, EMAIL).allowed
    warned = send(engine, clock, EMAIL)
    assert (warned.allowed, warned.heuristic, warned.scope, warned.advisory) == (True, "duplicate_mutation", "call", True)
    assert warned.observation["warning"] == "DUPLICATE_MUTATION"
    v = send(engine, clock, EMAIL)
    assert (v.allowed, v.heuristic, v.scope) == (False, "duplicate_mutation", "call")
    assert v.observation["error"] == "DUPLICATE_MUTATION"
    # not a loop halt: the agent may go on with other work
    assert send(engine, clock, {**EMAIL, "to": "lee@example.com"}).allowed


def test_a_tool_named_after_an_action_is_mutating_unless_its_name_says_it_only_looks(engine, clock):
    msg = {"channel": "#ops", "text": "deploy done"}
    assert send(engine, clock, msg, tool="post_message").allowed
    assert send(engine, clock, msg, tool="post_message").heuristic == "duplicate_mutation"  # warned
    for _ in range(2):  # a reader repeats freely (identical_call judges it, from the 4th)
        assert run(engine, clock, "get_update_status", {"id": 7}, True, {"state": "applied"}).allowed


def test_templated_sends_to_distinct_recipients_are_work(engine, clock):
    for i in range(12):
        assert send(engine, clock, {**EMAIL, "to": f"customer{i}@example.com"}).allowed


def test_a_failed_send_may_be_retried(engine, clock):
    assert send(engine, clock, EMAIL, ok=False, error=CALL_ERROR).allowed
    assert send(engine, clock, EMAIL).allowed


def test_distinct_idempotency_keys_are_distinct_actions_and_the_same_key_is_a_repeat(engine, clock):
    assert send(engine, clock, {**EMAIL, "idempotency_key": "k-1"}).allowed
    assert send(engine, clock, {**EMAIL, "Idempotency-Key": "k-2"}).allowed
    assert send(engine, clock, {**EMAIL, "idempotency_key": "k-2"}).heuristic == "duplicate_mutation"


def test_a_confirmation_asked_for_after_a_refused_duplicate_allows_the_repeat(engine, clock):
    engine.record_user(user("Yes, go ahead"))
    assert send(engine, clock, EMAIL).allowed
    assert send(engine, clock, EMAIL).advisory  # warned: it ran
    assert not send(engine, clock, EMAIL).allowed
    engine.record_user(user("yes"))  # the guard told the agent to ask: this "yes" answers it
    assert send(engine, clock, EMAIL).allowed


def test_a_confirmation_asked_for_after_a_duplicate_s_warning_allows_the_repeat(engine, clock):
    # the warning tells the agent to ask the user to confirm, as a refusal does
    engine.record_user(user("Yes, go ahead"))
    assert send(engine, clock, EMAIL).allowed
    warned = send(engine, clock, EMAIL)
    assert warned.advisory and "ask the user to confirm" in warned.observation["actionable_instruction"]
    engine.record_user(user("yes"))  # this "yes" answers it
    assert send(engine, clock, EMAIL).allowed


def test_a_tool_declared_idempotent_may_repeat(make_engine, clock):
    engine = make_engine({"tools": {"update_ticket": {"mutating": True, "idempotent": True}}})
    for _ in range(3):
        assert run(engine, clock, "update_ticket", {"id": "T-1", "status": "closed"}, True, {"ok": True}).allowed


def test_a_repeat_after_the_window_or_a_new_instruction_is_allowed(make_engine, clock):
    engine = make_engine({"duplicate_mutation": {"window_s": 600}})
    assert send(engine, clock, EMAIL).allowed
    clock.advance(601)
    assert send(engine, clock, EMAIL).allowed
    assert send(engine, clock, EMAIL).heuristic == "duplicate_mutation"
    engine.record_user(user("Dana says it never arrived, please send it once more."))
    assert send(engine, clock, EMAIL).allowed


# ----------------------------------------------------------------------------- results that churn


def test_the_same_failing_test_with_new_durations_and_ids_is_no_progress(engine, clock):
    args = {"command": "pytest tests/test_io.py"}
    verdicts = []
    for i in range(4):
        out = {
            "output": f"FAILED tests/test_io.py::test_read\n1 failed, 4 passed in {0.4 + i / 7:.2f}s",
            "run_id": uuid.uuid4().hex,
        }
        verdicts.append(run(engine, clock, "run_tests", args, True, out))
    assert [v.heuristic for v in verdicts] == [None] * 3 + ["identical_call"]


def test_a_rejected_login_with_fresh_element_refs_is_no_progress(engine, clock):
    args = {"element": "Sign in button"}
    verdicts = []
    for i in range(5):
        page = f'- textbox "Password" [ref=e{10 + i}]\n- alert "Invalid password" [ref=e{40 + 3 * i}]'
        verdicts.append(run(engine, clock, "browser_click", args, True, {"snapshot": page}))
    assert verdicts[-1].heuristic == "identical_call"


def test_sub_agents_spawned_under_new_ids_reporting_the_same_failure_are_no_progress(engine, clock):
    args = {"task": "migrate the billing table"}
    verdicts = []
    for _ in range(5):
        report = {"agent_id": str(uuid.uuid4()), "report": "could not connect to billing-db"}
        verdicts.append(run(engine, clock, "spawn_agent", args, True, report))
    assert verdicts[-1].heuristic == "identical_call"


def test_a_count_that_moves_is_progress_even_when_timings_churn(engine, clock):
    args = {"command": "pytest"}
    for i in range(8):
        out = {"output": f"{8 - i} failed, {i} passed in {0.4 + i / 7:.2f}s"}
        assert run(engine, clock, "run_tests", args, True, out).allowed


def test_result_churn_patterns_are_configurable(make_engine, clock):
    engine = make_engine({"progress": {"result_churn_patterns": [r"seq=\d+"]}})
    verdicts = [run(engine, clock, "job_log", {"job": 1}, True, {"line": f"seq={i} idle"}) for i in range(5)]
    assert verdicts[-1].heuristic == "identical_call"
    engine = make_engine({"progress": {"builtin_churn_patterns": False}})
    verdicts = [run(engine, clock, "t2", {"a": 1}, True, {"took_ms": i, "rows": 1}, session="x") for i in range(5)]
    assert all(v.allowed for v in verdicts)  # without the built-ins, a timing is a change


# ----------------------------------------------------------------------------- same_answer


def test_reworded_searches_that_all_come_back_empty_are_warned_then_cut(engine, clock):
    queries = [
        "refund policy",
        "refund rules",
        "how do refunds work",
        "refund terms",
        "returns and refunds",
        "refund faq",
        "refunds",
    ]
    verdicts = [run(engine, clock, "kb_search", {"q": q}, True, {"results": [], "total": 0}) for q in queries]
    assert [v.heuristic for v in verdicts] == [None] * 5 + ["same_answer"] * 2
    assert (verdicts[-2].allowed, verdicts[-2].advisory, verdicts[-2].scope) == (True, True, "session")
    assert (verdicts[-1].allowed, verdicts[-1].scope) == (False, "session")


def test_a_growing_limit_with_the_same_rows_is_cut(engine, clock):
    rows = {"rows": [["ORD-1", 20], ["ORD-2", 35]]}
    verdicts = [
        run(engine, clock, "run_sql", {"q": f"SELECT * FROM orders LIMIT {n}"}, True, rows) for n in (10, 20, 50, 100, 500, 1000)
    ]
    assert verdicts[-1].heuristic == "same_answer"


def test_paging_past_the_last_page_is_cut(engine, clock):
    last = {"orders": [], "next_page": None}
    verdicts = [run(engine, clock, "list_orders", {"page": p}, True, last) for p in range(7, 13)]
    assert verdicts[-1].heuristic == "same_answer"


def test_lookups_of_different_records_that_differ_only_in_their_ids_are_not_one_answer(engine, clock):
    for i in range(10):
        record = {"customer_id": 1000 + 7 * i, "ticket": f"#{500 + i}", "status": "active", "took_ms": i}
        assert run(engine, clock, "lookup_customer", {"email": f"user{i}@example.com"}, True, record).allowed


def test_reads_that_each_return_something_else_are_work(engine, clock):
    for i in range(30):
        assert run(engine, clock, "read_document", {"doc_id": f"D-{i}"}, True, {"summary": f"doc {i}: {i * 7 % 11}"}).allowed


def test_commands_that_print_nothing_are_not_one_answer(engine, clock):
    for i in range(12):
        assert run(engine, clock, "execute_bash", {"command": f"mkdir -p /tmp/x{i}"}, True, {"output": ""}).allowed


def test_the_same_acknowledgement_between_other_progress_is_not_one_answer(engine, clock):
    for i in range(10):
        assert run(engine, clock, "think", {"thought": f"step {i}: compare option {i}"}, True, "OK.").allowed
        assert run(engine, clock, "search", {"q": f"option {i}"}, True, {"hits": [i]}).allowed


def test_writes_that_each_return_the_same_acknowledgement_are_work(engine, clock):
    for i in range(8):
        assert run(engine, clock, "create_record", {"name": f"n{i}"}, True, {"status": "created"}, mutating=True).allowed


def test_files_written_again_and_again_get_the_same_acknowledgement_not_one_answer(engine, clock):
    ack = {"output": "File created successfully at: /workspace/reproduce.py"}
    for i in range(8):
        body = f"import django\nprint({i})\n" + "x = 1\n" * 20
        args = {"command": "create", "path": "/workspace/reproduce.py", "file_text": body}
        assert run(engine, clock, "str_replace_editor", args, True, ack).allowed


def test_status_checks_of_many_jobs_are_polls_not_one_answer(engine, clock):
    for i in range(8):
        assert run(engine, clock, "check_status", {"job": f"J-{i}"}, True, {"state": "running"}).allowed


# ----------------------------------------------------------------------------- slow polls


def test_slow_polls_of_a_job_that_never_moves_are_cut_by_wall_time(engine, clock):
    verdicts = []
    for _ in range(40):  # every two minutes, for 80 minutes
        verdicts.append(run(engine, clock, "get_job", {"job": "J-1"}, True, {"state": "running"}, step_s=120.0))
        if not verdicts[-1].allowed:
            break
    warned, v = verdicts[-2:]
    assert (warned.allowed, warned.heuristic, warned.advisory) == (True, "stuck_polling", True)
    assert warned.counters["max_wait_s"] == 1800.0 and warned.counters["waited_s"] >= 1800.0
    assert (v.allowed, v.heuristic) == (False, "stuck_polling")
    # half an hour of unchanged polls (warned), then the next; not fifteen within ten minutes
    assert 16 <= len(verdicts) <= 18


def test_polls_a_quarter_of_an_hour_apart_are_slow_polls_too(engine, clock):
    verdicts = [run(engine, clock, "get_job", {"job": "J-3"}, True, {"state": "queued"}, step_s=900.0) for _ in range(6)]
    assert [v.heuristic for v in verdicts] == [None] * 5 + ["stuck_polling"]


def test_a_slow_job_whose_progress_is_nested_and_renamed_is_never_cut(engine, clock):
    for i in range(80):  # every two minutes, for 160 minutes
        status = {"job": {"state": "running", "stats": {"rows_done": 1000 * i}}, "checked_at": i}
        assert run(engine, clock, "get_job", {"job": "J-2"}, True, status, step_s=120.0).allowed


# ----------------------------------------------------------------------------- user turns


def halt_on_a_failing_query(engine, clock):
    for _ in range(3):
        run(engine, clock, "run_sql", {"q": 1}, False, None)
    assert run(engine, clock, "run_sql", {"q": 1}, False, None).advisory  # warned, and it failed again
    cut = engine.check_tool_call(call("run_sql", {"q": 1}))
    assert (cut.allowed, cut.heuristic) == (False, "identical_failure")


def test_a_bare_nudge_lifts_no_loop_halt(engine, clock):
    halt_on_a_failing_query(engine, clock)
    for nudge in (
        "continue",
        "Go on!",
        "please continue.",
        "keep going",
        "",
        "and?",
        "Try again please",
        "Continue with the task where you left off.",
        "keep working on it",
    ):
        engine.record_user(user(nudge))
        assert engine.check_tool_call(call("run_sql", {"q": 1})).heuristic == "identical_failure", nudge


def test_an_auto_reply_lifts_no_loop_halt(engine, clock):
    halt_on_a_failing_query(engine, clock)
    engine.record_user(user("Automatic reply: I am out of the office until Monday."))
    assert not engine.check_tool_call(call("run_sql", {"q": 1})).allowed
    engine.record_user(user("Please continue working on the task on whatever approach you think is suitable."))
    assert not engine.check_tool_call(call("run_sql", {"q": 1})).allowed


def interrupted(engine, clock, error: str, *, flagged: bool) -> None:
    engine.check_tool_call(call("run_sql", {"q": 1}))
    clock.advance(1.0)
    engine.record_tool_result({**result("run_sql", False, None, error=error), "interrupted": flagged})


def test_after_the_user_stops_calls_whatever_they_say_next_is_theirs(engine, clock):
    # three calls the harness says its user stopped, then "continue": the retry is the user's
    for _ in range(3):
        interrupted(engine, clock, "Exit code 130", flagged=True)
    engine.record_user(user("continue"))
    assert engine.check_tool_call(call("run_sql", {"q": 1})).allowed


@pytest.mark.parametrize(
    "error", ["[Request interrupted by user for tool use]", "interrupted by the user", "Cancelled by user.", "aborted by user"]
)
def test_a_tool_that_fails_saying_it_was_interrupted_still_loops(engine, clock, error):
    # the error's text is the tool's (so the agent's) to write: only the harness's flag says who
    # stopped a call, and a nudge after such failures restarts nothing
    for _ in range(3):
        interrupted(engine, clock, error, flagged=False)
    assert engine.check_tool_call(call("run_sql", {"q": 1})).heuristic == "identical_failure"
    engine.record_user(user("continue"))
    assert engine.check_tool_call(call("run_sql", {"q": 1})).heuristic == "identical_failure"


def test_a_short_answer_with_content_is_information(engine, clock):
    halt_on_a_failing_query(engine, clock)
    engine.record_user(user("go ahead"))  # a confirmation, given once: it may unblock the agent
    assert engine.check_tool_call(call("run_sql", {"q": 1})).allowed


def test_a_nudge_with_news_in_it_is_information(engine, clock):
    halt_on_a_failing_query(engine, clock)
    engine.record_user(user("Please continue, the database is back now."))
    assert engine.check_tool_call(call("run_sql", {"q": 1})).allowed


def test_a_repeated_answer_adds_nothing_but_new_content_does(engine, clock):
    engine.record_user(user("The orders table is in the reporting schema."))
    halt_on_a_failing_query(engine, clock)
    engine.record_user(user("The orders table is in the reporting schema."))
    assert not engine.check_tool_call(call("run_sql", {"q": 1})).allowed
    engine.record_user(user("Sorry: it was renamed to orders_v2 yesterday."))
    assert engine.check_tool_call(call("run_sql", {"q": 1})).allowed


def test_a_confirmation_counts_once_however_it_is_worded(engine, clock):
    engine.record_user(user("yes"))
    halt_on_a_failing_query(engine, clock)
    for again in ("Yes, go ahead.", "I already said yes!", "ok"):
        engine.record_user(user(again))
        assert not engine.check_tool_call(call("run_sql", {"q": 1})).allowed, again


def test_re_asking_for_a_confirmation_already_given_is_an_echo(engine, clock):
    asks = [
        "Shall I go ahead and cancel reservation ABC123 for you?",
        "Just to confirm: should I go ahead and cancel reservation ABC123?",
        "Can you confirm I should go ahead and cancel reservation ABC123 for you?",
    ]
    engine.record_assistant(say(asks[0]))
    engine.record_user(user("yes"))  # the first "yes" is an answer
    verdicts = []
    for ask, answer in zip(asks, ("yes", "Yes, please go ahead", "I already said yes"), strict=True):
        verdicts.append(engine.record_assistant(say(ask)))
        engine.record_user(user(answer))
    assert [v.heuristic for v in verdicts] == [None, None, "semantic_echo"]


# ----------------------------------------------------------------------------- other false positives


def test_edit_test_revert_test_is_a_bisection_not_an_oscillation(engine, clock):
    edit = {"path": "app.py", "old": "x = 1", "new": "x = 2"}
    undo = {"path": "app.py", "old": "x = 2", "new": "x = 1"}
    for _ in range(3):
        assert run(engine, clock, "edit_file", edit, True, {"ok": True}).allowed
        assert run(engine, clock, "run_tests", {"k": "io"}, True, {"output": "1 failed"}).allowed
        assert run(engine, clock, "edit_file", undo, True, {"ok": True}).allowed
        assert run(engine, clock, "run_tests", {"k": "io"}, True, {"output": "all passed"}).allowed


def test_a_no_op_command_re_run_a_few_times_is_left_alone_but_not_forever(engine, clock):
    verdicts = [run(engine, clock, "execute_bash", {"command": "cd /repo"}, True, {"output": ""}) for _ in range(5)]
    assert [v.heuristic for v in verdicts] == [None] * 3 + ["identical_call"] * 2 and not verdicts[-1].allowed


def test_past_the_soft_limit_work_goes_on_but_no_action_is_taken(make_engine, clock):
    engine = make_engine({"budget": {"max_tokens": 1_000_000, "max_cost_usd": None, "soft_limit_pct": 50}})
    clock.advance(30)
    assert engine.check_tool_call(call("execute_bash", {"c": 1}, input_tokens=400_000)).allowed
    clock.advance(30)
    assert engine.check_tool_call(call("execute_bash", {"c": 2}, input_tokens=10_000)).allowed
    v = engine.check_tool_call(call("wire_transfer", {"to": "B"}, input_tokens=10_000))
    assert (v.allowed, v.heuristic) == (False, "budget_soft_limit")
    strict = {"max_tokens": 1_000_000, "max_cost_usd": None, "soft_limit_pct": 50, "soft_limit_blocks": "all_but_read_only"}
    engine = make_engine({"budget": strict})
    clock.advance(30)
    v = engine.check_tool_call(call("execute_bash", {"c": 1}, input_tokens=400_000, session="t"))
    assert (v.allowed, v.heuristic) == (False, "budget_soft_limit")


def test_instructions_and_future_actions_are_no_claims(engine, clock):
    for text in (
        "Once you have submitted the form, you will receive a confirmation e-mail.",
        "Your refund will be completed within 5 business days.",
        "Please make sure the invoice is paid before Friday.",
        "If the transfer is completed, the balance updates overnight.",
    ):
        v = engine.verify_final(final(text))
        assert v.allowed, (text, v.reason)


def test_a_done_deed_claimed_without_a_receipt_is_still_refused(engine, clock):
    run(engine, clock, "submit_form", {"form": "F-1"}, False, None, error=CALL_ERROR)
    run(engine, clock, "cancel_order", {"order": "O-1"}, False, None, error=CALL_ERROR)
    for text in (
        "I have submitted the form for you.",
        "Your order has been cancelled.",
        "I logged in to the portal and submitted the form.",
        "After checking your order I cancelled it, it is cancelled.",
        "I can confirm we submitted the form.",
        "When I submitted the form, the portal accepted it.",
    ):
        assert engine.verify_final(final(text)).heuristic == "unverified_claim", text


def test_a_reference_deep_in_a_long_page_snapshot_may_be_cited(engine, clock):
    page = "- row " * 20_000 + "- cell: Booking reference BKG-48213"
    assert run(engine, clock, "browser_snapshot", {"url": "https://x/bookings"}, True, {"snapshot": page}).allowed
    assert engine.verify_final(final("Your booking reference is BKG-48213.")).allowed
