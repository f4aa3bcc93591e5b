"""The model: the figures computed from `Observed`, as one JSON-ready dict (`build`), and the
rules that map a trip's counters to the config setting a suggested threshold is for.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .. import heuristics as H
from ._read import Observed, ReportError, _Session

PERCENTILES = (50, 90, 99)


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
    Rule(H.SESSION_CHURN, "sessions", "max_sessions", "session_churn.max_sessions"),
    Rule(H.STEP_LIMIT, "steps", "max_steps", "step_limit.max_steps", strict=True),
    Rule(H.DEPTH_LIMIT, "depth", "max_depth", "depth_limit.max_depth", strict=True),
    Rule(H.TOKEN_BUDGET, "projected_tokens", "max_tokens", "budget.max_tokens", strict=True, slack=0.5),
    Rule(H.COST_BUDGET, "projected_cost_usd", "max_cost_usd", "budget.max_cost_usd", strict=True, step=0.01, slack=5e-7),
    Rule(H.TOKEN_VELOCITY, "tokens_per_s", "max_tokens_per_s", "token_velocity.max_tokens_per_s", strict=True, slack=0.5),
)


# ------------------------------------------------------------------ the figures


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
