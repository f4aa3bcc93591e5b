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
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from nemoguardrails.actions import action as _nemo_action

from agent_breaker._aio import without_blocking
from agent_breaker.engine import Engine, incident_log
from agent_breaker.events import InvalidEventError, is_id
from agent_breaker.heuristics import INVALID_EVENT
from agent_breaker.protocol import BY_COLANG, BY_NAME, BY_VERB, KINDS, EventKind, missing_fields, to_engine_event
from agent_breaker.verdicts import BreakerIncident, Incident, observation

_F = TypeVar("_F", bound=Callable[..., Any])


def action(*, name: str) -> Callable[[_F], _F]:
    """NeMo's `@action(name=...)` with its type (nemoguardrails ships none to type checkers):
    it marks the function as an action and returns that same function."""
    mark: Callable[[_F], _F] = _nemo_action(name=name)
    return mark


log = logging.getLogger("agent_breaker.nemo")

#: incidents the engine emitted during the current action call (see `collect_incident`)
_incidents: contextvars.ContextVar[list[Incident | BreakerIncident] | None] = contextvars.ContextVar(
    "agent_breaker_incidents", default=None
)
#: the tenant the caller's API token acts for (None: any tenant); set by `agent-breaker serve`
CALLER_TENANT: contextvars.ContextVar[str | None] = contextvars.ContextVar("agent_breaker_caller_tenant", default=None)
#: the agents and features the caller's API token may name, each None when any (set by `serve`)
CALLER_LABELS: contextvars.ContextVar[tuple[frozenset[str] | None, frozenset[str] | None]] = contextvars.ContextVar(
    "agent_breaker_caller_labels", default=(None, None)
)


def label_problem(fields: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field, reason) when an event names an agent or a feature the caller's token may not use:
    a label picks the overrides, so one outside the token's scope could loosen its own guard."""
    for name, allowed in zip(("agent", "feature"), CALLER_LABELS.get(), strict=True):
        value = fields.get(name)
        if allowed is not None and value is not None and value not in allowed:
            return name, f"this API token may not act as {name} {value!r}"
    return None


#: events the server keeps out of Colang state, by a random reference, for one request
PAYLOADS: dict[str, Mapping[str, Any]] = {}
PAYLOAD_REF = "agent_breaker_ref"
#: a routed verdict's mapped arguments, by the reference of the event it answers (see PAYLOADS)
ROUTE_ARGS: dict[str, Any] = {}


def collect_incident(incident: Incident | BreakerIncident) -> None:
    """Engine listener: keep the incident for the action that caused it to hand to its flow."""
    bucket = _incidents.get()
    if bucket is not None:
        bucket.append(incident)
    else:  # raised outside an action (an operator forcing a breaker): no flow to hand it to
        deliver_incidents([incident.to_dict()])


def deliver_incidents(incidents: Iterable[Mapping[str, Any]]) -> int:
    """The one way incidents leave the NeMo glue: a JSON line each on the
    `agent_breaker.incidents` logger. Returns how many."""
    n = 0
    for data in incidents:
        incident_log.warning(json.dumps(dict(data), sort_keys=True))
        n += 1
    return n


def colang_fields(event: Any) -> Mapping[str, Any]:
    """A Colang event's arguments (or a plain dict: tests). An event the server sent by
    reference (its payload kept out of Colang state) is read back from the request's table."""
    args = getattr(event, "arguments", event)
    if not isinstance(args, Mapping):
        return {}
    ref = args.get(PAYLOAD_REF)
    return args if ref is None else PAYLOADS.get(ref, args)  # gone: run_event refuses it


def _ref_of(event: Any) -> str | None:
    args = getattr(event, "arguments", event)
    return args.get(PAYLOAD_REF) if isinstance(args, Mapping) else None


def _echo(fields: Mapping[str, Any], name: str) -> str | None:
    """An id of the event, repeated in its verdict only when it is a valid id (a megabyte of
    text, or a lone surrogate, is not repeated)."""
    value = fields.get(name)
    return value if is_id(value) else None


