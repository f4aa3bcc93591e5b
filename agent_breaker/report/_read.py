"""Reading: a trace (replayed in observe mode) or an incidents file, into `Observed`; the legit set.

Every line is checked before it is counted: input the report cannot read is a `ReportError` that
names the line. Nothing here computes a figure; `_model.build` does.
"""

from __future__ import annotations

import io
import itertools
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import heuristics as H
from .._errors import AgentBreakerError
from .._replay import Replayer, _SessionReplay, replay_engine
from ..config import AgentBreakerConfig
from ..events import Assistant, ToolCall

SEVERITIES = ("warn", "block")


class ReportError(AgentBreakerError, ValueError):
    """Input the report cannot read; the message names the file and the line."""


def _finite(value: Any) -> float | None:
    """A JSON number as a finite float; None for anything else (bools, strings, inf, 10**400)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        f = float(value)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


@dataclass(slots=True)
class _Session:
    tenant: str | None
    feature: str | None
    # tokens, cost_usd, steps: what the session spent in all, and at its first session-ending trip
    spent: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    stop: list[float] | None = None
    stopped_by: str | None = None

    def stopped(self) -> list[float]:
        return [0.0, 0.0, 0.0] if self.stop is None else [max(0.0, a - b) for a, b in zip(self.spent, self.stop, strict=True)]


@dataclass(slots=True)
class Observed:
    """What the input says, trace or incidents alike."""

    kind: str
    sessions: dict[tuple[str | None, str], _Session] = field(default_factory=dict)
    trips: list[dict[str, Any]] = field(default_factory=list)
    trip_x: list[float] = field(default_factory=list)
    breakers: list[dict[str, Any]] = field(default_factory=list)
    # (x, spend without the guard, spend with it), one per step that spent
    points: list[tuple[float, tuple[float, ...], tuple[float, ...]]] = field(default_factory=list)
    x_label: str = "ts (s)"


# ------------------------------------------------------------------ reading incidents


def _decode(line: bytes, line_no: int) -> Any:
    """One JSON line, or a ReportError naming it."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReportError(f"line {line_no}: not UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise ReportError(f"line {line_no}: nested too deep to read") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"line {line_no}: not JSON: {exc.msg} (column {exc.colno})") from None
    except ValueError as exc:  # an integer too long to convert
        raise ReportError(f"line {line_no}: {exc}") from None


def _text(d: dict[str, Any], key: str, line_no: int, *, required: bool = False) -> str | None:
    v = d.get(key)
    if (v is None and not required) or (isinstance(v, str) and (v or not required)):
        return v
    raise ReportError(f"line {line_no}: {key!r} must be a {'non-empty ' if required else ''}string, but was {_shown(v)}")


def _number(d: dict[str, Any], key: str, line_no: int) -> float:
    v = _finite(d.get(key))
    if v is None:
        raise ReportError(f"line {line_no}: {key!r} must be a finite number, but was {_shown(d.get(key))}")
    return v


def _shown(v: Any) -> str:
    s = json.dumps(v) if isinstance(v, (str, bool, type(None))) else type(v).__name__
    return s if len(s) <= 40 else s[:37] + "..."


