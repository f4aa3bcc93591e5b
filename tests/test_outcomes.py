"""Whose failure a failed result is: the dependency's (it counts for the tool's breaker and gets
a transient error's retries) or the call's own (it feeds the loop detectors only)."""

from __future__ import annotations

import re

import pytest
from conftest import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent_breaker import AgentBreakerConfig
from agent_breaker import _outcomes as outcomes
from agent_breaker._canonical import Canonicalizer
from agent_breaker._churn import ChurnMask
from agent_breaker._outcomes import (
    carries_content,
    classify,
    failure_kind,
    in_progress,
    is_acknowledgement,
    is_blank,
    is_semantic_failure,
    names_dependency_failure,
)
from agent_breaker._policy import auto_reply_matcher
from agent_breaker.config import DEFAULT_AUTO_REPLY_PATTERNS, parse_config
from agent_breaker.events import parse_event

CFG = AgentBreakerConfig()


def failed(tool: str = "fetch", *, error: str | None = None, payload=None, **kw):
    return parse_event(
        {"type": "tool_result", "session": "s", "tool": tool, "ok": False, "error": error, "result": payload, **kw}
    )


@pytest.mark.parametrize(
    "error",
    [
        "HTTP 503 Service Unavailable",
        "503 Service Unavailable",
        "HTTP/1.1 502 Bad Gateway",
        "status code 500",
        "429 Too Many Requests",
        "rate limit exceeded",
        "request timed out after 30s",
        "ReadTimeout",
        "connection refused",
        "ECONNRESET",
        "Temporary failure in name resolution",
        "Internal Server Error",
    ],
)
def test_transport_and_server_errors_are_the_dependencys(error):
    assert failure_kind(failed(error=error), CFG) == "dependency"


@pytest.mark.parametrize(
    "error",
    [
        'relation "orders" does not exist',
        "Command failed with exit code 1",
        "404 Not Found",
        "ValidationError: 1 validation error for Args: amount field required",
        "Your changes have NOT been applied. Please fix your edit command and try again.",
        "SyntaxError: invalid syntax",
        "found 500 rows but expected 3",  # a number is not a status
        "FAILED tests/test_io.py::test_read - AssertionError",
    ],
)
def test_errors_of_the_call_itself_are_the_calls(error):
    assert failure_kind(failed(error=error), CFG) == "call"


@pytest.mark.parametrize(
    ("payload", "kind"),
    [
        ({"error": {"status": 429, "message": "slow down"}}, "dependency"),
        ({"error": {"code": "503"}}, "dependency"),
        ({"status_code": 502}, "dependency"),
        ({"error": {"message": "upstream timed out"}}, "dependency"),
        ({"errors": [{"detail": "x"}], "status": 500}, "dependency"),
        ({"error": {"status": 404, "message": "no such customer"}}, "call"),
        ({"error": "amount must be positive"}, "call"),
        ({"status": "error", "code": 1}, "call"),
        ("test_timeout FAILED", "call"),  # a tool's own text output is not read as an error message
        (None, "call"),
    ],
)
def test_a_structured_payload_says_whose_failure_it_is(payload, kind):
    assert failure_kind(failed(payload=payload), CFG) == kind


def test_the_event_and_then_the_tools_config_override_what_the_text_says():
    assert failure_kind(failed(error="HTTP 503", error_kind="call"), CFG) == "call"
    assert failure_kind(failed(error="exit code 2", error_kind="dependency"), CFG) == "dependency"
    cfg = parse_config({"tools": {"execute_bash": {"failures": "call"}, "warehouse": {"failures": "dependency"}}})
    assert failure_kind(failed("execute_bash", error="curl: connection refused"), cfg) == "call"
    assert failure_kind(failed("warehouse", error="no such table"), cfg) == "dependency"
    assert failure_kind(failed("warehouse", error="no such table", error_kind="call"), cfg) == "call"


