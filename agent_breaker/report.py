"""`agent-breaker report`: what the guards did, or would have done, and what to set before enforcing.

The input is a trace (shared/spec/traces.md), replayed in observe mode through `replay.Replayer`,
or the incident JSON lines the engine's listeners write. Every figure comes from the input:
trips, the spend after each session's first session-ending trip, the counters the trips
carried, and, given the sessions known to be legitimate, the limits that would have let them
all through. `format_text` and `format_html` only lay the report out.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import itertools
import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import heuristics as H
from .config import AgentBreakerConfig
from .events import Assistant, ToolCall
from .replay import Replayer, _SessionReplay, replay_engine

PERCENTILES = (50, 90, 99)
TIME_BINS = 40
HISTOGRAM_BINS = 20
MAX_PLOT_POINTS = 1000
SEVERITIES = ("warn", "block")
SPEND_UNITS = ("tokens", "cost_usd", "steps")


class ReportError(ValueError):
    """Input the report cannot read; the message names the file and the line."""


@dataclass(frozen=True, slots=True)
class Rule:
    """A counter a heuristic compares with a configured limit: it trips when `value` reaches the
    limit (`strict`: when it passes it). `step` is the unit a suggested limit is rounded up to."""

    heuristic: str
    value: str
    limit: str
    setting: str
    strict: bool = False
    step: float = 1.0
    # counters are rounded: the value compared may be this much above the one reported
    slack: float = 0.0
    # another setting that may set the limit in force (the limits seen tell which)
    caveat: str = ""

    def trips(self, value: float, limit: float) -> bool:
        return value > limit if self.strict else value >= limit

    def passing(self, peak: float) -> float:
        """The smallest limit (a multiple of `step`) that lets a counter peaking at `peak` through."""
        top = peak + self.slack
        n = math.ceil(top / self.step) if self.strict else math.floor(top / self.step) + 1
        limit = round(n * self.step, 6)
        while self.trips(top, limit):  # float division may land a hair short
            limit = round(limit + self.step, 6)
        return limit


#: the counters that map to one config setting each (detectors/, governor/budget.py)
RULES: tuple[Rule, ...] = (
    Rule(H.IDENTICAL_FAILURE, "failures", "max_failures", "identical_failure.max_failures"),
    Rule(
        H.IDENTICAL_CALL,
        "repeats",
        "max_repeats",
        "identical_call.max_repeats",
        caveat="a call whose result is empty trips at identical_call.max_silent_repeats instead: "
        "if that is the limit seen, raise it",
    ),
    Rule(H.STUCK_POLLING, "polls", "max_polls", "stuck_polling.max_polls"),
    Rule(H.STUCK_POLLING, "waited_s", "max_wait_s", "stuck_polling.max_wait_s", slack=0.0005),
    Rule(H.NEAR_DUPLICATE, "repeats", "max_repeats", "near_duplicate.max_repeats"),
    Rule(H.SAME_ANSWER, "calls", "max_calls", "same_answer.max_calls"),
    Rule(H.SEMANTIC_ECHO, "repeats", "max_repeats", "semantic_echo.max_repeats"),
    Rule(H.AGENT_DEADLOCK, "repeats", "max_turns", "agent_deadlock.max_turns"),
    Rule(H.SESSION_CHURN, "calls", "max_calls", "session_churn.max_calls"),
    Rule(H.STEP_LIMIT, "steps", "max_steps", "step_limit.max_steps", strict=True),
    Rule(H.DEPTH_LIMIT, "depth", "max_depth", "depth_limit.max_depth", strict=True),
    Rule(H.TOKEN_BUDGET, "projected_tokens", "max_tokens", "budget.max_tokens", strict=True, slack=0.5),
    Rule(H.COST_BUDGET, "projected_cost_usd", "max_cost_usd", "budget.max_cost_usd", strict=True, step=0.01, slack=5e-7),
    Rule(H.TOKEN_VELOCITY, "tokens_per_s", "max_tokens_per_s", "token_velocity.max_tokens_per_s", strict=True, slack=0.5),
)


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


# ------------------------------------------------------------------ the figures


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


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest rank: always a value that was observed, never an interpolation."""
    return sorted_values[max(0, math.ceil(p / 100 * len(sorted_values)) - 1)]


def _spend(v: list[float], steps: bool) -> dict[str, Any]:
    return {"tokens": round(v[0]), "cost_usd": round(v[1], 6), "steps": round(v[2]) if steps else None}


