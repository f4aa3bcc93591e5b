"""Tool calls and tool messages in the OpenAI chat format, as NeMo's native tool rails and the
LiteLLM guardrail receive them: calls in an assistant message's `tool_calls`, each result a
`{"role": "tool", "tool_call_id": ...}` message that names no tool. A client resends the whole
conversation each request, so only the results that answer the model's latest tool calls are new."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


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


def tool_names(tool_calls: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """call id -> tool name, for the calls that have both."""
    names = {}
    for tool_call in tool_calls:
        name, _, call_id = parse_tool_call(tool_call)
        if isinstance(call_id, str) and isinstance(name, str):
            names[call_id] = name
    return names


@dataclass(frozen=True)
class ToolOutput:
    """A tool message read as the engine records results."""

    ok: bool
    result: Any
    error: Any


def read_tool_output(content: Any) -> ToolOutput:
    """The content parsed as JSON when it is JSON; a text that starts with "Error" is a failed
    call, and its own error text (the engine reads from it whose failure it is)."""
    result = content
    if isinstance(result, str):
        with contextlib.suppress(json.JSONDecodeError):
            result = json.loads(result)
    ok = not (isinstance(result, str) and result.lstrip().lower().startswith("error"))
    return ToolOutput(ok, result, None if ok else result)


def latest_tool_calls(messages: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The tool calls of the conversation's last assistant message that made any."""
    latest: list[Mapping[str, Any]] = []
    for message in messages:
        if message.get("role") == "assistant" and message.get("tool_calls"):
            latest = list(message["tool_calls"])
    return latest


__all__ = ["ToolOutput", "latest_tool_calls", "parse_tool_call", "read_tool_output", "tool_names"]
