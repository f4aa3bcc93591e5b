"""Tool calls and tool messages in the OpenAI chat format, as NeMo's native tool rails and the
LiteLLM guardrail receive them: calls in an assistant message's `tool_calls`, each result a
`{"role": "tool", "tool_call_id": ...}` message that names no tool. A client resends the whole
conversation each request, so only the results that answer the model's latest tool calls are new."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ._guarded import MAX_ERROR_CHARS


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


#: a tool message that reports a failure: "Error: ...", "ERROR 500 ..." (not "Errors: 0", "error_rate=...")
_FAILED = re.compile(r"\s*error\b(?![_=])", re.IGNORECASE)


def read_tool_output(content: Any) -> ToolOutput:
    """The content parsed as JSON when it is JSON; a text that starts with the word "Error" is a
    failed call, and (its first MAX_ERROR_CHARS) its error text: the engine reads from it whose
    failure it is."""
    result = content
    if isinstance(result, str):
        with contextlib.suppress(json.JSONDecodeError):
            result = json.loads(result)
    if isinstance(result, str) and _FAILED.match(result):
        return ToolOutput(False, result, result[:MAX_ERROR_CHARS])
    return ToolOutput(True, result, None)


def latest_tool_calls(messages: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The tool calls of the conversation's last assistant message that made any."""
    latest: list[Mapping[str, Any]] = []
    for message in messages:
        if message.get("role") == "assistant" and message.get("tool_calls"):
            latest = list(message["tool_calls"])
    return latest


__all__ = ["ToolOutput", "latest_tool_calls", "parse_tool_call", "read_tool_output", "tool_names"]