def build(obs: Observed, *, source: str, legit: set[str] | None = None, legit_source: str | None = None) -> dict[str, Any]:
    """The report: one JSON-ready dict."""
    trace = obs.kind == "trace"
    tripped: dict[str, set[tuple[str | None, str]]] = defaultdict(set)
    by_sev: Counter[tuple[str, str]] = Counter()
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    seen: set[str] = set()
    for d in obs.trips:
        h = d["heuristic"]
        seen.add(h)
        # a graduated heuristic's warning is counted apart: the call ran in enforce mode too
        if not d["advisory"]:
            tripped[h].add((d["tenant"], d["session"]))
        by_sev[(h, "warned" if d["advisory"] else d["severity"])] += 1
        for k, v in d["counters"].items():
            values[(h, k)].append(v)
    tripped_sessions = set().union(*tripped.values()) if tripped else set()

    heuristics = []
    for h in sorted(seen, key=lambda h: (-len(tripped[h]), h)):
        ended = [s for s in obs.sessions.values() if s.stopped_by == h]
        heuristics.append(
            {
                "heuristic": h,
                "sessions": len(tripped[h]),
                "trips": by_sev[(h, "warn")] + by_sev[(h, "block")],
                "block": by_sev[(h, "block")],
                "warn": by_sev[(h, "warn")],
                "warned": by_sev[(h, "warned")],
                "sessions_ended": len(ended),
                "stopped": _spend(_sum(s.stopped() for s in ended), trace),
            }
        )

    groups: dict[tuple[str | None, str | None], list[tuple[tuple[str | None, str], _Session]]] = defaultdict(list)
    for key, s in obs.sessions.items():
        groups[(s.tenant, s.feature)].append((key, s))
    trips_of = Counter((d["tenant"], d["session"]) for d in obs.trips if not d["advisory"])
    group_rows = [
        {
            "tenant": tenant,
            "feature": feature,
            "sessions": len(members),
            "tripped": sum(key in tripped_sessions for key, _ in members),
            "trips": sum(trips_of[key] for key, _ in members),
            "spent": _spend(_sum(s.spent for _, s in members), trace),
            "stopped": _spend(_sum(s.stopped() for _, s in members), trace),
        }
        for (tenant, feature), members in sorted(groups.items(), key=lambda g: (g[0][0] or "", g[0][1] or ""))
    ]

    counters = []
    for (h, k), vs in sorted(values.items()):
        vs.sort()
        row: dict[str, Any] = {"heuristic": h, "counter": k, "n": len(vs)}
        row.update({f"p{p}": percentile(vs, p) for p in PERCENTILES})
        row["max"] = vs[-1]
        counters.append(row)

    breakers: dict[tuple[str, str | None], Counter[str]] = defaultdict(Counter)
    for b in obs.breakers:
        breakers[(b["tool"], b["tenant"])][b["to"]] += 1
    breaker_rows = [
        {"tool": tool, "tenant": tenant, "transitions": sum(to.values()), "to": dict(sorted(to.items()))}
        for (tool, tenant), to in sorted(breakers.items(), key=lambda b: (b[0][0], b[0][1] or ""))
    ]

    stopped = _sum(s.stopped() for s in obs.sessions.values())
    report = {
        "source": source,
        "input": obs.kind,
        "observe": "a trace is replayed in observe mode: every trip is reported (severity warn) and nothing is blocked; "
        "a graduated heuristic's warnings are counted apart (warned)"
        if trace
        else "incidents as the engine reported them: block was enforced, warn was only reported (observe mode)",
        "spend_basis": "from the trace: its tool calls and assistant turns, priced as the replay prices them"
        if trace
        else "incidents only: a session's total is the largest tokens_so_far / cost_usd_so_far seen (its last trip's), "
        "so spend after its last trip is not counted; incidents carry no step count",
        "stopped_means": "what each session spent after its first trip of a guard that ends a session (the loop "
        "guards, token_budget, cost_budget, step_limit), as if that guard enforced",
        "sessions": len(obs.sessions) if trace else None,
        "sessions_tripped": len(tripped_sessions),
        "trips": sum(not d["advisory"] for d in obs.trips),
        "warnings": sum(d["advisory"] for d in obs.trips),
        "spent": _spend(_sum(s.spent for s in obs.sessions.values()), trace),
        "stopped": _spend(stopped, trace),
        "heuristics": heuristics,
        "groups": group_rows,
        "counters": counters,
        "breakers": breaker_rows,
        "thresholds": _thresholds(obs, legit, legit_source),
    }
    return report


