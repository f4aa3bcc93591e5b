"""Render docs/performance.md from the benchmarks' JSON results.

    python -m benchmarks.render_performance [--results benchmarks/results] [--out docs/performance.md]

Each results file is one run of one benchmark (benchmarks/_harness.py writes it), with the machine,
the date and the load average it ran at; the page has one section per file, each figure as the
run wrote it, nothing computed here but the layout. The hostile-load run (attacks.json) has a
layout of its own: a table of the attacks and whether each held, then each attack's figures.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: results files in page order, with their section titles; any other file follows, by name
TITLES = {
    "engine_light": "Engine, light payloads",
    "engine_heavy": "Engine, payload-heavy",
    "pieces": "Where a payload-heavy event's time goes",
    "peers": "Against the reference detectors",
    "nemo": "Inside NeMo Guardrails, and over HTTP",
    "redis": "The Redis store",
    "redis_cluster": "The Redis store on a Redis Cluster",
    "workers": "Scale-out: serve --workers N",
    "load": "Large and hostile requests against small ones",
    "stall": "A slow Redis and the decisions that do not use it",
    "sinks": "Incident sinks that are slow or down",
    "outbox_sqlite": "Escalation outbox on SQLite",
    "outbox_redis": "Escalation outbox on Redis",
    "attacks": "Hostile load",
    "gateway": "The gateway path: /check and /result under load",
    "hooks": "Coding agents' hooks: the command and the endpoints",
    "done": "done_claim: a stop with a claim, and the claims of real coding sessions",
    "detection_holdout": "Detection on held-out real runs, next to the OpenHands and Gemini CLI rules",
    "detection_dev": "Detection on the real runs tuned on (dev)",
}
#: every benchmark, what it measures and what it needs besides the package (listed on the page)
BENCHMARKS = (
    ("bench_engine", "per-event latency and replay throughput of the engine (`--payload heavy`: 1-8 KB results)", ""),
    ("bench_pieces", "where a payload-heavy event's time goes, piece by piece", ""),
    ("bench_peers", "replay against the reference detectors; the bare breaker against pybreaker", "../shared, pybreaker"),
    ("bench_nemo", "the flows inside NeMo's Colang runtime; events/s over HTTP", "nemoguardrails"),
    ("bench_redis", "round trips, latency and decisions/s on the Redis store", "Redis"),
    ("bench_workers", "`serve --workers N` on the Redis config; the engine called directly", "Redis"),
    ("bench_load", "large and hostile requests against small ones; server memory", ""),
    ("bench_stall", "a slow Redis against the decisions that do not use it", "Redis; the tests' helpers (pytest)"),
    ("bench_sinks", "decision latency with a webhook sink slow, hung or down", ""),
    ("bench_outbox", "escalations/s and relay delay, on SQLite or Redis (`--redis URL`)", "RabbitMQ (and Redis)"),
    ("bench_attacks", "hostile load against the server: does each defence hold", "Redis; the tests' helpers (pytest)"),
    (
        "bench_gateway",
        "`/check` and `/result` by a hand-written client, httpx and aiohttp: 50 x 40 and 200 x 10 checks answered, "
        "capacity at 1, 50 and 200 sessions, latency at paced rates; memory, Redis, the engine",
        "Redis, aiohttp",
    ),
    ("bench_hooks", "`agent-breaker hook` wall time per call; the hook endpoint at 50 paced sessions", ""),
    (
        "bench_done",
        "a Stop with a claim (done_claim) on the hook endpoint and through `agent-breaker hook`; its refusals on real runs",
        "the corpus (`benchmarks/corpus/`), ../shared",
    ),
    (
        "bench_detection",
        "loops caught and good runs cut on a labelled corpus of public runs (`--split dev|holdout`), ours and the peers'",
        "the corpus (`benchmarks/corpus/`), ../shared",
    ),
)
#: what the harness writes besides the figures
HEAD_KEYS = ("benchmark", "command", "machine", "settings", "total_seconds")
#: the key that names an item of a list of records, in the order tried
LABELS = ("name", "phase", "receiver", "input", "engine", "relay", "workers", "config")


class Records(list):
    """A list of records whose values are all plain (no dict, no list of records): shown as a table of its own."""


def plain_records(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, dict) and not any(isinstance(x, dict) or is_records(x) for x in v.values()) for v in value)
    )


def is_records(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def flat(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested figures as (dotted name, value) rows. A list of plain records is one row whose value
    is Records (a table); any other list of records is one group of rows per record, named by its
    label (LABELS) or its index."""
    if isinstance(value, dict):
        return [row for k, v in value.items() for row in flat(v, f"{prefix}.{k}" if prefix else str(k))]
    if plain_records(value):
        return [(prefix, Records(value))]
    if is_records(value):
        rows = []
        for i, item in enumerate(value):
            key = next((k for k in LABELS if k in item), None)
            label = str(item[key]) if key is not None else str(i)
            rows += flat({k: v for k, v in item.items() if k != key}, f"{prefix}[{label}]")
        return rows
    return [(prefix, value)]


