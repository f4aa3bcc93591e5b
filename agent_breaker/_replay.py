"""`agent-breaker replay`: what would the breaker have done on a recorded run?

Implements the replay contract of shared/spec/traces.md through the same Engine the NeMo
actions call. A blocked call is not executed, so its result is skipped, and the agent is
assumed to go on as recorded.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from . import _json
from . import heuristics as H
from .config import AgentBreakerConfig
from .dispatch import decide_event
from .engine import Engine
from .events import InvalidEventError, ToolCall, ToolResult, parse_event
from .receipts import ReceiptKeys
from .store import MemoryStore
from .verdicts import ResultVerdict, Verdict


@dataclass
class _SessionReplay:
    session: str
    events: int = 0
    last_ts: float | None = None
    trip_event: int | None = None
    heuristic: str | None = None
    allowed_calls: int = 0
    blocked_calls: int = 0
    cost_allowed_usd: float = 0.0
    cost_blocked_usd: float = 0.0
    # warnings (the call ran): graduated heuristics' and those of heuristics the config only
    # observes; heuristic -> count, and the first one's event
    warnings: dict[str, int] = field(default_factory=dict)
    warn_event: int | None = None
    blocked_ids: set[str] = field(default_factory=set)
    # calls without call_id, per tool, in order: was each one blocked?
    unpaired: dict[str, deque[bool]] = field(default_factory=dict)

    def trip(self, heuristic: str) -> None:
        if self.trip_event is None:
            self.trip_event = self.events
            self.heuristic = heuristic

    def verdict(self, heuristic: str | None, advisory: bool) -> None:
        """A verdict's trip: a warning (advisory) is counted, anything else is the trip."""
        if heuristic is None:
            return
        if not advisory:
            self.trip(heuristic)
            return
        self.warnings[heuristic] = self.warnings.get(heuristic, 0) + 1
        if self.warn_event is None:
            self.warn_event = self.events

    def output(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "tripped": self.trip_event is not None,
            "trip_event": self.trip_event,
            "heuristic": self.heuristic,
            "allowed_calls": self.allowed_calls,
            "blocked_calls": self.blocked_calls,
            "cost_allowed_usd": round(self.cost_allowed_usd, 6),
            "cost_blocked_usd": round(self.cost_blocked_usd, 6),
            "warnings": sum(self.warnings.values()),
            "warn_event": self.warn_event,
            "warned_by": dict(sorted(self.warnings.items())),
        }