def test_only_a_failed_result_has_a_dependency_failure():
    ok = parse_event({"type": "tool_result", "session": "s", "tool": "t", "ok": True, "result": {"status_code": 503}})
    out = classify(ok, CFG, frozenset(), None)
    assert (out.failed, out.dependency) == (False, False)
    out = classify(failed(error="HTTP 503"), CFG, frozenset(), None)
    assert (out.failed, out.dependency) == (True, True)  # and so it gets a transient error's retries


def test_an_unknown_error_kind_is_refused():
    with pytest.raises(Exception, match="error_kind"):
        failed(error="x", error_kind="network")


@pytest.mark.parametrize(
    ("result", "blank"),
    [
        (None, True),
        ("", True),
        ("  \n", True),
        ({}, True),
        ([], False),  # an answer, bare as under a name: nothing matched
        ({"output": ""}, True),
        ({"output": "", "meta": {"stderr": None}}, True),
        ({"output": "OK."}, False),
        ({"results": [], "total": 0}, False),  # an answer: nothing matched
        ({"orders": [], "next_page": None}, False),
        (0, False),
        (False, False),
    ],
)
def test_a_blank_result_says_nothing(result, blank):
    assert is_blank(result) is blank


@pytest.mark.parametrize(
    ("payload", "failure"),
    [
        ({"exit_code": 1, "stderr": "ModuleNotFoundError"}, True),
        ({"returncode": 2, "stdout": ""}, True),
        ({"exitCode": -9}, True),
        ({"exit_code": 0, "stdout": "42 passed"}, False),
    ],
)
def test_a_process_that_exited_non_zero_is_a_failure_even_when_transport_said_ok(payload, failure):
    assert is_semantic_failure(payload) is failure


@pytest.mark.parametrize(
    ("payload", "polling"),
    [
        ({"state": "running"}, True),
        ({"job": {"state": "running", "pct": 30}}, True),
        ({"data": {"job": {"status": "in-progress"}}}, True),
        ({"job": {"state": "done"}}, False),
    ],
)
def test_a_status_at_the_top_or_in_a_held_object_makes_a_poll(payload, polling):
    assert in_progress(payload, frozenset(CFG.stuck_polling.in_progress_values)) is polling


CANON = Canonicalizer((), max_bytes=1 << 20)
MASK = ChurnMask(())


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ({"message_id": "m-1", "status": "sent"}, {"message_id": "m-2", "status": "sent"}),
        ({"agentId": 7, "report": "db down"}, {"agentId": 8, "report": "db down"}),
        ({"id": "a", "runNumber": 4, "took_ms": 12}, {"id": "b", "runNumber": 5, "took_ms": 19}),
        ("1 failed, 3 passed in 0.53s", "1 failed, 3 passed in 1.20s"),
        ("took 120ms", "took 95ms"),
        ("login rejected [ref=e12]", "login rejected [ref=e40]"),
        ("spawned 123e4567-e89b-12d3-a456-426614174000: failed", "spawned 9f0c1d2e-0000-4abc-8def-0123456789ab: failed"),
        ("at 2024-05-01T12:00:01Z: idle", "at 2024-05-01T12:03:17.5Z: idle"),
        ("build #45 failed", "build #46 failed"),
        ("object at 0x7ffd1234", "object at 0x7ffd9876"),
    ],
)
def test_what_churns_is_masked(a, b):
    assert MASK(CANON.canonical(a)) == MASK(CANON.canonical(b))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("1 failed, 3 passed in 0.53s", "0 failed, 4 passed in 0.53s"),
        ({"paid": True}, {"paid": False}),  # ends in "id", but no id
        ({"state": "running", "rows_done": 100}, {"state": "running", "rows_done": 200}),
        ({"order_ids": [1, 2]}, {"order_ids": [1, 3]}),  # a list of ids is an answer
        ("flight on 2024-05-01", "flight on 2024-05-02"),  # a date alone matters
        ("items: 3", "items: 4"),
    ],
)
def test_what_matters_is_kept(a, b):
    assert MASK(CANON.canonical(a)) != MASK(CANON.canonical(b))


