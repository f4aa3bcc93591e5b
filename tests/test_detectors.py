"""Every loop heuristic: a runaway it must cut, and a legitimate near-miss it must leave alone."""

from __future__ import annotations

from conftest import call, result, run, say, user


def test_identical_failure_warns_the_fourth_identical_failing_call_and_cuts_the_fifth(engine, clock):
    args = {"query": "SELECT COUNT(*) FROM orders"}
    for _ in range(3):
        assert run(engine, clock, "search_db", args, False, None).allowed
    warned = run(engine, clock, "search_db", args, False, None)
    assert (warned.allowed, warned.heuristic, warned.severity, warned.advisory) == (True, "identical_failure", "warn", True)
    assert warned.counters == {"failures": 3, "max_failures": 3}
    assert warned.observation["warning"] == "IDENTICAL_FAILURE" and "error" not in warned.observation
    v = engine.check_tool_call(call("search_db", args))
    assert not v.allowed and not v.advisory
    assert v.heuristic == "identical_failure"
    assert v.scope == "session"
    assert v.counters == {"failures": 4, "max_failures": 3}
    assert v.observation["error"] == "IDENTICAL_FAILURE"
    assert v.observation["tool"] == "search_db"


def test_calls_issued_before_the_warned_call_answered_are_warned_again_not_cut(engine, clock):
    """Parallel calls of the turn the warning came in: the agent could not read it yet. The cut
    waits for a result, of a call made since the warning, that shows no progress."""
    args = {"query": "SELECT COUNT(*) FROM orders"}
    for _ in range(3):
        assert run(engine, clock, "search_db", args, False, None).allowed
    earlier = engine.check_tool_call(call("read_file", {"path": "schema.sql"}))  # in flight
    warned = engine.check_tool_call(call("search_db", args))
    assert (warned.allowed, warned.heuristic, warned.advisory) == (True, "identical_failure", True)
    same_turn = [engine.check_tool_call(call("search_db", args)) for _ in range(3)]
    assert all(v.allowed and v.advisory and v.heuristic == "identical_failure" for v in same_turn)
    # the answer of a call made before the warning is no evidence
    engine.record_tool_result(result("read_file", False, None, call_id=earlier.call_id, error="no such file"))
    again = engine.check_tool_call(call("search_db", args))
    assert (again.allowed, again.advisory) == (True, True)
    # the warned call's own failure is: the next call is cut
    engine.record_tool_result(result("search_db", False, None, call_id=warned.call_id))
    cut = engine.check_tool_call(call("search_db", args))
    assert (cut.allowed, cut.heuristic, cut.advisory) == (False, "identical_failure", False)


def test_a_result_of_a_call_made_after_the_warning_is_evidence_whichever_answers_first(engine, clock):
    args = {"query": "SELECT COUNT(*) FROM orders"}
    for _ in range(3):
        assert run(engine, clock, "search_db", args, False, None).allowed
    assert engine.check_tool_call(call("search_db", args)).advisory
    later = engine.check_tool_call(call("search_db", args))  # issued with the warned call
    assert later.allowed and later.advisory
    engine.record_tool_result(result("search_db", False, None, call_id=later.call_id))
    cut = engine.check_tool_call(call("search_db", args))
    assert not cut.allowed and cut.heuristic == "identical_failure"


def test_two_failures_then_a_success_is_a_transient_retry_not_a_loop(engine, clock):
    args = {"url": "https://api.example.com/items/14"}
    assert run(engine, clock, "fetch_url", args, False, None).allowed
    assert run(engine, clock, "fetch_url", args, False, None).allowed
    assert run(engine, clock, "fetch_url", args, True, {"item": "widget"}).allowed
    assert run(engine, clock, "fetch_url", {"url": "https://api.example.com/items/15"}, True, {"item": "gadget"}).allowed


