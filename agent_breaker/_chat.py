"""`nemoguardrails chat` with an agent-breaker config: a typed line is one event, and the answer
one line a person reads."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from . import heuristics as H
from .events import InvalidEventError
from .protocol import BY_VERB, EventKind

HELP = "commands: tool NAME {json args} | result NAME ok {json} | result NAME error TEXT | say TEXT | user TEXT | final TEXT"


def parse_chat_line(text: str) -> tuple[EventKind, dict[str, Any]]:
    """A typed chat line as (event kind, Colang-style fields) for session "chat"."""
    words = text.strip().split(None, 1)
    if not words:
        raise InvalidEventError("empty line; " + HELP)
    verb, rest = words[0].lower(), (words[1] if len(words) > 1 else "")
    kind = BY_VERB.get(verb)
    if kind is None:
        raise InvalidEventError(f"unknown command {verb!r}; " + HELP)
    fields: dict[str, Any] = {"session_id": "chat"}
    if kind.name == "tool_call":
        name, _, raw = rest.partition(" ")
        fields.update(tool_name=name, tool_args=_json(raw.strip() or "{}", "tool args"))
    elif kind.name == "tool_result":
        parts = rest.split(None, 2)
        if len(parts) < 2 or parts[1] not in ("ok", "error"):
            raise InvalidEventError("expected 'result NAME ok {json}' or 'result NAME error TEXT'")
        fields.update(tool_name=parts[0], ok=parts[1] == "ok")
        payload = parts[2] if len(parts) > 2 else ""
        if parts[1] == "ok":
            fields["result"] = _json(payload or "null", "result")
        else:
            fields["error"] = payload
    else:
        fields["text"] = rest
    return kind, fields


def _json(raw: str, what: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidEventError(f"{what} are not JSON: {exc.msg}") from None


def refused_line(exc: InvalidEventError) -> str:
    """The answer to a line that is no event."""
    return f"BLOCKED {H.INVALID_EVENT}: {exc}"


def verdict_line(kind: EventKind, out: Mapping[str, Any]) -> str:
    """One line a person reads: ALLOWED or BLOCKED, then the heuristic and the reason."""
    result = kind.name == "tool_result"
    ok = out.get("accepted", out.get("allowed", False)) if result else out.get("allowed", False)
    head = "ALLOWED" if ok else "BLOCKED"
    heuristic = out.get("heuristic")
    if not heuristic:
        extra = f" receipt {out['receipt']['sig'][:12]}" if result and out.get("receipt") else ""
        return f"{head}{extra}"
    severity = (" (warning)" if out.get("advisory") else " (observe)") if ok and out.get("severity") == "warn" else ""
    line = f"{head} {heuristic}{severity}: {out.get('reason', '')}"
    obs = out.get("observation")
    if not ok and obs and obs.get("actionable_instruction"):
        line += f" -> {obs['actionable_instruction']}"
    return line
