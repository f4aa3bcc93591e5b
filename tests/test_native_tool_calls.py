"""NeMo's native tool calling (Colang 1.0 tool rails) in the OpenAI message format, as a client
sends it over `/v1/chat/completions`: the whole conversation each request, tool messages that
name no tool, paired with their calls by `tool_call_id`. A loop of identical failing calls is
warned (the call goes through) and then cut there exactly as in process, and a long legitimate
run is not."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from conftest import CALL_ERROR

pytest.importorskip("nemoguardrails")

from _server import TOKEN, start
from agent_breaker.actions import ENGINE_PARAM
from agent_breaker.configs import config_path
from nemoguardrails import LLMRails, RailsConfig


@pytest.fixture(autouse=True)
def receipt_key(monkeypatch):
    monkeypatch.setenv("AGENT_BREAKER_RECEIPT_KEYS", "k1:" + "ab" * 32)


class Conversation:
    """An agent's conversation in the OpenAI format, one request per model turn and one per
    tool result, each with the whole history, as a client of /v1/chat/completions sends it."""

    def __init__(self, send: Callable[[list[dict[str, Any]]], str]) -> None:
        self.send = send
        self.messages: list[dict[str, Any]] = [
            {"role": "context", "content": {"session_id": f"native-{uuid.uuid4().hex[:8]}"}},
            {"role": "user", "content": "count the orders"},
        ]
        self.calls = 0

    def call(self, name: str, arguments: str) -> str:
        """The model asks for a tool; the reply's content is empty when the call may run."""
        self.calls += 1
        call = {"id": f"call_{self.calls}", "type": "function", "function": {"name": name, "arguments": arguments}}
        self.messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        return self.send(self.messages)

    def result(self, content: str) -> str:
        self.messages.append({"role": "tool", "tool_call_id": f"call_{self.calls}", "content": content})
        return self.send(self.messages)


def in_process(rails: LLMRails) -> Callable[[list[dict[str, Any]]], str]:
    return lambda messages: asyncio.run(rails.generate_async(messages=list(messages)))["content"]


def loop_until_blocked(conv: Conversation, limit: int = 10) -> tuple[int, str]:
    for _ in range(limit):
        reply = conv.call("run_sql", '{"q": "SELEC count(*) FROM orders"}')
        if reply:
            return conv.calls, reply
        assert conv.result(f"Error: {CALL_ERROR}") == ""
    return 0, ""


def test_a_loop_of_identical_failing_calls_is_cut_at_the_fifth_call_with_unnamed_tool_messages():
    """The fourth call trips identical_failure first: a warning, so it goes through; the fifth is cut."""
    rails = LLMRails(RailsConfig.from_path(str(config_path("agent_breaker_v1"))))
    cut_at, reply = loop_until_blocked(Conversation(in_process(rails)))
    assert cut_at == 5 and reply.startswith("BLOCKED identical_failure: run_sql failed 4 times with the same arguments")


def test_a_long_legitimate_run_is_not_cut_and_each_result_is_recorded_once():
    rails = LLMRails(RailsConfig.from_path(str(config_path("agent_breaker_v1"))))
    engine = rails.runtime.registered_action_params[ENGINE_PARAM]
    recorded: list[str] = []
    record = engine.record_tool_result
    engine.record_tool_result = lambda event: recorded.append(event["call_id"]) or record(event)
    conv = Conversation(in_process(rails))
    session = conv.messages[0]["content"]["session_id"]
    for i in range(40):  # NeMo stops a request at 300 events: every earlier tool message is resent
        assert conv.call("get_order", f'{{"order_id": {i}}}') == ""
        assert engine.awaiting_results(session) == {f"call_{conv.calls}": "get_order"}
        # each order's own content: an answer that only gives back the order id it was asked for
        # around the same status is the same answer each time (same_answer), not new work
        assert conv.result(f'{{"order_id": {i}, "status": "shipped", "total_usd": {20 + i}}}') == ""
        assert engine.awaiting_results(session) == {}  # paired by tool_call_id, though the message names no tool
    assert recorded == [f"call_{i}" for i in range(1, 41)]  # each once, though every request resends them all


