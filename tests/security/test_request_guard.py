"""The request guard on its own, in process: what reaches the app behind it."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("nemoguardrails")

from agent_breaker.server import Limits, RequestGuard, Tokens


def _guard() -> tuple[RequestGuard, list]:
    reached = []

    async def app(scope, receive, send):
        reached.append(scope["type"])

    return RequestGuard(app, tokens=Tokens({"t" * 20: "*"}), hosts=frozenset({"127.0.0.1"}), limits=Limits()), reached


def test_a_websocket_is_closed_before_it_reaches_any_route():
    guard, reached = _guard()
    sent = []

    async def receive():
        return {"type": "websocket.connect"}

    async def send(message):
        sent.append(message)

    asyncio.run(guard({"type": "websocket", "headers": [(b"host", b"127.0.0.1")]}, receive, send))
    assert reached == [] and sent == [{"type": "websocket.close", "code": 1008}]


def test_lifespan_events_pass_through():
    guard, reached = _guard()

    async def receive():
        return {"type": "lifespan.startup"}

    async def send(message):
        pass

    asyncio.run(guard({"type": "lifespan"}, receive, send))
    assert reached == ["lifespan"]


def _chat(messages: list) -> dict:
    return {"model": "m", "guardrails": {"config_id": "agent_breaker_v1"}, "messages": messages}


def _calls(n: int) -> dict:
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "t", "arguments": "{}"}} for i in range(n)]
    return {"role": "assistant", "content": "", "tool_calls": calls}


def _results(n: int) -> list[dict]:
    return [{"role": "tool", "tool_call_id": f"c{i}", "content": "ok"} for i in range(n)]


@pytest.mark.parametrize(
    "messages",
    [[_calls(101)], [_calls(60), *_results(41)], [_calls(1), *_results(101)]],
    ids=["calls", "calls_and_results", "results"],
)
def test_a_model_turn_with_more_tool_calls_and_results_than_a_request_may_carry_is_refused(messages):
    guard, _ = _guard()
    problem, _ = guard.check_json(
        "/v1/chat/completions", json.dumps(_chat([{"role": "user", "content": "go"}, *messages])).encode()
    )
    assert problem is not None and problem[0] == 413 and "the limit is 100" in problem[1]


def test_a_long_conversation_is_judged_by_its_last_turn_only():
    history = [m for _ in range(80) for m in (_calls(2), *_results(2))]
    guard, _ = _guard()
    body = _chat([{"role": "user", "content": "go"}, *history, _calls(3)])
    assert guard.check_json("/v1/chat/completions", json.dumps(body).encode())[0] is None


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ({"configs": ["a"]}, "tenant"),
        ({"tenant": "acme", "agents": "planner"}, "agents must be a list"),
        ({"tenant": "acme", "roles": ["admin"]}, "unknown keys"),
        (7, "tenant"),
        ("", "tenant"),
    ],
)
def test_a_tokens_file_entry_that_is_not_a_scope_is_refused_naming_it(tmp_path, entry, fragment):
    from agent_breaker.server import ServeError

    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"t" * 20: entry}))
    with pytest.raises(ServeError, match=fragment):
        Tokens.from_env({"AGENT_BREAKER_API_TOKENS_FILE": str(path)})


def test_a_tokens_file_entry_carries_its_scope(tmp_path):
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"t" * 20: {"tenant": "acme", "configs": ["agent_breaker"]}, "u" * 20: "globex"}))
    tokens = Tokens.from_env({"AGENT_BREAKER_API_TOKENS_FILE": str(path)})
    scope = tokens.scope_of("t" * 20)
    assert (scope.tenant, scope.configs, scope.agents) == ("acme", frozenset({"agent_breaker"}), None)
    assert tokens.tenant_of("u" * 20) == "globex" and tokens.scope_of("u" * 20).configs is None
