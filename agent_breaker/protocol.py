"""The event protocol, written down once.

For each kind of agent event: the Colang event the flows match, the trace-format event the
engine takes, how the fields of one map to the other, the engine method that decides it, the
action the flows call, the verdict event they send and its fields, and the chat CLI's verb.
The actions, the chat CLI, the chat-completions context path, the server's events endpoint
and the README table are driven by this table or checked against it (tests parse
rails/flows.co and the README).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: fields every Colang event may carry, and their trace-format names
COMMON_FIELDS: Mapping[str, str] = {
    "session_id": "session",
    "tenant": "tenant",
    "feature": "feature",
    "agent": "agent",
    "depth": "depth",
    "ts": "ts",
    "conversation": "conversation",
}
_SPEND = {"input_tokens": "input_tokens", "output_tokens": "output_tokens", "cost_usd": "cost_usd", "model": "model"}


@dataclass(frozen=True)
class EventKind:
    """One kind of agent event, in every place it appears."""

    name: str  # the trace format's `type`: tool_call, tool_result, ...
    colang: str  # the Colang event the flows match
    verdict: str  # the Colang event the flows send back
    handler: str  # the Engine method that decides it
    action: str  # the registered action the flows call
    fields: Mapping[str, str]  # Colang field -> trace-format field, COMMON_FIELDS included
    required: tuple[str, ...]  # Colang fields an event must carry (besides session_id or conversation)
    verdict_fields: tuple[str, ...]  # the fields of the verdict event, in order
    chat_verb: str  # what a person types in `nemoguardrails chat`

    def colang_name(self, engine_field: str) -> str:
        """The protocol's name of an engine field (for error messages)."""
        for colang, engine in self.fields.items():
            if engine == engine_field:
                return colang
        return engine_field


KINDS: tuple[EventKind, ...] = (
    EventKind(
        "tool_call",
        "ToolCallRequested",
        "ToolCallVerdict",
        "check_tool_call",
        "check_tool_call",
        {
            **COMMON_FIELDS,
            "call_id": "call_id",
            "tool_name": "tool",
            "tool_args": "args",
            "thought": "thought",
            **_SPEND,
            "mutating": "mutating",
            "turn": "turn",
            "parent_session_id": "parent_session",
            "result_promised": "result_promised",
        },
        ("tool_name", "tool_args"),
        ("session_id", "call_id", "allowed", "heuristic", "severity", "reason", "observation", "route", "advisory"),
        "tool",
    ),
    EventKind(
        "tool_result",
        "ToolResultReceived",
        "ToolResultVerdict",
        "record_tool_result",
        "record_tool_result",
        {
            **COMMON_FIELDS,
            "call_id": "call_id",
            "tool_name": "tool",
            "ok": "ok",
            "result": "result",
            "error": "error",
            "latency_ms": "latency_ms",
            "mutating": "mutating",
            "parent_session_id": "parent_session",
            "error_kind": "error_kind",
            "interrupted": "interrupted",
        },
        ("tool_name", "ok"),
        ("session_id", "call_id", "accepted", "heuristic", "reason", "receipt", "warning"),
        "result",
    ),
    EventKind(
        "assistant",
        "AssistantTurn",
        "TurnVerdict",
        "record_assistant",
        "record_assistant_turn",
        {**COMMON_FIELDS, "text": "text", **_SPEND},
        (),
        ("session_id", "allowed", "heuristic", "severity", "reason", "observation"),
        "say",
    ),
    EventKind(
        "user",
        "UserTurn",
        "TurnVerdict",
        "record_user",
        "record_user_turn",
        {**COMMON_FIELDS, "text": "text"},
        (),
        ("session_id", "allowed", "heuristic", "severity", "reason", "observation"),
        "user",
    ),
    EventKind(
        "final",
        "FinalAnswerProposed",
        "FinalAnswerVerdict",
        "verify_final",
        "verify_final_answer",
        {**COMMON_FIELDS, "text": "text", "continued": "continued"},
        (),
        ("session_id", "accepted", "heuristic", "reason"),
        "final",
    ),
)

BY_NAME: Mapping[str, EventKind] = {k.name: k for k in KINDS}
BY_COLANG: Mapping[str, EventKind] = {k.colang: k for k in KINDS}
TOOL_CALL_EVENT = KINDS[0].colang  # the event a gateway checks (POST /v1/agent-breaker/check)
TOOL_RESULT_EVENT = KINDS[1].colang  # the outcome it reports (POST /v1/agent-breaker/result)
BY_VERB: Mapping[str, EventKind] = {k.chat_verb: k for k in KINDS}
VERDICT_TYPES: frozenset[str] = frozenset(k.verdict for k in KINDS)


def to_engine_event(kind: EventKind, fields: Mapping[str, Any]) -> dict[str, Any]:
    """A Colang event's arguments as the trace-format event of `kind` (absent and null fields
    dropped; fields the protocol does not know are ignored, as the trace format says)."""
    event: dict[str, Any] = {"type": kind.name}
    for src, dst in kind.fields.items():
        value = fields.get(src)
        if value is not None:
            event[dst] = value
    return event


def to_colang_event(event: Mapping[str, Any]) -> dict[str, Any]:
    """A trace-format event as the Colang event the flows match (the inverse)."""
    kind = BY_NAME[event["type"]]
    out: dict[str, Any] = {"type": kind.colang}
    for src, dst in kind.fields.items():
        if event.get(dst) is not None:
            out[src] = event[dst]
    return out


def missing_fields(kind: EventKind, fields: Mapping[str, Any]) -> list[str]:
    """The required Colang fields an event lacks."""
    return [name for name in kind.required if fields.get(name) is None]
