"""NeMo Guardrails actions: the Colang flows' way to the engine.

Each action takes a Colang event (its `.arguments`) and the engine NeMo injects as the
`agent_breaker_engine` parameter, hands it to `agent_breaker.dispatch` with the request's caller,
and returns what the flow reads. No decision, and no rule of the guard, is here.

Loaded by NeMo as standalone modules too (from a working directory's `actions/`), so every
import is absolute.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from nemoguardrails.actions import action as _nemo_action

from agent_breaker._aio import without_blocking
from agent_breaker._byref import ROUTE_ARGS, fields_of, ref_of
from agent_breaker._chat import parse_chat_line, refused_line, verdict_line
from agent_breaker._context_events import CONTEXT_KEY, context_events, limit
from agent_breaker.dispatch import CALLER, decide_async, deliver_incidents, verdict_event
from agent_breaker.engine import Engine
from agent_breaker.events import InvalidEventError
from agent_breaker.protocol import KINDS, EventKind

_F = TypeVar("_F", bound=Callable[..., Any])


def action(*, name: str) -> Callable[[_F], _F]:
    """NeMo's `@action(name=...)` with its type (nemoguardrails ships none to type checkers):
    it marks the function as an action and returns that same function."""
    mark: Callable[[_F], _F] = _nemo_action(name=name)
    return mark


def _guard_action(kind: EventKind) -> Any:
    async def guard(event: Any, agent_breaker_engine: Engine) -> dict[str, Any]:
        out = await decide_async(agent_breaker_engine, kind, fields_of(event), CALLER.get())
        ref = ref_of(event)
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


@action(name="agent_breaker_chat_line")
async def agent_breaker_chat_line(text: str, agent_breaker_engine: Engine) -> str:
    """`nemoguardrails chat`: one typed line through the engine, one verdict line back."""
    try:
        kind, fields = parse_chat_line(text)
    except InvalidEventError as exc:
        return refused_line(exc)
    # the verdict line says what tripped; incidents are for the flows' alerting, not this screen
    return verdict_line(kind, await decide_async(agent_breaker_engine, kind, fields, CALLER.get()))


@action(name="agent_breaker_context_events")
async def agent_breaker_context_events(data: Any, agent_breaker_engine: Engine) -> str:
    """A context message {"agent_breaker_events": [...]} -> a JSON bot message {"events": [...]};
    "" when the context update is not for agent-breaker."""
    if not isinstance(data, Mapping) or CONTEXT_KEY not in data:
        return ""
    events = context_events([data])
    if len(events) > limit():
        return json.dumps({"events": [], "error": f"{len(events)} events in one request; the limit is {limit()}"})
    engine, caller = agent_breaker_engine, CALLER.get()

    def answer() -> list[dict[str, Any]]:
        return [verdict_event(engine, e if isinstance(e, Mapping) else {}, caller) for e in events]

    verdicts = await without_blocking(engine, answer)
    return json.dumps({"events": verdicts})


ACTIONS = (
    *GUARD_ACTIONS,
    report_incidents,
    agent_breaker_chat_line,
    agent_breaker_context_events,
)
