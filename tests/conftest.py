"""Shared fixtures: a fake clock, an engine on it, and event builders."""

from __future__ import annotations

import os
from typing import Any

import pytest

os.environ.setdefault("NEMO_GUARDRAILS_NO_USAGE_STATS", "1")

from agent_breaker import Engine, FakeClock, ReceiptKeys  # noqa: E402

SESSION = "s1"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000_000.0)


@pytest.fixture
def keys() -> ReceiptKeys:
    return ReceiptKeys("k1", {"k1": b"k" * 32})


@pytest.fixture
def incidents() -> list:
    return []


@pytest.fixture
def make_engine(clock: FakeClock, keys: ReceiptKeys, incidents: list):
    def make(config: dict[str, Any] | None = None, **kwargs: Any) -> Engine:
        kwargs.setdefault("listeners", [incidents.append])
        kwargs.setdefault("receipt_keys", keys)
        return Engine(config, clock=clock, **kwargs)

    return make


@pytest.fixture
def engine(make_engine) -> Engine:
    return make_engine()


def call(tool: str, args: dict | None = None, *, session: str = SESSION, **kw: Any) -> dict[str, Any]:
    return {"type": "tool_call", "session": session, "tool": tool, "args": args or {}, **kw}


def result(tool: str, ok: bool = True, payload: Any = None, *, session: str = SESSION, **kw: Any) -> dict[str, Any]:
    return {"type": "tool_result", "session": session, "tool": tool, "ok": ok, "result": payload, **kw}


def say(text: str, *, session: str = SESSION, **kw: Any) -> dict[str, Any]:
    return {"type": "assistant", "session": session, "text": text, **kw}


def user(text: str = "", *, session: str = SESSION) -> dict[str, Any]:
    return {"type": "user", "session": session, "text": text}


def final(text: str, *, session: str = SESSION) -> dict[str, Any]:
    return {"type": "final", "session": session, "text": text}


def run(engine: Engine, clock: FakeClock, tool: str, args: dict | None, ok: bool, payload: Any, *, step_s: float = 2.0, **kw: Any):
    """One call and, if it is let through, its result; returns the call's verdict."""
    clock.advance(step_s)
    verdict = engine.check_tool_call(call(tool, args, **kw))
    if verdict.allowed:
        clock.advance(0.5)
        session = kw.get("session", SESSION)
        engine.record_tool_result(result(tool, ok, payload, call_id=verdict.call_id, session=session))
    return verdict