def figure_tables(rows: list[tuple[str, Any]]) -> list[str]:
    """The rows as a figure / value table, then each Records row as a table of its own."""
    plain = [f"| {name} | {shown(v)} |" for name, v in rows if not isinstance(v, Records)]
    lines = ["", "| figure | value |", "| --- | --- |", *plain] if plain else []
    for name, records in rows:
        if isinstance(records, Records):
            columns = list(dict.fromkeys(k for r in records for k in r))
            lines += ["", f"{name}:", *table(columns, [[r.get(c, "") for c in columns] for r in records])]
    return lines


def shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    text = json.dumps(value) if not isinstance(value, str) else value
    return text.replace("|", "\\|").replace("\n", " ")


def loads(machine: dict[str, Any]) -> str:
    start, end = machine.get("load_average_at_start"), machine.get("load_average_at_end")
    if not start:
        return "load average not recorded"

    def one(x: list[float] | None) -> str:
        return " / ".join(f"{v:g}" for v in x) if x else "?"

    return f"load average (1 / 5 / 15 min) {one(start)} at the start, {one(end)} at the end"


def machine_line(run: dict[str, Any]) -> str:
    """When and where a run ran: the date, the machine, the commit, the load average and the length."""
    m = run.get("machine", {})
    cpu = f" ({m['cpu']})" if m.get("cpu") else ""
    modified = m.get("modified_package_files") or []
    dirty = f" with {len(modified)} package files modified" if modified else ""
    elsewhere = sorted({str(Path(f).parent) for f in (m.get("modules_elsewhere") or {}).values()})
    if elsewhere:  # an editable install filled them in (a worktree's run: the NeMo glue of the main checkout)
        dirty += f" (modules from {', '.join(f'`{e}`' for e in elsewhere)} too)"
    return (
        f"Run {m.get('date_utc', '?')} on {m.get('cpu_count', '?')} cores{cpu}, {m.get('platform', '?')}, "
        f"Python {m.get('python', '?')}, commit `{str(m.get('git_commit', '?'))[:12]}`{dirty}; "
        f"{loads(m)}; {shown(run.get('total_seconds', '?'))} s in all."
    )


def settings_table(run: dict[str, Any]) -> list[str]:
    settings = {k: v for k, v in (run.get("settings") or {}).items() if k != "out"}
    if not settings:
        return []
    lines = ["", "Settings of the run:", "", "| setting | value |", "| --- | --- |"]
    return lines + [f"| {k} | {shown(v)} |" for k, v in settings.items()]


def script(name: str, run: dict[str, Any]) -> str:
    """The benchmark that wrote a results file (files written before the harness: by the file's name)."""
    return run.get("benchmark") or f"bench_{name.split('_')[0]}"


def heading(name: str, run: dict[str, Any]) -> list[str]:
    title = TITLES.get(name, name.replace("_", " ").capitalize())
    lines = [f"## {title} (`benchmarks/{script(name, run)}.py`)", "", machine_line(run)]
    if run.get("command"):
        lines += ["", f"`{run['command']}`"]
    return lines


def attacks_section(name: str, run: dict[str, Any]) -> list[str]:
    lines = heading(name, run)
    lines[2] += (
        " Each attack runs against a real `agent-breaker serve` (the in-memory config and the Redis one) "
        "while authorized clients of another tenant keep working."
    )
    lines += ["", "| attack | config | held | criterion |", "| --- | --- | --- | --- |"]
    for a in run["attacks"]:
        held = {True: "yes", False: "**no**", None: "(figures only)"}[a.get("held")]
        lines.append(f"| {a['name']} | {a['config']} | {held} | {shown(a.get('criterion', ''))} |")
    for a in run["attacks"]:
        lines += ["", f"### {a['name']} ({a['config']})", *figure_tables(flat(a.get("figures", {})))]
    return lines + settings_table(run)


def generic_section(name: str, run: dict[str, Any]) -> list[str]:
    lines = heading(name, run)
    figures = {k: v for k, v in run.items() if k not in HEAD_KEYS}
    return lines + figure_tables(flat(figures)) + settings_table(run)


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    return [
        "",
        "| " + " | ".join(header) + " |",
        "|" + " --- |" * len(header),
        *("| " + " | ".join(map(shown, r)) + " |" for r in rows),
    ]