def test_transient_errors_get_more_retries_than_permanent_ones(engine, clock):
    args = {"url": "https://api.example.com/items/14"}
    for _ in range(4):
        clock.advance(2)
        v = engine.check_tool_call(call("fetch_url", args))
        assert v.allowed
        engine.record_tool_result(result("fetch_url", False, None, call_id=v.call_id, error="503 Service Unavailable"))
    assert run(engine, clock, "fetch_url", args, True, {"item": "widget"}).allowed


def test_transient_errors_are_warned_after_their_own_limit_and_then_cut(make_engine, clock):
    # the tool's breaker counts the same dependency failures and opens at five: off here, so
    # the verdicts are identical_failure's own
    engine = make_engine({"modes": {"circuit_open": "off"}})
    args = {"url": "https://api.example.com/items/14"}
    for _ in range(5):
        clock.advance(2)
        v = engine.check_tool_call(call("fetch_url", args))
        assert v.allowed and v.heuristic is None
        engine.record_tool_result(result("fetch_url", False, None, call_id=v.call_id, error="request timed out"))
    warned = run(engine, clock, "fetch_url", args, False, None, error="request timed out")
    assert (warned.allowed, warned.heuristic, warned.advisory) == (True, "identical_failure", True)
    assert warned.counters == {"failures": 5, "max_failures": 5}
    v = engine.check_tool_call(call("fetch_url", args))
    assert v.heuristic == "identical_failure" and not v.allowed


def test_the_tools_breaker_refuses_a_dead_dependency_after_the_transient_allowance(engine, clock):
    # identical_failure only warns the sixth call; the breaker, open after five outages, refuses it
    args = {"url": "https://api.example.com/items/14"}
    for _ in range(5):
        assert run(engine, clock, "fetch_url", args, False, None, error="request timed out").allowed
    v = engine.check_tool_call(call("fetch_url", args))
    assert (v.allowed, v.heuristic) == (False, "circuit_open")


def test_semantic_failure_counts_even_when_transport_said_ok(engine, clock):
    args = {"lead_id": "L-1"}
    for _ in range(3):
        run(engine, clock, "get_lead", args, True, {"status": "error", "message": "Invalid Lead ID"})
    assert engine.check_tool_call(call("get_lead", args)).heuristic == "identical_failure"


def test_identical_call_with_the_same_result_is_warned_after_three_runs_and_cut_after_four(engine, clock):
    args = {"id": 7487}
    for _ in range(3):
        assert run(engine, clock, "read_record", args, True, {"name": "Dana"}).heuristic is None
    warned = run(engine, clock, "read_record", args, True, {"name": "Dana"})
    assert (warned.allowed, warned.heuristic, warned.advisory) == (True, "identical_call", True)
    assert warned.counters["repeats"] == 3
    v = engine.check_tool_call(call("read_record", args))
    assert (v.allowed, v.heuristic) == (False, "identical_call")
    assert v.counters["repeats"] == 4


def test_identical_call_whose_result_changes_is_work(engine, clock):
    for i in range(10):
        assert run(engine, clock, "read_inbox", {"folder": "in"}, True, {"unread": i}).allowed


def test_canonical_args_ignore_key_order_whitespace_and_volatile_fields(engine, clock):
    variants = [
        {"q": "open  orders", "limit": 5, "request_id": "a1"},
        {"limit": 5.0, "q": " open orders ", "timestamp": 123},
        {"requestId": "zz", "q": "open orders", "limit": 5},
        {"q": "OPEN ORDERS", "limit": 5, "trace_id": "t-9"},
    ]
    for args in variants:
        assert run(engine, clock, "search", args, True, {"rows": [1]}).allowed
    assert engine.check_tool_call(call("search", {"q": "open orders", "limit": 5, "nonce": "x"})).heuristic == "identical_call"


