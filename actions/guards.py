"""NeMo Guardrails actions: thin adapters from Colang events to the agent-breaker Engine.

Each action takes a Colang event (its `.arguments`) and the engine NeMo injects as the
`agent_breaker_engine` parameter, translates the event's field names into the engine's trace
format, and returns a small dict for the flow. No decision is taken here.

Loaded by NeMo as standalone modules too (from a working directory's `actions/`), so every
import is absolute.
"""

from __future__ import annotations

import contextvars
import json
import logging
from typing import Any, Iterable, Mapping

from nemoguardrails.actions import action

from agent_breaker.engine import Engine, log_incident
from agent_breaker.events import MAX_ID_CHARS, InvalidEventError
from agent_breaker.heuristics import INVALID_EVENT
from agent_breaker.verdicts import Incident, observation

log = logging.getLogger("agent_breaker.nemo")

#: incidents the engine emitted during the current action call (see `collect_incident`)
_incidents: contextvars.ContextVar[list[Incident] | None] = contextvars.ContextVar("agent_breaker_incidents", default=None)
#: the tenant the caller's API token acts for (None: any tenant); set by `agent-breaker serve`
CALLER_TENANT: contextvars.ContextVar[str | None] = contextvars.ContextVar("agent_breaker_caller_tenant", default=None)
#: events the server keeps out of Colang state, by a random reference, for one request
PAYLOADS: dict[str, Mapping[str, Any]] = {}
PAYLOAD_REF = "agent_breaker_ref"

# Colang event field -> engine trace field, per event kind
_COMMON = {"session_id": "session", "tenant": "tenant", "feature": "feature", "agent": "agent", "depth": "depth", "ts": "ts",
           "conversation": "conversation"}
_FIELDS = {
    "tool_call": {**_COMMON, "call_id": "call_id", "tool_name": "tool", "tool_args": "args", "thought": "thought",
                  "input_tokens": "input_tokens", "output_tokens": "output_tokens", "cost_usd": "cost_usd",
                  "model": "model", "mutating": "mutating"},
    "tool_result": {**_COMMON, "call_id": "call_id", "tool_name": "tool", "ok": "ok", "result": "result",
                    "error": "error", "latency_ms": "latency_ms", "mutating": "mutating"},
    "assistant": {**_COMMON, "text": "text", "input_tokens": "input_tokens", "output_tokens": "output_tokens",
                  "cost_usd": "cost_usd", "model": "model"},
    "user": {**_COMMON, "text": "text"},
    "final": {**_COMMON, "text": "text"},
}


def collect_incident(incident: Incident) -> None:
    """Engine listener: keep the incident for the action that caused it to hand to its flow."""
    bucket = _incidents.get()
    if bucket is not None:
        bucket.append(incident)