def done_section(name: str, run: dict[str, Any]) -> list[str]:
    """bench_done: a Stop's latency on both paths, then the real sessions' finals and claims."""
    lines = heading(name, run)
    columns = {"phase": "path", "stops": "Stops", "stop_p50_ms": "p50 ms", "stop_p99_ms": "p99 ms", "stop_max_ms": "max ms"}
    columns |= {"target_stop_p99_ms": "p99 target ms", "refused": "refused", "let_through_warned": "let through, warned"}
    columns |= {"allowed": "allowed", "unexpected": "not the answer expected", "failed": "failed requests"}
    paths = [*run["endpoint"], run["hook_command"]]
    lines += ["", "A Stop hook carrying a claim, from when it was due (the endpoint) or from spawn to exit (the command):"]
    lines += table(list(columns.values()), [[p.get(k, "") for k in columns] for p in paths])
    lines += [""] + [f"- {p['phase']}: {shown(p['note'])}" for p in paths if p.get("note")]
    lines += [f"- a refusal, {p['phase']}: {shown(p['a_refusal'])}" for p in (paths[0], paths[-1]) if p.get("a_refusal")]
    real = run["real_sessions"]
    lines += ["", f"Recorded real sessions replayed through the engine ({real['config']}):"]
    keys = ("finals", "finals_with_claim", "claim_share_pct", "refused")
    rows = [[s["name"], s.get("role", ""), *(s[k] for k in keys)] for s in real["sources"]]
    rows.append(["all coding sessions", "", *(real[f"coding_{k}"] for k in keys)])
    lines += table(["source", "sessions", "finals", "with a checkable claim", "share %", "refused"], rows)
    lines += [""] + [f"- {s['name']}: {s['note']}" for s in real["sources"] if s.get("note")]
    lines += [f"- {source}: {why}" for source, why in real.get("skipped", {}).items()]
    us = real.get("engine_us_per_final")
    if us:
        lines += [f"- the engine's time per final message, in process: p50 / p99 / max {' / '.join(map(shown, us.values()))} µs"]
    listed = [
        [s["name"], f["session"], f["verdict"], f["claims"], f["reason"]] for s in real["sources"] for f in s["finals_listed"]
    ]
    if listed:
        lines += [
            "",
            "Each final with a claim, or refused:",
            *table(["source", "session", "verdict", "claims", "reason"], listed),
        ]
    return lines + settings_table(run)


SECTIONS = {"attacks": attacks_section, "done": done_section}


def ordered(paths: list[Path]) -> list[Path]:
    rank = {name: i for i, name in enumerate(TITLES)}

    def key(path: Path) -> tuple[int, str]:
        base = next((n for n in sorted(rank, key=len, reverse=True) if path.stem.startswith(n)), None)
        return (rank[base] if base is not None else len(rank), path.stem)

    return sorted(paths, key=key)


def render(results: Path) -> str:
    runs = [(path.stem, json.loads(path.read_text(encoding="utf-8"))) for path in ordered(list(results.glob("*.json")))]
    lines = [
        "# Performance",
        "",
        "Figures measured by the scripts in `benchmarks/`, rendered from their JSON in `benchmarks/results/` by",
        "`python -m benchmarks.render_performance`. Each section names the machine, the date and the load",
        "average of its run: the machine may be shared, and a load average above its core count inflates",
        "every latency. Percentiles are nearest-rank (benchmarks/_harness.py). Run a benchmark again with",
        "the command under its heading, from the repository root.",
        "",
        "| run | measures | needs |",
        "| --- | --- | --- |",
        *(f"| `python -m benchmarks.{name}` | {what} | {needs or '-'} |" for name, what, needs in BENCHMARKS),
        "",
        "Each writes `benchmarks/results/<name>.json` (`--out FILE` to write elsewhere); then",
        "`python -m benchmarks.render_performance` renders this page from every file there.",
        "",
        "| results file | benchmark | date (UTC) | commit | cores | load average at start / end (1 min) | seconds |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, run in runs:
        m = run.get("machine", {})
        start, end = (m.get(k) or ["?"] for k in ("load_average_at_start", "load_average_at_end"))
        lines.append(
            f"| {name}.json | {script(name, run)} | {m.get('date_utc', '?')} | `{str(m.get('git_commit', '?'))[:12]}` | "
            f"{m.get('cpu_count', '?')} | "
            f"{start[0]} / {end[0]} | {shown(run.get('total_seconds', '?'))} |"
        )
    for name, run in runs:
        lines += ["", *SECTIONS.get(name, generic_section)(name, run)]
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