def test_repeating_a_call_between_steps_that_make_progress_is_not_a_loop(engine, clock):
    # an edit-and-test loop: the test run reports the same failure, but every edit changes the
    # code. Each edit carries its patch (content: a write), so the same "saved" answer to each
    # is progress; an edit whose only change is a short argument answered alike is no news
    for i in range(6):
        patch = f"--- a/a.py\n+++ b/a.py\n@@ -10,1 +10,1 @@\n-    return parse(text)\n+    return parse(text, attempt={i})\n"
        edit = run(engine, clock, "edit_file", {"path": "a.py", "patch": patch}, True, {"saved": True})
        assert edit.allowed and edit.heuristic is None
        test = run(engine, clock, "run_tests", {"path": "tests"}, True, {"failed": 1, "passed": 40})
        assert test.allowed and test.heuristic is None


def test_identical_call_streak_ends_when_its_window_passes(make_engine, clock):
    engine = make_engine({"identical_call": {"window_s": 60}, "near_duplicate": {"window_s": 60}})
    args = {"id": 1}
    for _ in range(3):
        run(engine, clock, "read_record", args, True, {"v": 1})
    clock.advance(120)
    assert engine.check_tool_call(call("read_record", args)).allowed


def test_stuck_polling_warns_the_poll_after_the_budget_and_cuts_the_next(engine, clock):
    args = {"job_id": "job-1"}
    for _ in range(15):
        v = run(engine, clock, "check_job_status", args, True, {"state": "running", "progress": 0.42}, step_s=10)
        assert v.allowed and v.heuristic is None
    warned = run(engine, clock, "check_job_status", args, True, {"state": "running", "progress": 0.42}, step_s=10)
    assert (warned.allowed, warned.heuristic, warned.advisory) == (True, "stuck_polling", True)
    assert warned.counters == {"polls": 15, "max_polls": 15, "window_s": 600.0}
    clock.advance(10)
    v = engine.check_tool_call(call("check_job_status", args))
    assert (v.allowed, v.heuristic) == (False, "stuck_polling")
    assert v.counters == {"polls": 15, "max_polls": 15, "window_s": 600.0}


def test_polling_a_job_that_progresses_is_never_blocked(engine, clock):
    args = {"job_id": "ci-1"}
    for i in range(40):
        assert run(engine, clock, "check_job_status", args, True, {"state": "running", "progress": i / 40}, step_s=10).allowed


def test_a_poll_is_recognised_by_its_in_progress_result_whatever_the_tool_name(engine, clock):
    args = {"export": "e-1"}
    for _ in range(10):
        assert run(engine, clock, "get_export", args, True, {"status": "pending"}, step_s=20).allowed
    assert run(engine, clock, "get_export", args, True, {"status": "done", "url": "u"}, step_s=20).allowed


def test_slow_polling_stays_under_the_budget(engine, clock):
    args = {"job_id": "job-2"}
    for _ in range(30):
        assert run(engine, clock, "check_job_status", args, True, {"state": "queued"}, step_s=60).allowed


def test_near_duplicate_retries_of_a_failing_query_are_warned_then_cut(make_engine, clock):
    # identical_failure is off: the same error under arguments that read alike is its pattern
    # too (it comes first); this test is about near_duplicate's own chain
    engine = make_engine({"modes": {"identical_failure": "off"}})
    queries = [
        "SELECT name, email FROM customers WHERE region = 'EMEA';",
        "select  name, email FROM customers WHERE region = 'EMEA'",
        "SELECT name, email FROM customers WHERE region = 'EMEA' ",
    ]
    for q in queries:
        assert run(engine, clock, "run_sql", {"query": q, "db": "crm"}, False, None).allowed
    warned = run(
        engine, clock, "run_sql", {"db": "crm", "query": "SELECT name,email FROM customers WHERE region='EMEA'"}, False, None
    )
    assert (warned.allowed, warned.heuristic, warned.advisory) == (True, "near_duplicate", True)
    v = engine.check_tool_call(call("run_sql", {"db": "crm", "query": "SELECT name, email FROM customers WHERE region='EMEA'"}))
    assert (v.allowed, v.heuristic) == (False, "near_duplicate")


