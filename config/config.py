"""The `nemoguardrails server` root (multi-config mode): adds the agent-breaker events endpoint.

    POST /v1/agent-breaker/events
    {"config_id": "agent_breaker", "session_id": "S", "events": [{"type": "ToolCallRequested", ...}]}
 -> {"session_id": "S", "events": [{"type": "ToolCallVerdict", ...}]}

The stock /v1/chat/completions gives every request a fresh Colang state and drops custom
output events; this endpoint keeps one live Colang state per (config, session), evicted when
idle, and answers with the verdict events. NeMo loads this file as a standalone module, so
its imports are absolute.
"""

# no `from __future__ import annotations`: NeMo loads this file outside sys.modules, where
# pydantic/FastAPI could not resolve string annotations
import asyncio
import time
from collections import OrderedDict
from typing import Any

from pydantic import BaseModel, Field

from agent_breaker.actions.guards import EVENT_KINDS

AGENT_BREAKER_EVENTS = frozenset(EVENT_KINDS)
VERDICT_EVENTS = frozenset(verdict for _, verdict in EVENT_KINDS.values())
_NOISE = ("uid", "event_created_at", "source_uid")

SESSION_IDLE_S = 900.0
MAX_SESSIONS = 10_000


class EventsRequest(BaseModel):
    config_id: str = Field("agent_breaker", description="A config folder of the server root.")
    session_id: str = Field(min_length=1, max_length=256)
    events: list[dict[str, Any]] = Field(max_length=1000)


class EventsResponse(BaseModel):
    session_id: str
    events: list[dict[str, Any]]


class ColangSessions:
    """One live Colang state per (config, session); idle ones are evicted, and each session's
    events are processed one request at a time."""

    def __init__(self, *, idle_s: float = SESSION_IDLE_S, max_sessions: int = MAX_SESSIONS) -> None:
        self.idle_s = idle_s
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[tuple[str, str], list[Any]] = OrderedDict()  # key -> [last used, state, lock]

    def _entry(self, key: tuple[str, str], now: float) -> list[Any]:
        entry = self._sessions.pop(key, None)
        if entry is None or now - entry[0] > self.idle_s:
            entry = [now, None, asyncio.Lock()]
        entry[0] = now
        self._sessions[key] = entry
        # evict the least recently used sessions past the cap, and idle ones; never one whose
        # request is running (its lock is held), or a second request could start it afresh
        excess = len(self._sessions) - self.max_sessions
        for old_key, old in list(self._sessions.items()):
            idle = now - old[0] > self.idle_s
            if not (excess > 0 or idle):
                break
            if old_key != key and not old[2].locked():
                del self._sessions[old_key]
                excess -= 1
        return entry

    async def process(self, rails: Any, config_id: str, session_id: str, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        entry = self._entry((config_id, session_id), time.monotonic())
        verdicts = []
        async with entry[2]:
            # one event per call: a guard loop awaiting its action would miss the next event
            # of a batch (Colang 2.x flows have no inbox)
            for event in events:
                out, entry[1] = await rails.process_events_async([event], entry[1])
                verdicts.extend({k: v for k, v in e.items() if k not in _NOISE} for e in out if e.get("type") in VERDICT_EVENTS)
        return verdicts

    def __len__(self) -> int:
        return len(self._sessions)


def init(app: Any) -> None:
    """Called by `nemoguardrails server` with its FastAPI app (multi-config mode only)."""
    from fastapi import HTTPException
    from nemoguardrails.server import api

    sessions = ColangSessions()
    app.state.agent_breaker_sessions = sessions

    @app.post("/v1/agent-breaker/events", response_model=EventsResponse, tags=["agent-breaker"])
    async def agent_breaker_events(request: EventsRequest) -> EventsResponse:
        """Run agent-breaker events through one live Colang session; answer the verdicts."""
        events = []
        for i, event in enumerate(request.events):
            if event.get("type") not in AGENT_BREAKER_EVENTS:
                raise HTTPException(
                    status_code=422,
                    detail=f"events[{i}].type must be one of {sorted(AGENT_BREAKER_EVENTS)}, but was {event.get('type')!r}",
                )
            events.append({**event, "session_id": request.session_id})
        try:
            rails = await api._get_rails([request.config_id])
        except ValueError as exc:
            raise HTTPException(status_code=404, detail=f"config {request.config_id!r}: {exc}") from None
        verdicts = await sessions.process(rails, request.config_id, request.session_id, events)
        return EventsResponse(session_id=request.session_id, events=verdicts)
