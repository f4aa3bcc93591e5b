"""Render docs/performance.md from the benchmarks' JSON results.

    python benchmarks/render_performance.py [--results benchmarks/results] [--out docs/performance.md]

Each results file is one run of one benchmark, with the machine and the date it ran on; the
page shows every figure as the run wrote it, nothing computed here but the layout.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def flat(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested figures as (dotted name, value) rows."""
    if isinstance(value, dict):
        return [row for k, v in value.items() for row in flat(v, f"{prefix}.{k}" if prefix else str(k))]
    return [(prefix, value)]


def shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    text = json.dumps(value) if not isinstance(value, str) else value
    return text.replace("|", "\\|").replace("\n", " ")


def attacks_section(run: dict[str, Any]) -> list[str]:
    machine = run.get("machine", {})
    lines = [
        "## Hostile load (`benchmarks/bench_attacks.py`)",
        "",
        f"Run {machine.get('date_utc', '?')} on {machine.get('cpu_count', '?')} cores, "
        f"{machine.get('platform', '?')}, Python {machine.get('python', '?')}, commit "
        f"`{str(machine.get('git_commit', '?'))[:12]}`; {shown(run.get('total_seconds', '?'))} s in all. Each attack runs "
        "against a real `agent-breaker serve` (the in-memory config and the Redis one) while "
        "authorized clients of another tenant keep working.",
        "",
        "| attack | config | held | criterion |",
        "| --- | --- | --- | --- |",
    ]
    for a in run["attacks"]:
        held = {True: "yes", False: "**no**", None: "(figures only)"}[a.get("held")]
        lines.append(f"| {a['name']} | {a['config']} | {held} | {shown(a.get('criterion', ''))} |")
    for a in run["attacks"]:
        lines += ["", f"### {a['name']} ({a['config']})", "", "| figure | value |", "| --- | --- |"]
        lines += [f"| {name} | {shown(v)} |" for name, v in flat(a.get("figures", {}))]
    settings = run.get("settings")
    if settings:
        lines += ["", "Settings of the run:", "", "| setting | value |", "| --- | --- |"]
        lines += [f"| {k} | {shown(v)} |" for k, v in settings.items() if k != "out"]
    return lines


SECTIONS = {"attacks.json": attacks_section}


def render(results: Path) -> str:
    lines = [
        "# Performance",
        "",
        "Figures measured by the scripts in `benchmarks/`, rendered from their JSON by",
        "`benchmarks/render_performance.py`. Each section names the machine and the date of its run.",
    ]
    for name, section in SECTIONS.items():
        path = results / name
        if path.exists():
            lines += ["", *section(json.loads(path.read_text(encoding="utf-8")))]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "performance.md")
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(args.results), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