def test_reworded_retries_of_a_failing_query_are_the_same_error_to_identical_failure(engine, clock):
    queries = [
        "SELECT name, email FROM customers WHERE region = 'EMEA';",
        "select  name, email FROM customers WHERE region = 'EMEA'",
        "SELECT name, email FROM customers WHERE region = 'EMEA' ",
        "SELECT name,email FROM customers WHERE region='EMEA'",
    ]
    vs = [run(engine, clock, "run_sql", {"query": q, "db": "crm"}, False, None) for q in queries]
    assert [v.heuristic for v in vs] == [None, None, None, "identical_failure"] and vs[-1].advisory
    assert vs[-1].counters == {"failures": 3, "max_failures": 3, "same_error": 1, "variants": 2}
    v = engine.check_tool_call(call("run_sql", {"db": "crm", "query": "SELECT name, email FROM customers WHERE region='EMEA'"}))
    assert (v.allowed, v.heuristic) == (False, "identical_failure")


def test_guessing_ids_that_keep_failing_the_same_way_is_warned_then_cut(engine, clock):
    # ids that read alike and fail with the same error: identical_failure's same-error streak
    # (near_duplicate's chain would see it on the same call; identical_failure comes first)
    invalid = {"status": "error", "message": "Invalid Lead ID"}
    vs = []
    for lead in ("L-3530", "L-3635", "L-3692", "L-3668"):
        vs.append(
            run(engine, clock, "get_lead", {"lead_id": lead}, True, invalid, thought=f"Maybe the id is {lead}. Let me try that.")
        )
    assert [v.heuristic for v in vs] == [None, None, None, "identical_failure"] and vs[-1].allowed and vs[-1].advisory
    v = engine.check_tool_call(call("get_lead", {"lead_id": "L-3701"}, thought="Maybe the id is L-3701. Let me try that."))
    assert (v.allowed, v.heuristic) == (False, "identical_failure")


def test_near_duplicate_alone_also_warns_then_cuts_guessed_ids_that_fail_alike(make_engine, clock):
    engine = make_engine({"modes": {"identical_failure": "off"}})  # near_duplicate's chain alone
    invalid = {"status": "error", "message": "Invalid Lead ID"}
    vs = []
    for lead in ("L-3530", "L-3635", "L-3692", "L-3668"):
        vs.append(
            run(engine, clock, "get_lead", {"lead_id": lead}, True, invalid, thought=f"Maybe the id is {lead}. Let me try that.")
        )
    assert [v.heuristic for v in vs] == [None, None, None, "near_duplicate"] and vs[-1].advisory
    v = engine.check_tool_call(call("get_lead", {"lead_id": "L-3701"}, thought="Maybe the id is L-3701. Let me try that."))
    assert (v.allowed, v.heuristic) == (False, "near_duplicate")


def test_similar_calls_that_each_return_something_new_are_work(engine, clock):
    for name in ("Hana Sato", "Dara Novak", "Kofi Mensah", "Goran Ilic", "Ivan Petrov", "Lena Berg"):
        args = {"table": "contacts", "fields": {"name": name, "status": "new"}}
        assert run(engine, clock, "create_record", args, True, {"id": f"REC-{name[:2]}", "status": "created"}).allowed


def test_paging_through_results_is_work(engine, clock):
    for page in range(1, 40):
        payload = {"orders": [f"O-{page}-{i}" for i in range(3)], "page": page, "has_more": True}
        assert run(engine, clock, "list_orders", {"customer": "C-77", "page": page}, True, payload).allowed


def test_a_different_thought_breaks_a_near_duplicate_chain(make_engine, clock):
    engine = make_engine({"near_duplicate": {"thought_similarity": 0.6}})
    for i in range(3):
        run(engine, clock, "get_lead", {"lead_id": f"L-{i}"}, False, None, thought="Maybe the id is wrong, try another.")
    v = engine.check_tool_call(
        call("get_lead", {"lead_id": "L-9"}, thought="The CRM changed its schema; look up the new lead table name first.")
    )
    assert v.allowed


