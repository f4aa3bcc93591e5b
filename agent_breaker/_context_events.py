"""Agent-breaker events in chat-completions context messages: `{"role": "context", "content":
{"agent_breaker_events": [...]}}`, answered by a JSON bot message `{"events": [...]}`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: the context key that carries agent-breaker events
CONTEXT_KEY = "agent_breaker_events"
#: how many one request may carry, unless the server is told otherwise
MAX_CONTEXT_EVENTS = 100
_limit = MAX_CONTEXT_EVENTS


def set_limit(n: int) -> None:
    """`agent-breaker serve` holds the context path to its own limit of events per request."""
    global _limit
    _limit = n


def limit() -> int:
    """How many agent-breaker events one request may carry on the context path."""
    return _limit


def context_events(contents: Iterable[Any]) -> list[Any]:
    """The agent-breaker events of context message contents, in order."""
    events: list[Any] = []
    for content in contents:
        if isinstance(content, Mapping) and CONTEXT_KEY in content:
            found = content[CONTEXT_KEY]
            events.extend(found if isinstance(found, list) else [found])
    return events


def merge_context_messages(messages: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Every context message's agent-breaker events moved into the first one that has any
    (NeMo makes one event of each context message, and the guard answers one of them)."""
    if not messages:
        return messages
    carriers = [
        i
        for i, m in enumerate(messages)
        if m.get("role") == "context" and isinstance(m.get("content"), Mapping) and CONTEXT_KEY in m["content"]
    ]
    if len(carriers) < 2:
        return messages
    events = context_events(messages[i]["content"] for i in carriers)
    out = list(messages)
    out[carriers[0]] = {**out[carriers[0]], "content": {**out[carriers[0]]["content"], CONTEXT_KEY: events}}
    for i in carriers[1:]:
        rest = {k: v for k, v in out[i]["content"].items() if k != CONTEXT_KEY}
        out[i] = {**out[i], "content": rest}
    return out
