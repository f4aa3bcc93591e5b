"""The request guard on its own, in process: what reaches the app behind it."""

from __future__ import annotations

import asyncio

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