def test_over_http_a_loop_of_identical_failing_calls_is_cut_as_in_process():
    server = start({"AGENT_BREAKER_API_TOKEN": TOKEN}, args=("--config", str(config_path("agent_breaker_v1"))), token=TOKEN)
    try:

        def over_http(messages: list[dict[str, Any]]) -> str:
            body = {"model": "m", "guardrails": {"config_id": "agent_breaker_v1"}, "messages": messages}
            r = server.post("/v1/chat/completions", body)
            assert r.status_code == 200, r.text
            return r.json()["choices"][0]["message"].get("content") or ""

        cut_at, reply = loop_until_blocked(Conversation(over_http))
        assert cut_at == 5 and reply.startswith("BLOCKED identical_failure: run_sql failed 4 times with the same arguments")
        # a new conversation (another session) is not affected
        other = Conversation(over_http)
        assert other.call("run_sql", '{"q": "SELECT count(*) FROM orders"}') == ""
    finally:
        server.stop()


def test_awaiting_results_lists_the_calls_that_wait_for_their_result(make_engine):
    engine = make_engine()
    engine.check_tool_call({"session": "s1", "tool": "search", "args": {"q": "a"}, "call_id": "c1"})
    engine.check_tool_call({"session": "s1", "tool": "fetch", "args": {"u": "b"}, "call_id": "c2"})
    engine.check_tool_call({"session": "s1", "tool": "fetch", "args": {"u": "c"}})  # no id: only its tool pairs it
    assert engine.awaiting_results("s1") == {"c1": "search", "c2": "fetch", "~1": "fetch"}
    engine.record_tool_result({"session": "s1", "tool": "search", "call_id": "c1", "ok": True, "result": {"n": 1}})
    engine.record_tool_result({"session": "s1", "tool": "fetch", "ok": True, "result": {"n": 2}})
    assert engine.awaiting_results("s1") == {"c2": "fetch"}
    assert engine.awaiting_results("s1", tenant="acme") == {}  # another tenant's s1
    assert engine.awaiting_results("nobody") == {}


def test_calls_in_flight_leave_out_those_taken_as_lost(engine, clock):
    engine.check_tool_call({"session": "s1", "tool": "search", "args": {"q": "a"}, "call_id": "declined"})
    clock.advance(119.0)
    engine.check_tool_call({"session": "s1", "tool": "fetch", "args": {"u": "b"}, "call_id": "running"})
    assert engine.in_flight("s1") == {"declined": "search", "running": "fetch"}
    clock.advance(2.0)  # past duplicate_mutation.in_flight_s (120 s) for the first
    assert engine.in_flight("s1") == {"running": "fetch"}
    assert engine.awaiting_results("s1") == {"declined": "search", "running": "fetch"}


def test_named_tool_messages_without_ids_are_paired_with_the_calls_that_await_them_not_again():
    """NeMo hands the rails every tool message of the conversation: of those without a
    tool_call_id, only the last as many as the session awaits calls of that tool are new."""
    rails = LLMRails(RailsConfig.from_path(str(config_path("agent_breaker_v1"))))
    engine = rails.runtime.registered_action_params[ENGINE_PARAM]
    recorded: list[Any] = []
    record = engine.record_tool_result
    engine.record_tool_result = lambda event: recorded.append(event["result"]) or record(event)
    messages: list[dict[str, Any]] = [
        {"role": "context", "content": {"session_id": f"native-{uuid.uuid4().hex[:8]}"}},
        {"role": "user", "content": "look it up"},
    ]
    for i in range(3):
        call = {"type": "function", "function": {"name": "search", "arguments": f'{{"q": {i}}}'}}  # no id
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        assert in_process(rails)(messages) == ""
        messages.append({"role": "tool", "name": "search", "content": f'{{"answer_for": {i}}}'})
        assert in_process(rails)(messages) == ""
    assert recorded == [{"answer_for": 0}, {"answer_for": 1}, {"answer_for": 2}]