class Replayer:
    """Feeds a recorded trace through an engine and keeps each session's replay verdict."""

    def __init__(self, engine: Engine, *, errors: IO[str] | None = None, decide: Callable[[Any], Any] | None = None) -> None:
        """`decide`: how an event is decided (default: the dispatch, on `engine`); the demo's
        runtime decides through its Colang flows, which call the dispatch themselves."""
        self.engine = engine
        self._decide: Callable[[Any], Any] = decide or functools.partial(_dispatched, engine)
        # heuristics an enforcing config only observes: their verdicts are warnings, not trips (a
        # run that observes everything, --observe or `mode: observe`, reports would-trips as trips)
        cfg = getattr(engine, "config", None)  # the demo's NeMo runtime answers with its flows' own
        enforcing = cfg is not None and cfg.mode == "enforce" and not engine.observe
        modes = cfg.modes if cfg is not None and enforcing else {}
        self.observed_only = frozenset(h for h, m in modes.items() if m == "observe")
        self.sessions: dict[str, _SessionReplay] = {}
        self.errors = errors if errors is not None else sys.stderr
        self.invalid = 0

    def _error(self, line_no: int, message: str) -> None:
        self.invalid += 1
        print(f"line {line_no}: {message}", file=self.errors)

    def feed(self, line: str | bytes, line_no: int) -> None:
        """One trace line. A line that is not UTF-8, not JSON, or nested too deep is reported
        with its number, and the replay goes on."""
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                self._error(line_no, f"not UTF-8 (byte {exc.start})")
                return
        line = line.strip()
        if not line:
            return
        try:
            raw = _json.loads(line)
        except RecursionError:
            self._error(line_no, "nested too deep to read")
            return
        except json.JSONDecodeError as exc:
            self._error(line_no, f"not JSON: {exc.msg} (column {exc.colno})")
            return
        except ValueError as exc:  # an integer of more digits than Python converts
            self._error(line_no, f"not readable: {exc}")
            return
        self.apply(raw, line_no)

    def apply(self, raw: Any, line_no: int) -> None:
        """Replay one event (a decoded trace line)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("session"), str) or not raw["session"]:
            self._error(line_no, "an event needs a non-empty string 'session'")
            return
        raw = dict(raw)
        sid = raw["session"]
        r = self.sessions.get(sid)
        if r is None:
            r = self.sessions[sid] = _SessionReplay(sid)
        r.events += 1
        ts = raw.get("ts")
        if not isinstance(ts, (int, float)) or isinstance(ts, bool):
            raw["ts"] = ts = (r.last_ts + 1.0) if r.last_ts is not None else 0.0
        with contextlib.suppress(OverflowError):  # an integer too large for a float: parse_event refuses it below
            r.last_ts = float(ts)
        try:
            ev = parse_event(raw)
            self._apply(r, ev)
        except InvalidEventError as exc:
            self._error(line_no, f"session {sid}: {exc}")
            if raw.get("type") == "tool_call":
                # a call that cannot be validated is not run
                r.blocked_calls += 1
                r.trip(H.INVALID_EVENT)
                tool = raw.get("tool")
                if isinstance(raw.get("call_id"), str):
                    r.blocked_ids.add(raw["call_id"])
                elif isinstance(tool, str):
                    r.unpaired.setdefault(tool, deque()).append(True)

    def _apply(self, r: _SessionReplay, ev: Any) -> None:
        if isinstance(ev, ToolCall):
            verdict = self._decide(ev)
            cost = self.engine.step_cost_usd(ev)
            blocked = not verdict.allowed
            if blocked:
                r.blocked_calls += 1
                r.cost_blocked_usd += cost
            else:
                r.allowed_calls += 1
                r.cost_allowed_usd += cost
            if ev.call_id is not None:
                if blocked:
                    r.blocked_ids.add(ev.call_id)
            else:
                r.unpaired.setdefault(ev.tool, deque()).append(blocked)
            r.verdict(verdict.heuristic, verdict.advisory or verdict.heuristic in self.observed_only)
            return
        if isinstance(ev, ToolResult):
            if ev.call_id is not None:
                if ev.call_id in r.blocked_ids:
                    r.blocked_ids.discard(ev.call_id)
                    return
            else:
                queue = r.unpaired.get(ev.tool)
                if queue and queue.popleft():
                    return
        outcome = self._decide(ev)
        if not isinstance(ev, ToolResult):
            r.verdict(outcome.heuristic, getattr(outcome, "advisory", False) or outcome.heuristic in self.observed_only)

    def results(self) -> Iterator[dict[str, Any]]:
        for r in self.sessions.values():
            yield r.output()


def _dispatched(engine: Engine, ev: Any) -> Verdict | ResultVerdict:
    decision = decide_event(engine, ev)
    if decision.invalid is not None:
        raise decision.invalid  # the line's error, as for a line that does not parse
    return decision.verdict


def replay_engine(
    config: AgentBreakerConfig, *, observe: bool = False, shared_breakers: bool = False, incidents: bool = False
) -> Engine:
    """The engine `agent-breaker replay` runs: the trace's own clock, count-only eviction,
    per-session breakers unless `shared_breakers`, and a per-run receipt key."""
    return Engine(
        config,
        # sessions of a trace may each run on their own clock: idle eviction by another
        # session's time would drop live sessions, so replay evicts by count only
        store=MemoryStore(ttl_s=math.inf, max_sessions=config.sessions.max_sessions),
        listeners=None if incidents else [],
        sinks=False,  # a replayed trip is history: it must not page anyone
        escalations=False,  # nor hand anyone a case
        share_breakers=shared_breakers,
        observe=observe,
        # replay's receipts never leave the process: a per-run key is all it needs
        receipt_keys=ReceiptKeys.ephemeral(),
        trust_event_time=True,
    )


def replay_lines(
    lines: Iterable[str | bytes], engine: Engine, *, errors: IO[str] | None = None
) -> tuple[list[dict[str, Any]], int]:
    """Replay trace lines; returns (one verdict dict per session, number of invalid lines)."""
    replayer = Replayer(engine, errors=errors)
    for n, line in enumerate(lines, 1):
        replayer.feed(line, n)
    return list(replayer.results()), replayer.invalid