def run_event(engine: Engine, kind: EventKind | str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """One event of `kind` (Colang field names) through the engine: the verdict as a dict for
    the flow, with session_id, call_id, accepted and the incidents it raised. A caller whose
    token is bound to a tenant acts for that tenant only. Errors name the protocol's fields."""
    kind = BY_NAME[kind] if isinstance(kind, str) else kind
    bound = CALLER_TENANT.get()
    if bound is not None:
        fields = {**fields, "tenant": bound} if fields.get("tenant") in (None, bound) else {**fields, "tenant": None}
    bucket: list[Incident | BreakerIncident] = []
    token = _incidents.set(bucket)
    try:
        if bound is not None and fields.get("tenant") != bound:
            raise InvalidEventError.of([("tenant", "this API token acts for one tenant only, and it is not this one")])
        outside = label_problem(fields)
        if outside is not None:
            raise InvalidEventError.of([outside])
        if PAYLOAD_REF in fields:
            raise InvalidEventError.of([(PAYLOAD_REF, "reserved for the server's own events (or the request ended)")])
        missing = missing_fields(kind, fields)
        if missing:
            raise InvalidEventError.of([(name, "Field required") for name in missing])
        # the handler the table names answers a Verdict or a ResultVerdict
        out: dict[str, Any] = getattr(engine, kind.handler)(to_engine_event(kind, fields)).to_dict()
    except InvalidEventError as exc:
        reason = f"invalid {kind.colang} event: {exc.renamed(kind.colang_name)}"
        out = {
            "allowed": False,
            "accepted": False,
            "heuristic": INVALID_EVENT,
            "severity": "block",
            "scope": "call",
            "reason": reason,
            "observation": observation(INVALID_EVENT, _echo(fields, "tool_name"), reason, "Send a well-formed event.", None),
        }
    finally:
        _incidents.reset(token)
    out["incidents"] = [i.to_dict() for i in bucket]
    out["session_id"] = _echo(fields, "session_id")
    out["call_id"] = _echo(fields, "call_id") or out.get("call_id")
    out.setdefault("accepted", out.get("allowed", False))
    return out


async def decide(engine: Engine, kind: EventKind | str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """`run_event` without blocking the event loop."""
    return await without_blocking(engine, run_event, engine, kind, fields)


def _guard_action(kind: EventKind) -> Any:
    async def guard(event: Any, agent_breaker_engine: Engine) -> dict[str, Any]:
        out = await decide(agent_breaker_engine, kind, colang_fields(event))
        ref = _ref_of(event)
        route = out.get("route")
        if ref is not None and route is not None and route.get("args") is not None:
            # a fallback's mapped arguments are the caller's payload: they go back by the
            # request's table, like the event came, not through Colang state
            ROUTE_ARGS[ref] = route["args"]
            out["route"] = {**route, "args": None}
        return out

    guard.__name__ = kind.action
    guard.__doc__ = f"{kind.colang} -> the verdict dict its flow sends as {kind.verdict}."
    return action(name=kind.action)(guard)


#: one action per event kind, as the protocol table names them
GUARD_ACTIONS = tuple(_guard_action(kind) for kind in KINDS)


@action(name="report_incidents")
async def report_incidents(incidents: list[dict[str, Any]]) -> int:
    """A trip: hand each incident to the alerting sink. Returns how many were reported."""
    return deliver_incidents(incidents)


# ----------------------------------------------------------------- the chat CLI

_CHAT_HELP = (
    "commands: tool NAME {json args} | result NAME ok {json} | result NAME error TEXT | say TEXT | user TEXT | final TEXT"
)


def parse_chat_line(text: str) -> tuple[EventKind, dict[str, Any]]:
    """A typed chat line as (event kind, Colang-style fields) for session "chat"."""
    words = text.strip().split(None, 1)
    if not words:
        raise InvalidEventError("empty line; " + _CHAT_HELP)
    verb, rest = words[0].lower(), (words[1] if len(words) > 1 else "")
    kind = BY_VERB.get(verb)
    if kind is None:
        raise InvalidEventError(f"unknown command {verb!r}; " + _CHAT_HELP)
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


@action(name="agent_breaker_chat_line")
async def agent_breaker_chat_line(text: str, agent_breaker_engine: Engine) -> str:
    """`nemoguardrails chat`: one typed line through the engine, one verdict line back."""
    try:
        kind, fields = parse_chat_line(text)
    except InvalidEventError as exc:
        return f"BLOCKED {INVALID_EVENT}: {exc}"
    # the verdict line says what tripped; incidents are for the flows' alerting, not this screen
    return verdict_line(kind, await decide(agent_breaker_engine, kind, fields))


# ----------------------------------------------------------------- the chat-completions path


def verdict_event(event: Mapping[str, Any], engine: Engine) -> dict[str, Any]:
    """One agent-breaker Colang event (a dict with "type") through the engine, answered with
    the verdict event the flows would send."""
    kind = BY_COLANG.get(event.get("type", ""))
    if kind is None:
        reason = f"unknown agent-breaker event type; expected one of {sorted(BY_COLANG)}"
        return {
            "type": "ToolCallVerdict",
            "session_id": event.get("session_id"),
            "call_id": event.get("call_id"),
            "allowed": False,
            "heuristic": INVALID_EVENT,
            "severity": "block",
            "reason": reason,
            "observation": None,
        }
    out = run_event(engine, kind, event)
    deliver_incidents(out["incidents"])
    return {"type": kind.verdict, **{name: out.get(name) for name in kind.verdict_fields}}


#: the context key that carries agent-breaker events, and how many one request may carry
CONTEXT_KEY = "agent_breaker_events"
MAX_CONTEXT_EVENTS = 100
_max_context_events = MAX_CONTEXT_EVENTS


def set_max_context_events(n: int) -> None:
    """The server's limit of events per request holds on the context path too."""
    global _max_context_events
    _max_context_events = n


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


@action(name="agent_breaker_context_events")
async def agent_breaker_context_events(data: Any, agent_breaker_engine: Engine) -> str:
    """A context message {"agent_breaker_events": [...]} -> a JSON bot message {"events": [...]};
    "" when the context update is not for agent-breaker."""
    if not isinstance(data, Mapping) or CONTEXT_KEY not in data:
        return ""
    events = context_events([data])
    if len(events) > _max_context_events:
        return json.dumps({"events": [], "error": f"{len(events)} events in one request; the limit is {_max_context_events}"})
    engine = agent_breaker_engine

    def answer() -> list[dict[str, Any]]:
        return [verdict_event(e if isinstance(e, Mapping) else {}, engine) for e in events]

    verdicts = await without_blocking(engine, answer)
    return json.dumps({"events": verdicts})


ACTIONS = (
    *GUARD_ACTIONS,
    report_incidents,
    agent_breaker_chat_line,
    agent_breaker_context_events,
)