def _checked(d: Any, line_no: int) -> dict[str, Any]:
    """A trip or breaker incident line, checked: the fields the report reads, with their types."""
    if not isinstance(d, dict):
        raise ReportError(f"line {line_no}: an incident is a JSON object, not {type(d).__name__}")
    kind = d.get("kind", "trip")
    if kind == "breaker":
        return {
            "kind": "breaker",
            "tool": _text(d, "tool", line_no, required=True),
            "tenant": _text(d, "tenant", line_no),
            "to": _text(d, "to", line_no, required=True),
            "event": _text(d, "event", line_no),
        }
    if kind != "trip":
        raise ReportError(f'line {line_no}: \'kind\' must be "trip" or "breaker", but was {_shown(kind)}')
    severity = d.get("severity")
    if severity not in SEVERITIES:
        raise ReportError(f'line {line_no}: \'severity\' must be "warn" or "block", but was {_shown(severity)}')
    counters = d.get("counters", {})
    if not isinstance(counters, dict):
        raise ReportError(f"line {line_no}: 'counters' must be an object, but was {_shown(counters)}")
    numeric = {}
    for k, v in counters.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue  # a counter may name a state ("open"): only numbers are counted
        f = _finite(v)
        if f is None:
            raise ReportError(f"line {line_no}: counter {k!r} must be a finite number")
        numeric[k] = f
    advisory = d.get("advisory", False)
    if not isinstance(advisory, bool):
        raise ReportError(f"line {line_no}: 'advisory' must be true or false, but was {_shown(advisory)}")
    return {
        "kind": "trip",
        "advisory": advisory,
        "ts": _number(d, "ts", line_no),
        "session": _text(d, "session", line_no, required=True),
        "tenant": _text(d, "tenant", line_no),
        "feature": _text(d, "feature", line_no),
        "heuristic": _text(d, "heuristic", line_no, required=True),
        "severity": severity,
        "tool": _text(d, "tool", line_no),
        "counters": numeric,
        "tokens_so_far": _number(d, "tokens_so_far", line_no),
        "cost_usd_so_far": _number(d, "cost_usd_so_far", line_no),
    }


def _read_incidents(lines: Iterable[tuple[int, bytes]], obs: Observed) -> None:
    parsed = []
    for line_no, line in lines:
        if line.strip():
            parsed.append(_checked(_decode(line, line_no), line_no))
    obs.breakers = [d for d in parsed if d["kind"] == "breaker"]
    # lines from several workers may interleave out of order: a session's first trip is its earliest
    trips = sorted((d for d in parsed if d["kind"] == "trip"), key=lambda d: d["ts"])
    for d in trips:
        key = (d["tenant"], d["session"])
        s = obs.sessions.get(key)
        if s is None:
            s = obs.sessions[key] = _Session(d["tenant"], d["feature"])
        known = [max(s.spent[0], d["tokens_so_far"]), max(s.spent[1], d["cost_usd_so_far"]), 0.0]
        if s.stop is None and d["heuristic"] in H.SESSION_TERMINAL and not d["advisory"]:
            s.stop, s.stopped_by = list(known), d["heuristic"]
        # spend as the incidents reveal it: each session's largest so far; with the guard, capped at its stop
        cap = s.stop or known
        d_without = (known[0] - s.spent[0], known[1] - s.spent[1], 0.0)
        d_with = (min(known[0], cap[0]) - min(s.spent[0], cap[0]), min(known[1], cap[1]) - min(s.spent[1], cap[1]), 0.0)
        s.spent = known
        obs.points.append((d["ts"], d_without, d_with))
        obs.trips.append(d)
        obs.trip_x.append(d["ts"])


# ------------------------------------------------------------------ replaying a trace


class _Recorder(Replayer):
    """The replay, plus each step's spend and the incidents the engine reported on it."""

    def __init__(self, config: AgentBreakerConfig, obs: Observed) -> None:
        engine = replay_engine(config, observe=True)
        engine.listeners.append(self._heard)
        self.messages = io.StringIO()
        super().__init__(engine, errors=self.messages)
        self.obs = obs
        self.heard: list[dict[str, Any]] = []
        self.line_no = 0
        self.all_timed = True
        # per step: ts, line, spend, spent after the session's stop; per trip: ts, line
        self.steps: list[tuple[float, int, tuple[float, ...], bool]] = []
        self.trip_at: list[tuple[float, int]] = []

    def _heard(self, incident_: Any) -> None:
        self.heard.append(incident_.to_dict())

    def apply(self, raw: Any, line_no: int) -> None:
        self.line_no = line_no
        if not isinstance(raw, dict) or _finite(raw.get("ts")) is None:
            self.all_timed = False
        super().apply(raw, line_no)

    def _apply(self, r: _SessionReplay, ev: Any) -> None:
        before = len(self.heard)
        super()._apply(r, ev)
        key = (ev.tenant, ev.session)
        s = self.obs.sessions.get(key)
        if s is None:
            s = self.obs.sessions[key] = _Session(ev.tenant, ev.feature)
        ts = ev.ts or 0.0  # the replay gave every event a ts
        if isinstance(ev, (ToolCall, Assistant)):
            step = (float(ev.input_tokens + ev.output_tokens), self.engine.step_cost_usd(ev), 1.0)
            s.spent = [a + b for a, b in zip(s.spent, step, strict=True)]
            self.steps.append((ts, self.line_no, step, s.stop is not None))
        for d in self.heard[before:]:
            try:
                checked = _checked(d, self.line_no)
            except ReportError as exc:
                raise ReportError(f"{exc}, in the incident this event caused") from None
            if checked["kind"] == "breaker":
                self.obs.breakers.append(checked)
                continue
            self.obs.trips.append(checked)
            self.trip_at.append((ts, self.line_no))
            if s.stop is None and checked["heuristic"] in H.SESSION_TERMINAL and not checked["advisory"]:
                # the step that tripped was spent already: what comes after it is what the guard saves
                s.stop, s.stopped_by = list(s.spent), checked["heuristic"]
        del self.heard[:]