def test_progress_from_a_blank_success_of_the_tool_ends_its_near_duplicate_chain(engine, clock):
    # a new call of the tool that succeeds with nothing to show is progress; it is not in the
    # chain, so the chain ends with it (as every other tool's does)
    variants = ["SELECT name FROM t WHERE id = 1;", "select  name FROM t WHERE id = 1", "SELECT name FROM t WHERE id=1 "]
    for q in variants[:2]:
        assert run(engine, clock, "run_sql", {"query": q}, False, None).allowed
    assert run(engine, clock, "run_sql", {"query": "SHOW TABLES"}, True, "").allowed
    for q in variants[2:] + variants[:1]:
        assert run(engine, clock, "run_sql", {"query": q}, False, None).allowed
    assert engine.check_tool_call(call("run_sql", {"query": variants[1]})).allowed


def test_ping_pong_between_two_calls_with_the_same_results_is_an_oscillation_warned_then_cut(engine, clock):
    assert run(engine, clock, "read_record", {"id": 1}, True, {"name": "Dana"}).allowed
    assert run(engine, clock, "list_orders", {"customer": "C-1"}, True, {"orders": []}).allowed
    assert run(engine, clock, "read_record", {"id": 1}, True, {"name": "Dana"}).allowed
    warned = run(engine, clock, "list_orders", {"customer": "C-1"}, True, {"orders": []})
    assert (warned.allowed, warned.heuristic, warned.advisory) == (True, "oscillation", True)
    assert warned.counters == {"period": 2, "cycles": 2}
    v = engine.check_tool_call(call("read_record", {"id": 1}))
    assert (v.allowed, v.heuristic) == (False, "oscillation")
    assert v.counters == {"period": 2, "cycles": 2}


def test_a_three_step_cycle_is_an_oscillation(engine, clock):
    cycle = [("a", {"x": 1}, {"r": 1}), ("b", {"x": 2}, {"r": 2}), ("c", {"x": 3}, {"r": 3})]
    for tool, args, payload in cycle + cycle[:2]:
        assert run(engine, clock, tool, args, True, payload).allowed
    v = engine.check_tool_call(call("c", {"x": 3}))
    assert v.heuristic == "oscillation" and v.counters["period"] == 3


def test_alternating_calls_whose_results_change_are_not_an_oscillation(engine, clock):
    for i in range(8):
        assert run(engine, clock, "check_balance", {"account": "A"}, True, {"balance": 100 - i}).allowed
        assert run(engine, clock, "list_txns", {"account": "A"}, True, {"count": i}).allowed


def test_semantic_echo_warns_on_the_third_paraphrase_without_tool_progress_and_cuts_the_fourth(engine, clock):
    turns = [
        "To proceed with the refund, I first need to confirm which account you mean.",
        "I need to confirm which account you mean before I can proceed with the refund.",
        "Before I can proceed with the refund I need to confirm which account you mean.",
        "I can proceed with the refund once I confirm which account you mean.",
    ]
    assert engine.record_assistant(say(turns[0])).heuristic is None
    assert engine.record_assistant(say(turns[1])).heuristic is None
    warned = engine.record_assistant(say(turns[2]))
    assert (warned.allowed, warned.heuristic, warned.scope, warned.advisory) == (True, "semantic_echo", "session", True)
    assert warned.observation["warning"] == "SEMANTIC_ECHO"
    v = engine.record_assistant(say(turns[3]))
    assert (v.allowed, v.heuristic, v.scope) == (False, "semantic_echo", "session")


def test_similar_turns_separated_by_tool_progress_are_not_an_echo(engine, clock):
    for i, name in enumerate(["Hana Sato", "Dara Novak", "Kofi Mensah", "Ivan Petrov"]):
        run(engine, clock, "create_record", {"name": name}, True, {"id": f"REC-{i}"})
        assert engine.record_assistant(say(f"Created the contact record for {name}.")).allowed


def test_different_assistant_turns_are_not_an_echo(engine, clock):
    for text in ("Let me look at the logs.", "The error comes from the parser.", "I will patch the tokenizer now."):
        assert engine.record_assistant(say(text)).allowed


