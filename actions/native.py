"""Colang 1.0 actions for NeMo's native tool calling (`rails.tool_output` / `rails.tool_input`).

NeMo 0.24 runs tool rails for Colang 1.0 configs only. The tool-output rail hands the model's
tool calls to `check_native_tool_calls` before they run; the tool-input rail hands each tool
message to `record_native_tool_message`. The session comes from a context message
(`{"role": "context", "content": {"session_id": "..."}}`), with optional tenant, feature and
agent. Over `/v1/chat/completions` a tool message names no tool (NeMo passes "unknown") and the
client resends every earlier one: `new_native_tool_messages` keeps the ones that answer calls
the session awaits, named by their call's tool (paired by `tool_call_id`).
Absolute imports: NeMo may load this file as a standalone module.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mypy reads actions/ as the package `actions` (pyproject's `files`), not by its installed name
    from actions.guards import action
else:
    from agent_breaker.actions.guards import action

from agent_breaker._aio import without_blocking
from agent_breaker._chat import verdict_line
from agent_breaker._openai_format import parse_tool_call, read_tool_output
from agent_breaker.dispatch import CALLER, decide_async, deliver_incidents
from agent_breaker.engine import UNNAMED_CALL, Engine
from agent_breaker.events import InvalidEventError
from agent_breaker.protocol import BY_NAME
from agent_breaker.store import StorageError

_CONTEXT_FIELDS = ("session_id", "tenant", "feature", "agent", "depth")
TOOL_CALL, TOOL_RESULT = BY_NAME["tool_call"], BY_NAME["tool_result"]


def _from_context(context: Mapping[str, Any] | None) -> dict[str, Any]:
    context = context or {}
    return {k: context[k] for k in _CONTEXT_FIELDS if context.get(k) is not None}


@action(name="check_native_tool_calls")
async def check_native_tool_calls(
    tool_calls: list[Mapping[str, Any]] | None, agent_breaker_engine: Engine, context: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Every tool call of a model turn through the engine; the turn runs only if all may."""
    verdicts = []
    for tool_call in tool_calls or []:
        name, args, call_id = parse_tool_call(tool_call)
        fields = {**_from_context(context), "tool_name": name, "tool_args": args, "call_id": call_id}
        out = await decide_async(agent_breaker_engine, TOOL_CALL, fields, CALLER.get())
        deliver_incidents(out["incidents"])
        verdicts.append(out)
    blocked = [v for v in verdicts if not v.get("allowed")]
    return {
        "allowed": not blocked,
        "message": "\n".join(verdict_line(TOOL_CALL, v) for v in blocked),
        "verdicts": verdicts,
    }


@action(name="new_native_tool_messages")
async def new_native_tool_messages(
    tool_messages: list[Mapping[str, Any]] | None, agent_breaker_engine: Engine, context: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The tool messages that answer calls the session awaits, each named by its call's tool.
    A client resends the whole conversation: the rest were recorded by an earlier request (or
    answer calls the guard never let through). A message without a `tool_call_id` is paired by
    its tool: of those, the last as many as the session awaits calls of that tool without an id."""
    messages = [dict(m) for m in tool_messages or [] if isinstance(m, Mapping)]
    fields = _from_context(context)
    if "session_id" not in fields:
        return messages  # the record refuses them, saying a session is needed
    engine = agent_breaker_engine
    tenant = fields.get("tenant")
    awaiting = functools.partial(
        engine.awaiting_results, str(fields["session_id"]), tenant=None if tenant is None else str(tenant)
    )
    try:
        awaited = await without_blocking(engine, awaiting)
    except (InvalidEventError, StorageError):
        return messages  # each record says what is wrong (bad ids, the store down) and fails closed
    unnamed = Counter(tool for call_id, tool in awaited.items() if call_id.startswith(UNNAMED_CALL))
    new = []
    for message in reversed(messages):
        call_id = message.get("tool_call_id")
        if call_id and not call_id.startswith(UNNAMED_CALL):
            if call_id in awaited:
                new.append({**message, "name": awaited[call_id]})
        elif unnamed[message.get("name")] > 0:
            unnamed[message.get("name")] -= 1
            new.append(message)
    return new[::-1]


@action(name="record_native_tool_message")
async def record_native_tool_message(
    tool_message: Any,
    tool_name: str | None,
    agent_breaker_engine: Engine,
    tool_call_id: str | None = None,
    context: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A tool message (the tool's output) recorded against its call. The content is parsed as
    JSON when it is JSON; a text that starts with "Error" counts as a failed call, and is its
    error text."""
    output = read_tool_output(tool_message)
    fields = {
        **_from_context(context),
        "tool_name": tool_name,
        "call_id": tool_call_id or None,
        "ok": output.ok,
        "result": output.result,
        # the text is the error: it says whose failure it is (an outage or the call's own)
        "error": output.error,
    }
    out: dict[str, Any] = await decide_async(agent_breaker_engine, TOOL_RESULT, fields, CALLER.get())
    deliver_incidents(out["incidents"])
    return out


NATIVE_ACTIONS = (check_native_tool_calls, new_native_tool_messages, record_native_tool_message)
