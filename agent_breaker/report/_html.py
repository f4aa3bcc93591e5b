"""HTML: one self-contained page, the text report's tables and the plots as inline SVG.

The tables and the summary come from `_text`; the plots draw what `Observed` holds (each step's
spend, the trips' times, the counters at each trip).
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from ._read import Observed
from ._text import _num, _numeric, _sections, _summary

#: a plot's scale: a value on one axis -> where it is drawn, in the SVG's units
Scale = Callable[[float], float]

TIME_BINS = 40
HISTOGRAM_BINS = 20
MAX_PLOT_POINTS = 1000
SPEND_UNITS = ("tokens", "cost_usd", "steps")


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


def _scale(x_range: tuple[float, float], y_max: float, w: int) -> tuple[Scale, Scale]:
    pw, ph = w - _L - 10, _H - _T - _B
    return (lambda x: _L + _fraction(x, *x_range) * pw), (lambda y: _T + ph - _fraction(y, 0, y_max) * ph)


def _bars(counts: list[int], w: int) -> tuple[str, float, Scale]:
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