def _replay_trace(lines: Iterable[tuple[int, bytes]], obs: Observed, config: AgentBreakerConfig) -> None:
    rec = _Recorder(config, obs)
    for line_no, line in lines:
        rec.feed(line, line_no)
        if rec.invalid:
            # a report on a guess is worse than none: the first bad line stops it
            raise ReportError(rec.messages.getvalue().splitlines()[0])
    # one clock for the plots: the trace's, or (when some event has none) its line numbers
    timed = rec.all_timed
    if not timed:
        obs.x_label = "line in the trace (it has no timestamps)"
    obs.trip_x = [ts if timed else float(line) for ts, line in rec.trip_at]
    zero = (0.0, 0.0, 0.0)
    obs.points = [(ts if timed else float(line), step, zero if after else step) for ts, line, step, after in rec.steps]


def observe(stream: Iterable[bytes], *, config: AgentBreakerConfig | None = None) -> Observed:
    """Read a trace or an incidents file (told apart by its first line) into what the report counts."""
    lines: Iterator[tuple[int, bytes]] = enumerate(stream, 1)
    head: list[tuple[int, bytes]] = []
    first: Any = None
    for line_no, line in lines:
        head.append((line_no, line))
        if line.strip():
            first = _decode(line, line_no)
            break
    rest = itertools.chain(head, lines)
    if first is None:  # an empty incidents file: nothing tripped
        return Observed("incidents")
    if isinstance(first, dict) and "type" in first:
        obs = Observed("trace")
        _replay_trace(rest, obs, config or AgentBreakerConfig())
    elif isinstance(first, dict) and ("heuristic" in first or "kind" in first):
        if config is not None:
            raise ReportError("--config applies to a trace; an incidents file records decisions already made")
        obs = Observed("incidents")
        _read_incidents(rest, obs)
    else:
        raise ReportError(
            f"line {head[-1][0]}: neither a trace event (it has no 'type') nor an incident (no 'heuristic' or 'kind')"
        )
    return obs


# ------------------------------------------------------------------ the legit sessions


def read_legit(path: str | Path) -> set[str]:
    """Legitimate session ids: one per line (`#` starts a comment), or label lines of
    shared/spec/traces.md (`{"session": ..., "kind": "legit"}`)."""
    legit = set()
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ReportError(f"cannot read {path}: {exc.strerror}") from None
    for line_no, raw in enumerate(data.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(b"#"):
            continue
        if line.startswith(b"{"):
            label = _decode(line, line_no)
            if isinstance(label, dict) and isinstance(label.get("session"), str):
                if label.get("kind") == "legit":
                    legit.add(label["session"])
                continue
            raise ReportError(f"{path}: line {line_no}: a label needs a string 'session'")
        try:
            legit.add(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ReportError(f"{path}: line {line_no}: not UTF-8 (byte {exc.start})") from None
    return legit
