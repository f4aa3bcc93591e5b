"""The agent-breaker flows in your own process: one live Colang state per session, one event
per step, and an answer for every event.

    from agent_breaker.sessions import GuardSessions
    guards = GuardSessions(rails)   # LLMRails of an agent-breaker config
    verdict = await guards.send({"type": "ToolCallRequested", "session_id": "S", "call_id": "c1",
                                 "tool_name": "search_db", "tool_args": {"q": 1}})

Calling `rails.process_events_async` yourself works too, one event per call; this wrapper
keeps the states, sends a batch one event at a time, and refuses an event type the guards do
not know (naming the type it resembles) instead of letting it pass unanswered.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from .events import InvalidEventError
from .protocol import BY_COLANG, VERDICT_TYPES


class GuardSessions:
    """Live Colang states of the agent-breaker flows, one per session."""

    def __init__(self, rails: Any) -> None:
        self.rails = rails
        self._states: dict[str, Any] = {}

    async def send(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """One agent-breaker event (Colang fields) through the flows; its verdict event."""
        kind = event.get("type")
        if kind not in BY_COLANG:
            close = difflib.get_close_matches(str(kind), list(BY_COLANG), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InvalidEventError(f"no guard takes events of this type{hint} (known: {', '.join(sorted(BY_COLANG))})")
        session = str(event.get("session_id", ""))
        out, self._states[session] = await self.rails.process_events_async([dict(event)], self._states.get(session))
        verdicts: list[dict[str, Any]] = [e for e in out if e.get("type") in VERDICT_TYPES]
        [verdict] = verdicts
        return verdict

    async def send_all(self, events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """A batch, one event per step (a guard loop busy with one event would miss the next)."""
        return [await self.send(e) for e in events]

    def forget(self, session: str) -> None:
        """Drop a finished session's live state."""
        self._states.pop(session, None)