def test_a_configured_pattern_masks_too_and_the_built_ins_can_be_turned_off():
    a, b = CANON.canonical({"line": "seq=1 idle"}), CANON.canonical({"line": "seq=2 idle"})
    assert MASK(a) != MASK(b)
    assert ChurnMask([r"seq=\d+"])(a) == ChurnMask([r"seq=\d+"])(b)
    ids = CANON.canonical({"id": 1}), CANON.canonical({"id": 2})
    assert ChurnMask((), builtin=False)(ids[0]) != ChurnMask((), builtin=False)(ids[1])


@pytest.mark.parametrize(
    "block",
    [
        {"progress": {"result_churn_patterns": ["(unclosed"]}},
        {"user_turns": {"auto_reply_patterns": ["[z-a]"]}},
        {"same_answer": {"max_calls": 1}},
        {"stuck_polling": {"max_wait_s": 0}},
        {"budget": {"soft_limit_blocks": "everything"}},
        {"tools": {"x": {"failures": "sometimes"}}},
    ],
)
def test_a_bad_setting_of_the_new_sections_is_refused_by_name(block):
    from agent_breaker.config import ConfigError

    section = next(iter(block))
    with pytest.raises(ConfigError, match=section):
        parse_config(block)


@pytest.mark.parametrize(
    ("args", "content"),
    [
        ({"q": "refund policy"}, False),
        ({"sql": "SELECT * FROM orders WHERE customer_id = 7 LIMIT 500"}, False),
        ({"path": "a.py", "file_text": "import os\n" + "x = 1\n" * 20}, True),
        ({"to": "a@b.c", "body": "word " * 120}, True),
        ({"edits": [{"new": "line\n" * 30}]}, True),
    ],
)
def test_a_call_carries_content_when_an_argument_is_a_body_not_a_query(args, content):
    assert carries_content(args) is content


@pytest.mark.parametrize(
    "payload",
    [
        {"status": "\u00b2"},
        {"status": "1" * 5000},
        {"error": {"code": "\u00b3"}},
        {"retry_after": 10**400, "status": 503},
        {"retry_after": float("inf"), "status": 503},
        {"error": {"retry_after": "9" * 50, "status": 429}},
    ],
)
def test_hostile_numbers_in_a_payload_are_read_without_error(payload):
    out = classify(failed(payload=payload), CFG, frozenset(), None)
    assert out.failed and (out.retry_after_s is None or out.retry_after_s <= 3600)


@pytest.mark.parametrize("error", ["ConnectionError()", "RemoteDisconnected('Remote end closed connection')", "socket hang up"])
def test_transport_exceptions_by_their_python_and_node_names_are_the_dependencys(error):
    assert failure_kind(failed(error=error), CFG) == "dependency"


# the pattern as it was before it was rewritten for speed: the oracle of names_dependency_failure
_OLD_DEPENDENCY = re.compile(
    r"\b(?:http(?:/\d(?:\.\d)?)?|status(?:[ _]code)?|code|error)\W{0,3}(?:5\d\d|429|408)\b"
    r"|\b(?:502|503|504)\b|time[ds]? ?out|timeout|temporar|unavailable|rate.?limit|too many requests"
    r"|connection ?(?:was )?(?:reset|refused|aborted|closed|error)|closed connection|remote ?disconnected"
    r"|socket hang up|econn(?:refused|reset|aborted)|overloaded|throttl|bad gateway"
    r"|internal server error|could not resolve|name or service not known|network (?:is )?unreachable|broken pipe",
    re.IGNORECASE,
)
_FRAGMENTS = [
    "http",
    "HTTP/1.1",
    "http/2",
    "status",
    "Status_Code",
    "status code",
    "code",
    "error",
    "ERROR",
    "502",
    "503",
    "504",
    "500",
    "429",
    "408",
    "599",
    "5000",
    "time",
    "timed",
    "times",
    "out",
    "Timeout",
    "temporar",
    "unavailable",
    "rate",
    "limit",
    "Rate-Limit",
    "too many requests",
    "connection",
    "was ",
    "reset",
    "refused",
    "aborted",
    "closed",
    "remote",
    "disconnected",
    "socket hang up",
    "ECONN",
    "overloaded",
    "throttl",
    "bad gateway",
    "internal server error",
    "could not resolve",
    "name or service not known",
    "network",
    "is ",
    "unreachable",
    "broken pipe",
    " ",
    "  ",
    ":",
    ": ",
    "_",
    "-",
    "/",
    ".",
    "\n",
    "x",
    "a1",
    "\u212a",
    "\u017f",
    "\u0130",
    "é",
    "٥",
]