def test_agents_trading_the_same_status_messages_are_a_deadlock(engine, clock):
    messages = [
        ("planner", "Waiting for the researcher to send the data before I can plan."),
        ("researcher", "Waiting for the planner to send the plan before I can research."),
        ("planner", "Still waiting for the researcher to send the data before I can plan."),
        ("researcher", "Still waiting for the planner to send the plan before I can research."),
        ("planner", "Still waiting for the researcher to send the data before I can plan, again."),
    ]
    verdicts = [engine.record_assistant(say(text, agent=agent)) for agent, text in messages]
    assert [v.heuristic for v in verdicts[:2]] == [None, None]
    tripped = [v for v in verdicts if v.heuristic]
    assert tripped and tripped[0].heuristic == "agent_deadlock" and tripped[0].allowed and tripped[0].advisory  # warned
    assert (tripped[1].allowed, tripped[1].heuristic) == (False, "agent_deadlock")


def test_agents_exchanging_new_information_are_not_deadlocked(engine, clock):
    messages = [
        ("planner", "Step one: collect the Q3 revenue numbers."),
        ("researcher", "Q3 revenue was 4.2M, up 8 percent."),
        ("planner", "Step two: compare with the Q2 churn report."),
        ("researcher", "Churn fell from 5 to 3 percent between quarters."),
    ]
    for agent, text in messages:
        assert engine.record_assistant(say(text, agent=agent)).heuristic is None


def test_a_user_turn_is_new_information_and_restarts_loop_streaks(engine, clock):
    args = {"query": "SELECT 1"}
    for _ in range(4):  # the fourth is warned
        run(engine, clock, "run_sql", args, False, None)
    assert not engine.check_tool_call(call("run_sql", args)).allowed
    engine.record_user(user("The table was renamed, try again now."))
    v = engine.check_tool_call(call("run_sql", args))
    assert v.allowed and v.heuristic is None


def test_a_loop_halt_blocks_every_later_call_of_the_session(engine, clock):
    for _ in range(3):
        run(engine, clock, "run_sql", {"q": 1}, False, None)
    warned = run(engine, clock, "run_sql", {"q": 1}, False, None)
    assert warned.heuristic == "identical_failure" and warned.allowed  # a warning halts nothing
    cut = engine.check_tool_call(call("run_sql", {"q": 1}))
    assert cut.heuristic == "identical_failure" and not cut.allowed
    v = engine.check_tool_call(call("search_docs", {"q": "something else"}))
    assert not v.allowed and v.heuristic == "identical_failure"
    assert v.reason.startswith("session halted earlier")
    other = engine.check_tool_call(call("search_docs", {"q": "x"}, session="s2"))
    assert other.allowed


def test_similar_writes_that_each_succeed_are_work_even_with_equal_results(engine, clock):
    body = "Hello, please find attached the weekly report for the analytics team. " * 5
    for name in ("ana", "ben", "cai", "dee", "eli", "fay"):
        args = {"to": f"{name}@example.com", "subject": "Weekly report", "body": body}
        assert run(engine, clock, "send_email", args, True, {"status": "sent"}).allowed


def test_lexical_variants_of_a_call_with_the_same_result_are_a_near_duplicate_warned_then_cut(engine, clock):
    for q in ("SELECT * FROM t", "select * from t;", "Select *  From t"):
        assert run(engine, clock, "run_sql", {"query": q}, True, {"rows": []}).allowed
    warned = run(engine, clock, "run_sql", {"query": "SELECT * FROM T"}, True, {"rows": []})
    assert (warned.allowed, warned.heuristic, warned.advisory) == (True, "near_duplicate", True)
    v = engine.check_tool_call(call("run_sql", {"query": "select * FROM t"}))
    assert (v.allowed, v.heuristic) == (False, "near_duplicate")