def _sum(rows: Iterable[list[float]]) -> list[float]:
    total = [0.0, 0.0, 0.0]
    for r in rows:
        total = [a + b for a, b in zip(total, r, strict=True)]
    if not all(math.isfinite(t) for t in total):
        raise ReportError("the spend in the input adds up to more than a float holds")
    return total


def _thresholds(obs: Observed, legit: set[str] | None, legit_source: str | None) -> dict[str, Any]:
    if legit is None:
        return {
            "legit": None,
            "note": "no suggestion: which sessions were legitimate is not in the input; pass --legit FILE "
            '(session ids, one per line, or label lines with "kind": "legit")',
            "suggestions": [],
        }
    trips: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for d in obs.trips:
        trips[d["heuristic"]].append(d)
    rows = []
    for h, of_h in sorted(trips.items()):
        # the settings that decided some trip of it (stuck_polling has two); none: a row that says so
        rules: list[Rule | None] = [
            rule
            for rule in RULES
            if rule.heuristic == h and any(rule.value in d["counters"] and rule.limit in d["counters"] for d in of_h)
        ]
        rows += [_suggestion(h, rule, of_h, legit) for rule in rules or [None]]
    seen = {sid for _, sid in obs.sessions}
    return {
        "legit": {"source": legit_source, "listed": len(legit), "in_input": len(legit & seen)},
        "note": "suggested: the smallest limit at which no legit session's counter would have tripped; others caught: "
        "the non-legit sessions still tripped at it",
        "suggestions": rows,
    }


def _suggestion(h: str, rule: Rule | None, trips: list[dict[str, Any]], legit: set[str]) -> dict[str, Any]:
    """One setting of heuristic `h`: each session's peak counter, and the limit that lets every legit one through."""
    peaks: dict[tuple[str | None, str], float] = {}
    other_path: set[tuple[str | None, str]] = set()  # sessions with a trip this setting does not decide
    limits: set[float] = set()
    for d in trips:
        key = (d["tenant"], d["session"])
        c = d["counters"]
        if rule is None or rule.value not in c or rule.limit not in c:
            other_path.add(key)
            continue
        peaks[key] = max(peaks.get(key, -math.inf), c[rule.value])
        limits.add(c[rule.limit])
    tripped = set(peaks) | other_path
    legit_tripped = {k for k in tripped if k[1] in legit}
    others = tripped - legit_tripped
    row: dict[str, Any] = {
        "heuristic": h,
        "setting": None if rule is None else rule.setting,
        "counter": None if rule is None else rule.value,
        "limits_seen": sorted(limits),
        "legit_sessions_tripped": len(legit_tripped),
        "legit_peak": max((peaks[k] for k in legit_tripped if k in peaks), default=None),
        "suggested": None,
        "why": "",
        "other_sessions_tripped": len(others),
        "other_sessions_caught": len(others),
    }
    if rule is None:
        row["why"] = "no counter of it maps to a setting"
    elif not legit_tripped:
        row["why"] = "the limits seen cut no legit session"
    elif legit_tripped & other_path:
        row["why"] = f"{len(legit_tripped & other_path)} legit session(s) tripped on counters this setting does not decide"
    else:
        row["suggested"] = suggested = rule.passing(row["legit_peak"])
        row["why"] = "; ".join(filter(None, [f"lets all {len(legit_tripped)} legit session(s) through", rule.caveat]))
        row["other_sessions_caught"] = sum(k in other_path or rule.trips(peaks[k], suggested) for k in others)
    return row


# ------------------------------------------------------------------ text


def _plain(s: Any) -> str:
    """A name from the input, safe on a terminal (control characters escaped)."""
    if s is None:
        return "-"
    s = str(s)
    return s if s.isprintable() else s.encode("unicode_escape").decode("ascii")


def _num(v: Any) -> str:
    if v is None:
        return "-"
    if abs(v) >= _HUGE or (isinstance(v, float) and not v.is_integer()):
        return f"{v:,.6g}"
    return f"{int(v):,}"


def _usd(v: Any) -> str:
    return "-" if v is None else f"${v:,.6f}" if abs(v) < _HUGE else f"${v:.6g}"


_HUGE = 1e15  # past this, six significant digits say it
_FIGURE = re.compile(r"[-+$\d., e]*")