@settings(max_examples=examples(1500), deadline=None)
@given(st.one_of(st.lists(st.sampled_from(_FRAGMENTS), max_size=12).map("".join), st.text(max_size=60)))
@example("x" * (outcomes._SCANNED_CHARS - 2) + " 503")  # past the scanned part: not read
@example("x" * (outcomes._SCANNED_CHARS - 4) + " 503")
def test_dependency_failures_are_named_as_by_the_old_pattern(text: str):
    assert names_dependency_failure(text) == (_OLD_DEPENDENCY.search(text[: outcomes._SCANNED_CHARS]) is not None)


# the shipped auto-reply patterns as they were before they were rewritten for speed: the oracle
_OLD_AUTO_REPLY = re.compile(
    r"(?:\bauto(?:matic|mated)?[- ]?(?:reply|response|generated)\b)|(?:\bout of (?:the )?office\b)|(?:\bdo not reply\b)"
    r"|(?:\bthis (?:is an? )?(?:automated|automatic) (?:message|reply|response)\b)"
    r"|(?:^\W*please continue (?:working )?on the task\b)",
    re.IGNORECASE,
)
_TURN_FRAGMENTS = [
    "auto",
    "Automatic",
    "AUTOMATED",
    "-",
    " ",
    "reply",
    "Response",
    "generated",
    "out",
    "OUT of",
    " of ",
    "the ",
    "office",
    "do",
    "Do not",
    " not ",
    "this",
    "This is an ",
    "is a ",
    "message",
    "please continue",
    "Please Continue ",
    "working ",
    "on the task",
    "x",
    "9",
    "!",
    "\n",
    "\u212a",
    "\u017f",
    "\u0130",
    "é",
    "_",
]


@settings(max_examples=examples(1500), deadline=None)
@given(st.one_of(st.lists(st.sampled_from(_TURN_FRAGMENTS), max_size=12).map("".join), st.text(max_size=60)))
def test_auto_replies_are_found_as_by_the_old_patterns(text: str):
    matcher = auto_reply_matcher(DEFAULT_AUTO_REPLY_PATTERNS)
    assert matcher is not None and matcher(text) == (_OLD_AUTO_REPLY.search(text) is not None)


@pytest.mark.parametrize(
    "text",
    [
        "undo not reply",
        "Do not reply",
        "xauto reply",
        "AUTO-REPLY",
        "about of office",
        "out of the OFFICE",
        "athis is a automatic reply",
        "This is an automated message",
        "  Please continue on the task",
        "x please continue on the task",
        "\u212aeep: auto reply",
    ],
)
def test_auto_replies_at_word_boundaries_and_in_any_case(text: str):
    matcher = auto_reply_matcher(DEFAULT_AUTO_REPLY_PATTERNS)
    assert matcher is not None and matcher(text) == (_OLD_AUTO_REPLY.search(text) is not None)


@pytest.mark.parametrize(
    ("result", "ack"),
    [
        ("OK.", True),
        ("Saved successfully", True),
        ("Field updated", True),
        ({"ok": True}, True),
        ({"status": "done", "message": "Record created"}, True),
        ({"success": True, "warning": None}, True),
        ("No results found", False),
        ("Invalid action!", False),
        ("Record not saved", False),
        ("Updated the customer's address, the phone number and two of their open orders", False),
        ({"ok": True, "count": 3}, False),
        ({"status": "ok", "results": []}, False),
        ({}, False),
        ([], False),
        (None, False),
    ],
)
def test_an_acknowledgement_only_says_the_call_went_through(result, ack):
    assert is_acknowledgement(result) is ack