def test_a_stuck_job_whose_status_only_counts_elapsed_time_is_still_stuck(engine, clock):
    args = {"job_id": "job-9"}
    for i in range(15):
        payload = {"state": "running", "progress": 0.42, "elapsed_s": 10 * i, "checked_at": f"12:00:{i:02}"}
        assert run(engine, clock, "check_job_status", args, True, payload, step_s=10).allowed
    clock.advance(10)
    assert engine.check_tool_call(call("check_job_status", args)).heuristic == "stuck_polling"


# ----------------------------------------------------------------------------- a family of sessions


def test_a_failing_call_retried_across_a_parent_and_its_sub_agents_is_cut_within_five(engine, clock):
    """Sub-agents (sessions that name their parent) share the parent's failing streaks: the same
    broken build retried by a parent and five sub-agents, each trying it once or twice, is
    refused at the family's fifth try, whichever session makes it."""
    tries = [("lead", None)] + [(f"lead/sub{i}", "lead") for i in range(5) for _ in range(2)]
    verdicts = []
    for session, parent in tries:
        who = {"session": session} | ({"parent_session": parent, "depth": 1, "agent": session} if parent else {})
        v = engine.check_tool_call(call("run_build", {"target": "all"}, **who))
        verdicts.append(v)
        if v.allowed:
            engine.record_tool_result(
                result("run_build", False, None, error="linker error: undefined symbol", call_id=v.call_id, **who)
            )
    refused = [i for i, v in enumerate(verdicts, 1) if not v.allowed]
    assert refused and refused[0] <= 5, [(v.allowed, v.heuristic) for v in verdicts]
    assert all(not v.allowed for v in verdicts[refused[0] - 1 :])


def test_sub_agents_that_succeed_or_differ_leave_the_family_alone(engine, clock):
    for i in range(6):
        who = {"session": f"lead/sub{i}", "parent_session": "lead", "depth": 1}
        v = engine.check_tool_call(call("run_build", {"target": f"mod{i}"}, **who))
        assert v.allowed
        engine.record_tool_result(result("run_build", i % 2 == 0, {"ok": True} if i % 2 == 0 else None, call_id=v.call_id, **who))
    v = engine.check_tool_call(call("run_build", {"target": "mod1"}, session="lead"))
    assert v.allowed and v.heuristic is None


def test_a_sender_that_promises_results_is_refused_past_64_calls_in_flight_until_they_age_out(engine, clock):
    """The gateway's protection: 64 decoys never push a call in flight (a failing one) out."""
    first = engine.check_tool_call(call("fetch", {"n": 0}, call_id="c0"))
    for i in range(1, 64):
        assert engine.check_tool_call(call("fetch", {"n": i}, call_id=f"c{i}")).allowed
    over = engine.check_tool_call(call("fetch", {"n": 64}, call_id="c64"))
    assert (over.allowed, over.heuristic) == (False, "invalid_event") and "64 calls" in over.reason
    assert engine.record_tool_result(result("fetch", False, None, call_id="c0", error="boom")).reason == ""
    assert first.allowed and engine.check_tool_call(call("fetch", {"n": 64}, call_id="c64")).allowed
    clock.advance(121.0)  # duplicate_mutation.in_flight_s: the calls in flight are taken as lost
    assert engine.check_tool_call(call("fetch", {"n": 65}, call_id="c65")).allowed


def test_a_sender_that_promises_no_results_forgets_its_oldest_call_in_flight(engine, clock):
    """A coding agent's hooks: calls without results (declined, interrupted, no PostToolUse)
    never hold up the next; the forgotten call is no evidence, its late result none either."""
    for i in range(200):
        v = engine.check_tool_call(call("Bash", {"command": f"ls {i}"}, call_id=f"c{i}", result_promised=False))
        assert (v.allowed, v.heuristic) == (True, None), i
    late = engine.record_tool_result(result("Bash", False, None, call_id="c0", error="boom"))
    assert not late.accepted and late.heuristic == "invalid_event"
    assert engine.record_tool_result(result("Bash", True, "ok", call_id="c199")).accepted
    assert len(engine.store.peek_session("s1").loops.pending) == 63
