"""Text: the report's tables, laid out once (`_sections`) for the terminal and the HTML page alike.

Figures are formatted here, never computed: everything comes from the dict `_model.build` returns.
"""

from __future__ import annotations

import re
from typing import Any

from ._model import PERCENTILES


def _plain(s: Any) -> str:
    """A name from the input, safe on a terminal (control characters escaped)."""
    if s is None:
        return "-"
    text = str(s)
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


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