def to_engine_event(kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """A Colang event's arguments as an engine event of `kind` (absent and null fields dropped)."""
    names = _FIELDS[kind]
    event: dict[str, Any] = {"type": kind}
    for src, dst in names.items():
        value = fields.get(src)
        if value is not None:
            event[dst] = value
    return event


def to_colang_event(event: Mapping[str, Any]) -> dict[str, Any]:
    """An engine (trace-format) event as the Colang event the flows match (the inverse)."""
    kind = event["type"]
    colang_type = next(t for t, (k, _) in EVENT_KINDS.items() if k == kind)
    out: dict[str, Any] = {"type": colang_type}
    for src, dst in _FIELDS[kind].items():
        if event.get(dst) is not None:
            out[src] = event[dst]
    return out


def colang_fields(event: Any) -> Mapping[str, Any]:
    """A Colang event's arguments (or a plain dict: tests). An event the server sent by
    reference (its payload kept out of Colang state) is read back from the request's table."""
    args = getattr(event, "arguments", event)
    if not isinstance(args, Mapping):
        return {}
    ref = args.get(PAYLOAD_REF)
    return args if ref is None else PAYLOADS.get(ref, args)  # gone: run_event refuses it


def _valid_tool_name(fields: Mapping[str, Any]) -> str | None:
    """The tool an invalid event names, when that name is itself valid (else it is not repeated)."""
    name = fields.get("tool_name")
    return name if isinstance(name, str) and 0 < len(name) <= MAX_ID_CHARS and name.isprintable() else None


def run_event(engine: Engine, kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """One event of `kind` (Colang field names) through the engine: the verdict as a dict for
    the flow, with session_id, call_id, accepted and the incidents it raised. A caller whose
    token is bound to a tenant acts for that tenant only."""
    bound = CALLER_TENANT.get()
    if bound is not None:
        fields = {**fields, "tenant": bound} if fields.get("tenant") in (None, bound) else {**fields, "tenant": None}
    bucket: list[Incident] = []
    token = _incidents.set(bucket)
    try:
        if bound is not None and fields.get("tenant") != bound:
            raise InvalidEventError("tenant: this API token acts for one tenant only, and it is not this one")
        if PAYLOAD_REF in fields:
            raise InvalidEventError(f"{PAYLOAD_REF} is reserved for the server's own events (or the request ended)")
        ev = to_engine_event(kind, fields)
        handler = {
            "tool_call": engine.check_tool_call,
            "tool_result": engine.record_tool_result,
            "assistant": engine.record_assistant,
            "user": engine.record_user,
            "final": engine.verify_final,
        }[kind]
        out = handler(ev).to_dict()
    except InvalidEventError as exc:
        reason = f"invalid {kind} event: {exc}"
        out = {
            "allowed": False,
            "accepted": False,
            "heuristic": INVALID_EVENT,
            "severity": "block",
            "scope": "call",
            "reason": reason,
            "observation": observation(INVALID_EVENT, _valid_tool_name(fields), reason, "Send a well-formed event.", None),
        }
    finally:
        _incidents.reset(token)
    out["incidents"] = [i.to_dict() for i in bucket]
    out["session_id"] = fields.get("session_id")
    out["call_id"] = fields.get("call_id") or out.get("call_id")
    out.setdefault("accepted", out.get("allowed", False))
    return out


@action(name="check_tool_call")
async def check_tool_call(event: Any, agent_breaker_engine: Engine) -> dict[str, Any]:
    """ToolCallRequested -> may the call run?"""
    return run_event(agent_breaker_engine, "tool_call", colang_fields(event))


@action(name="record_tool_result")
async def record_tool_result(event: Any, agent_breaker_engine: Engine) -> dict[str, Any]:
    """ToolResultReceived -> recorded; anomalies; a receipt for a mutating tool's success."""
    return run_event(agent_breaker_engine, "tool_result", colang_fields(event))


@action(name="record_assistant_turn")
async def record_assistant_turn(event: Any, agent_breaker_engine: Engine) -> dict[str, Any]:
    """AssistantTurn -> spend, echo and deadlock checks."""
    return run_event(agent_breaker_engine, "assistant", colang_fields(event))


@action(name="record_user_turn")
async def record_user_turn(event: Any, agent_breaker_engine: Engine) -> dict[str, Any]:
    """UserTurn -> new information: loop streaks start over."""
    return run_event(agent_breaker_engine, "user", colang_fields(event))


@action(name="verify_final_answer")
async def verify_final_answer(event: Any, agent_breaker_engine: Engine) -> dict[str, Any]:
    """FinalAnswerProposed -> are its references and claimed actions backed by receipts?"""
    return run_event(agent_breaker_engine, "final", colang_fields(event))


@action(name="report_incidents")
async def report_incidents(incidents: list[dict[str, Any]]) -> int:
    """A trip: hand each incident to the alerting sink (one JSON line each on the
    `agent_breaker.incidents` logger). Returns how many were reported."""
    for data in incidents:
        log_incident(Incident(**data))
    return len(incidents)


# ----------------------------------------------------------------- the chat CLI

_CHAT_HELP = (
    'commands: tool NAME {json args} | result NAME ok {json} | result NAME error TEXT | say TEXT | '
    "user TEXT | final TEXT"
)


def parse_chat_line(text: str) -> tuple[str, dict[str, Any]]:
    """A typed chat line as (event kind, Colang-style fields) for session "chat"."""
    words = text.strip().split(None, 1)
    if not words:
        raise InvalidEventError("empty line; " + _CHAT_HELP)
    verb, rest = words[0].lower(), (words[1] if len(words) > 1 else "")
    fields: dict[str, Any] = {"session_id": "chat"}
    if verb == "tool":
        name, _, raw = rest.partition(" ")
        fields.update(tool_name=name, tool_args=_json(raw.strip() or "{}", "tool args"))
        return "tool_call", fields
    if verb == "result":
        parts = rest.split(None, 2)
        if len(parts) < 2 or parts[1] not in ("ok", "error"):
            raise InvalidEventError("expected 'result NAME ok {json}' or 'result NAME error TEXT'")
        fields.update(tool_name=parts[0], ok=parts[1] == "ok")
        payload = parts[2] if len(parts) > 2 else ""
        if parts[1] == "ok":
            fields["result"] = _json(payload or "null", "result")
        else:
            fields["error"] = payload
        return "tool_result", fields
    if verb in ("say", "user", "final"):
        fields["text"] = rest
        return {"say": "assistant", "user": "user", "final": "final"}[verb], fields
    raise InvalidEventError(f"unknown command {verb!r}; " + _CHAT_HELP)


def _json(raw: str, what: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidEventError(f"{what} are not JSON: {exc.msg}") from None


def verdict_line(kind: str, out: Mapping[str, Any]) -> str:
    """One line a person reads: ALLOWED or BLOCKED, then the heuristic and the reason."""
    ok = out.get("accepted", out.get("allowed", False)) if kind == "tool_result" else out.get("allowed", False)
    head = "ALLOWED" if ok else "BLOCKED"
    heuristic = out.get("heuristic")
    if not heuristic:
        extra = f" receipt {out['receipt']['sig'][:12]}" if kind == "tool_result" and out.get("receipt") else ""
        return f"{head}{extra}"
    severity = " (observe)" if ok and out.get("severity") == "warn" else ""
    line = f"{head} {heuristic}{severity}: {out.get('reason', '')}"
    obs = out.get("observation")
    if not ok and obs and obs.get("actionable_instruction"):
        line += f" -> {obs['actionable_instruction']}"
    return line


@action(name="agent_breaker_chat_line")
async def agent_breaker_chat_line(text: str, agent_breaker_engine: Engine) -> str:
    """`nemoguardrails chat`: one typed line through the engine, one verdict line back."""
    try:
        kind, fields = parse_chat_line(text)
    except InvalidEventError as exc:
        return f"BLOCKED {INVALID_EVENT}: {exc}"
    # the verdict line says what tripped; incidents are for the flows' alerting, not this screen
    return verdict_line(kind, run_event(agent_breaker_engine, kind, fields))


# ----------------------------------------------------------------- the chat-completions path

#: Colang event type -> (engine kind, verdict event type)
EVENT_KINDS = {
    "ToolCallRequested": ("tool_call", "ToolCallVerdict"),
    "ToolResultReceived": ("tool_result", "ToolResultVerdict"),
    "AssistantTurn": ("assistant", "TurnVerdict"),
    "UserTurn": ("user", "TurnVerdict"),
    "FinalAnswerProposed": ("final", "FinalAnswerVerdict"),
}
_VERDICT_FIELDS = {
    "ToolCallVerdict": ("session_id", "call_id", "allowed", "heuristic", "severity", "reason", "observation"),
    "ToolResultVerdict": ("session_id", "call_id", "accepted", "heuristic", "reason", "receipt"),
    "TurnVerdict": ("session_id", "allowed", "heuristic", "severity", "reason", "observation"),
    "FinalAnswerVerdict": ("session_id", "accepted", "heuristic", "reason"),
}


def verdict_event(event: Mapping[str, Any], engine: Engine) -> dict[str, Any]:
    """One agent-breaker Colang event (a dict with "type") through the engine, answered with
    the verdict event the flows would send."""
    kind, verdict_type = EVENT_KINDS.get(event.get("type", ""), (None, None))
    if kind is None or verdict_type is None:
        reason = f"unknown agent-breaker event type; expected one of {sorted(EVENT_KINDS)}"
        return {"type": "ToolCallVerdict", "session_id": event.get("session_id"), "call_id": event.get("call_id"),
                "allowed": False, "heuristic": INVALID_EVENT, "severity": "block", "reason": reason, "observation": None}
    out = run_event(engine, kind, event)
    for data in out["incidents"]:
        log_incident(Incident(**data))
    return {"type": verdict_type, **{name: out.get(name) for name in _VERDICT_FIELDS[verdict_type]}}


#: the context key that carries agent-breaker events, and how many one request may carry
CONTEXT_KEY = "agent_breaker_events"
MAX_CONTEXT_EVENTS = 100


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
    carriers = [i for i, m in enumerate(messages) if m.get("role") == "context" and isinstance(m.get("content"), Mapping)
                and CONTEXT_KEY in m["content"]]
    if len(carriers) < 2:
        return messages
    events = context_events(messages[i]["content"] for i in carriers)
    out = list(messages)
    out[carriers[0]] = {**out[carriers[0]], "content": {**out[carriers[0]]["content"], CONTEXT_KEY: events}}
    for i in carriers[1:]:
        rest = {k: v for k, v in out[i]["content"].items() if k != CONTEXT_KEY}
        out[i] = {**out[i], "content": rest}
    return out


@action(name="agent_breaker_context_events")
async def agent_breaker_context_events(data: Any, agent_breaker_engine: Engine) -> str:
    """A context message {"agent_breaker_events": [...]} -> a JSON bot message {"events": [...]};
    "" when the context update is not for agent-breaker."""
    if not isinstance(data, Mapping) or CONTEXT_KEY not in data:
        return ""
    events = context_events([data])
    if len(events) > MAX_CONTEXT_EVENTS:
        return json.dumps({"events": [], "error": f"{len(events)} events in one request; the limit is {MAX_CONTEXT_EVENTS}"})
    verdicts = [verdict_event(e if isinstance(e, Mapping) else {}, agent_breaker_engine) for e in events]
    return json.dumps({"events": verdicts})


ACTIONS = (
    check_tool_call,
    record_tool_result,
    record_assistant_turn,
    record_user_turn,
    verify_final_answer,
    report_incidents,
    agent_breaker_chat_line,
    agent_breaker_context_events,
)