def _numeric(rows: list[list[str]]) -> list[bool]:
    """Which columns hold figures only (aligned right)."""
    return [all(_FIGURE.fullmatch(r[i]) for r in rows) for i in range(len(rows[0]))] if rows else []


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    right = _numeric(rows)
    out = []
    for line in [headers, *rows]:
        out.append("  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(line, widths, right, strict=True)).rstrip())
    return out


def _spend_text(s: dict[str, Any]) -> str:
    steps = "" if s["steps"] is None else f", {_num(s['steps'])} steps"
    return f"{_num(s['tokens'])} tokens, {_usd(s['cost_usd'])}{steps}"


def _summary(r: dict[str, Any]) -> list[str]:
    of = f" of {_num(r['sessions'])}" if r["sessions"] is not None else ""
    return [
        r["observe"] + ".",
        f"tripped: {_num(r['sessions_tripped'])}{of} sessions, {_num(r['trips'])} trips reported",
        f"spend: {_spend_text(r['spent'])} ({r['spend_basis']})",
        f"stopped: {_spend_text(r['stopped'])} ({r['stopped_means']})",
    ]


Section = tuple[str, list[str], list[list[str]], list[str]]


def _sections(r: dict[str, Any]) -> list[Section]:
    """The report's tables, (title, headers, rows, notes), for text and HTML alike."""
    stopped = ["stopped tokens", "stopped usd", "stopped steps"]

    def spent(s: dict[str, Any]) -> list[str]:
        return [_num(s["tokens"]), _usd(s["cost_usd"]), _num(s["steps"])]

    out: list[Section] = [
        (
            "Per heuristic",
            ["heuristic", "sessions", "trips", "block", "warn", "warned", "ended", *stopped],
            [
                [
                    _plain(h["heuristic"]),
                    *(_num(h[k]) for k in ("sessions", "trips", "block", "warn", "warned", "sessions_ended")),
                    *spent(h["stopped"]),
                ]
                for h in r["heuristics"]
            ],
            [
                "ended: sessions whose first session-ending trip was this heuristic; the spend after it is theirs",
                "warned: a graduated heuristic's warnings (warn_first): the call ran in enforce mode too; the trip "
                "that would cut after them is counted in trips",
            ],
        ),
        (
            "Per tenant / feature",
            ["tenant", "feature", "sessions", "tripped", "trips", *stopped],
            [
                [
                    _plain(g["tenant"]),
                    _plain(g["feature"]),
                    *(_num(g[k]) for k in ("sessions", "tripped", "trips")),
                    *spent(g["stopped"]),
                ]
                for g in r["groups"]
            ],
            [] if r["input"] == "trace" else ["an incidents file names tripped sessions only"],
        ),
        (
            "Counters at each trip",
            ["heuristic", "counter", "n", *(f"p{p}" for p in PERCENTILES), "max"],
            [
                [
                    _plain(c["heuristic"]),
                    _plain(c["counter"]),
                    _num(c["n"]),
                    *(_num(c[f"p{p}"]) for p in PERCENTILES),
                    _num(c["max"]),
                ]
                for c in r["counters"]
            ],
            ["over every trip reported; nearest-rank percentiles (each one a value that occurred)"],
        ),
    ]
    if r["breakers"]:
        out.append(
            (
                "Breaker transitions",
                ["tool", "tenant", "transitions", "to"],
                [
                    [
                        _plain(b["tool"]),
                        _plain(b["tenant"]),
                        _num(b["transitions"]),
                        ", ".join(f"{_plain(k)} {v}" for k, v in b["to"].items()),
                    ]
                    for b in r["breakers"]
                ],
                [],
            )
        )
    t = r["thresholds"]
    notes = [t["note"]]
    if t["legit"] is not None:
        legit = t["legit"]
        notes.insert(
            0, f"legit sessions: {legit['listed']} listed in {_plain(legit['source'])}, {legit['in_input']} in the input"
        )
    out.append(
        (
            "Suggested thresholds",
            [
                "heuristic",
                "setting",
                "limits seen",
                "legit tripped",
                "legit peak",
                "suggested",
                "others tripped",
                "others caught",
                "why",
            ],
            [
                [
                    _plain(s["heuristic"]),
                    _plain(s["setting"]),
                    ", ".join(_num(v) for v in s["limits_seen"]) or "-",
                    _num(s["legit_sessions_tripped"]),
                    _num(s["legit_peak"]),
                    _num(s["suggested"]),
                    _num(s["other_sessions_tripped"]),
                    _num(s["other_sessions_caught"]),
                    s["why"],
                ]
                for s in t["suggestions"]
            ],
            notes,
        )
    )
    return out


def format_text(r: dict[str, Any]) -> str:
    out = [f"agent-breaker report: {_plain(r['source'])} ({r['input']})", *_summary(r)]
    for title, headers, rows, notes in _sections(r):
        out += ["", title.lower(), *notes]
        if rows:
            out += _table(headers, rows)
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ HTML

# marks each plot whose drawn marks have a size: a headless browser's DOM dump shows it rendered
_SCRIPT = """
addEventListener("load", () => {
  for (const svg of document.querySelectorAll("svg.plot")) {
    const box = svg.querySelector("g.marks").getBBox();
    if (box.width > 0 || box.height > 0) svg.setAttribute("data-rendered", "1");
  }
});
"""
# nothing from outside the page runs or loads: only this script, by its hash
_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; "
    f"script-src 'sha256-{base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()}'"
)
_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; max-width: 72em; }
table { border-collapse: collapse; margin: .5em 0 1em; }
th, td { padding: .2em .7em; border-bottom: 1px solid #ddd; text-align: right; }
th.t, td.t { text-align: left; }
.note { color: #555; margin: .2em 0; }
svg.plot { display: inline-block; margin: 0 1em 1em 0; background: #fafafa; }
svg text { font-size: 11px; fill: #444; }
rect { fill: #2c7fb8; }
.without { stroke: #888; } .with { stroke: #c0392b; }
.hist { display: flex; flex-wrap: wrap; }
"""
_W, _H, _L, _B, _T = 640, 240, 70, 34, 22


def _e(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _svg(name: str, title: str, marks: str, x_ticks: str, y_max: float, x_label: str, w: int = _W) -> str:
    ph = _H - _T - _B
    axes = (
        f'<line x1="{_L}" y1="{_T}" x2="{_L}" y2="{_T + ph}" stroke="#999"/>'
        f'<line x1="{_L}" y1="{_T + ph}" x2="{w - 10}" y2="{_T + ph}" stroke="#999"/>'
        f'<text x="{_L - 4}" y="{_T + 4}" text-anchor="end">{_e(_num(y_max))}</text>'
        f'<text x="{_L - 4}" y="{_T + ph}" text-anchor="end">0</text>{x_ticks}'
        f'<text x="{(_L + w) // 2}" y="{_H - 4}" text-anchor="middle">{_e(x_label)}</text>'
    )
    return (
        f'<svg class="plot" data-plot="{_e(name)}" width="{w}" height="{_H}" viewBox="0 0 {w} {_H}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img"><title>{_e(title)}</title>'
        f'<text x="{_L}" y="14">{_e(title)}</text>{axes}<g class="marks">{marks}</g></svg>'
    )


def _tick(x: float, value: float, anchor: str = "middle") -> str:
    return f'<text x="{x:.1f}" y="{_H - 18}" text-anchor="{anchor}">{_e(_num(value))}</text>'


def _ends(x_range: tuple[float, float], w: int) -> str:
    return _tick(_L, x_range[0], "start") + _tick(w - 10, x_range[1], "end")


def _fraction(v: float, lo: float, hi: float) -> float:
    """Where v sits from lo (0) to hi (1); halved first, as the span of two huge numbers overflows."""
    span = hi / 2 - lo / 2
    return (v / 2 - lo / 2) / span if span > 0 else 0.0


def _scale(x_range: tuple[float, float], y_max: float, w: int) -> tuple[Any, Any]:
    pw, ph = w - _L - 10, _H - _T - _B
    return (lambda x: _L + _fraction(x, *x_range) * pw), (lambda y: _T + ph - _fraction(y, 0, y_max) * ph)


def _bars(counts: list[int], w: int) -> tuple[str, float, Any]:
    y_max = max(counts, default=0)
    sx, sy = _scale((0, len(counts)), y_max, w)
    rects = "".join(
        f'<rect x="{sx(i):.1f}" y="{sy(n):.1f}" width="{max(sx(i + 1) - sx(i) - 1, 1):.1f}" height="{sy(0) - sy(n):.1f}"/>'
        for i, n in enumerate(counts)
        if n
    )
    return rects, y_max, sx


def _binned(values: list[float], lo: float, hi: float, bins: int) -> list[int]:
    """Counts in equal bins from lo to hi."""
    counts = [0] * bins
    for v in values:
        counts[min(int(_fraction(v, lo, hi) * bins), bins - 1)] += 1
    return counts


def _spend_plot(r: dict[str, Any], obs: Observed) -> str:
    unit = 1 if r["spent"]["cost_usd"] else 0 if r["spent"]["tokens"] or obs.kind != "trace" else 2
    points = sorted(obs.points, key=lambda p: p[0])
    xs, without, with_ = [points[0][0]], [0.0], [0.0]
    for x, a, b in points:
        xs.append(x)
        without.append(without[-1] + a[unit])
        with_.append(with_[-1] + b[unit])
    # a polyline of every step of a long trace draws nothing more than a thousand of them do
    n = len(xs)
    keep = sorted({i * (n - 1) // (MAX_PLOT_POINTS - 1) for i in range(MAX_PLOT_POINTS)}) if n > MAX_PLOT_POINTS else range(n)
    x_range, y_max = (xs[0], xs[-1]), without[-1]
    sx, sy = _scale(x_range, y_max, _W)

    def line(ys: list[float], cls: str) -> str:
        pts = " ".join(f"{sx(xs[i]):.1f},{sy(ys[i]):.1f}" for i in keep)
        return f'<polyline class="{cls}" points="{pts}" fill="none" stroke-width="2"/>'

    title = f"cumulative spend ({SPEND_UNITS[unit]}): grey without the guard, red with it"
    return _svg("spend", title, line(without, "without") + line(with_, "with"), _ends(x_range, _W), y_max, obs.x_label)


def _trips_plot(obs: Observed) -> str:
    x_range = (min(obs.trip_x), max(obs.trip_x))
    bins = TIME_BINS if x_range[1] > x_range[0] else 1
    rects, y_max, _ = _bars(_binned(obs.trip_x, *x_range, bins), _W)
    return _svg("trips", f"trips reported over time ({bins} bins)", rects, _ends(x_range, _W), y_max, obs.x_label)


def _histograms(obs: Observed) -> list[str]:
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    for d in obs.trips:
        for k, v in d["counters"].items():
            values[(d["heuristic"], k)].append(v)
    out = []
    for (h, k), vs in sorted(values.items()):
        lo, hi = min(vs), max(vs)
        # a few whole numbers get a bar each, labelled (every few, when they are many); anything else, equal bins
        whole = hi == lo or (all(v.is_integer() for v in vs) and hi - lo < HISTOGRAM_BINS * 2)
        if whole:
            at = Counter(int(v - lo) for v in vs)
            counts = [at[i] for i in range(int(hi - lo) + 1)]
        else:
            counts = _binned(vs, lo, hi, HISTOGRAM_BINS)
        rects, y_max, sx = _bars(counts, _W // 2)
        every = 1 + len(counts) // 10
        ticks = "".join(_tick(sx(i + 0.5), lo + i) for i in range(0, len(counts), every)) if whole else _ends((lo, hi), _W // 2)
        out.append(_svg(f"counter:{h}:{k}", f"{h}: {k}", rects, ticks, y_max, f"{k} (n={len(vs)})", _W // 2))
    return out


def format_html(r: dict[str, Any], obs: Observed) -> str:
    """One self-contained page: the tables, and the plots as inline SVG."""
    body = [f"<h1>agent-breaker report: {_e(r['source'])}</h1>", *(f'<p class="note">{_e(line)}</p>' for line in _summary(r))]
    if obs.points:
        body += ["<h2>Spend with and without the guard</h2>", _spend_plot(r, obs)]
    if obs.trip_x:
        body += ["<h2>Trips over time</h2>", _trips_plot(obs)]
    else:
        body.append('<p class="note">nothing tripped: no trip to plot</p>')
    for title, headers, rows, notes in _sections(r):
        body.append(f"<h2>{_e(title)}</h2>")
        body += [f'<p class="note">{_e(n)}</p>' for n in notes]
        if rows:
            align = ["" if figures else ' class="t"' for figures in _numeric(rows)]
            head = "".join(f"<th{a}>{_e(h)}</th>" for h, a in zip(headers, align, strict=True))
            cells = "".join(
                "<tr>" + "".join(f"<td{a}>{_e(c)}</td>" for c, a in zip(row, align, strict=True)) + "</tr>" for row in rows
            )
            body.append(f"<table><tr>{head}</tr>{cells}</table>")
        if title == "Counters at each trip" and obs.trips:
            body.append('<div class="hist">' + "".join(_histograms(obs)) + "</div>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_e(_CSP)}">'
        f"<title>agent-breaker report: {_e(r['source'])}</title><style>{_STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + f"\n<script>{_SCRIPT}</script>\n</body></html>\n"
    )
