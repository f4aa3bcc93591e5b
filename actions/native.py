"""Colang 1.0 actions for NeMo's native tool calling (`rails.tool_output` / `rails.tool_input`).

NeMo 0.24 runs tool rails for Colang 1.0 configs only. The tool-output rail hands the model's
tool calls to `check_native_tool_calls` before they run; the tool-input rail hands each tool
message to `record_native_tool_message`. The session comes from a context message
(`{"role": "context", "content": {"session_id": "..."}}`), with optional tenant, feature and
agent. Absolute imports: NeMo may load this file as a standalone module.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

from agent_breaker.actions.guards import decide, deliver_incidents, verdict_line
from nemoguardrails.actions import action

from agent_breaker.engine import Engine
from agent_breaker.protocol import BY_NAME

_CONTEXT_FIELDS = ("session_id", "tenant", "feature", "agent", "depth")
TOOL_CALL, TOOL_RESULT = BY_NAME["tool_call"], BY_NAME["tool_result"]


def parse_tool_call(tool_call: Mapping[str, Any]) -> tuple[str | None, Any, str | None]:
    """(name, args, id) of a tool call in OpenAI form ({"function": {"name", "arguments"}}) or
    LangChain form ({"name", "args"})."""
    fn = tool_call.get("function")
    if isinstance(fn, Mapping):
        name, args = fn.get("name"), fn.get("arguments")
    else:
        name, args = tool_call.get("name"), tool_call.get("args")
    if isinstance(args, str):
        with contextlib.suppress(json.JSONDecodeError):  # the engine refuses non-object args, saying why
            args = json.loads(args) if args.strip() else {}
    return name, args, tool_call.get("id")


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
        out = await decide(agent_breaker_engine, TOOL_CALL, fields)
        deliver_incidents(out["incidents"])
        verdicts.append(out)
    blocked = [v for v in verdicts if not v.get("allowed")]
    return {
        "allowed": not blocked,
        "message": "\n".join(verdict_line(TOOL_CALL, v) for v in blocked),
        "verdicts": verdicts,
    }


@action(name="record_native_tool_message")
async def record_native_tool_message(
    tool_message: Any,
    tool_name: str | None,
    agent_breaker_engine: Engine,
    tool_call_id: str | None = None,
    context: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A tool message (the tool's output) recorded against its call. The content is parsed
    as JSON when it is JSON; a text that starts with "Error" counts as a failed call, and is its
    error text."""
    result = tool_message
    if isinstance(result, str):
        with contextlib.suppress(json.JSONDecodeError):
            result = json.loads(result)
    ok = not (isinstance(result, str) and result.lstrip().lower().startswith("error"))
    fields = {
        **_from_context(context),
        "tool_name": tool_name,
        "call_id": tool_call_id or None,
        "ok": ok,
        "result": result,
        # the text is the error: it says whose failure it is (an outage or the call's own)
        "error": None if ok else result,
    }
    out = await decide(agent_breaker_engine, TOOL_RESULT, fields)
    deliver_incidents(out["incidents"])
    return out


NATIVE_ACTIONS = (check_native_tool_calls, record_native_tool_message)
