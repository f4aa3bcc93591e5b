"""Detection quality on the labelled corpus of real agent runs: agent-breaker's replay against the peers.

    python -m benchmarks.bench_detection [--split dev|holdout|all] [--config PATH] [--json OUT]
                                         [--include-seen] [--peers openhands,geminicli] [--observe]
                                         [--sources intercode,tau2,...] [--jobs 2]

Inputs: every $AGENT_BREAKER_CORPUS/<source>.jsonl.gz with its labels in $AGENT_BREAKER_CORPUS/labels.jsonl
(benchmarks/corpus/LABELS.md: kind loop | good | other, loop_start, split dev | holdout); with
--include-seen also the older tests/traces/real-*.jsonl[.gz] traces, labelled by the same rule in
$AGENT_BREAKER_CORPUS/labels-seen.jsonl (split "seen": those runs were looked at while the detectors were
built, so they are reported apart). Holdout sessions must never be used to tune a detector: run
--split dev while tuning, and holdout only to report.

For each source, the sessions of the chosen split are written to a temporary JSONL file (events in
their recorded order) and replayed by separate processes:

  * ours:  python -m agent_breaker.cli replay FILE [--config PATH] [--observe]
  * peers: python ../shared/tools/peers.py NAME FILE      (NAME in --peers; default openhands, geminicli)

Only the labels and the replay output are read (session, tripped, trip_event, heuristic, warnings,
warn_event, warned_by); nothing of a detector's internals. Reported per split and detector:

  * loops: caught = tripped at or after loop_start (recall); tripped at all; premature = tripped before
    loop_start; warned at or after loop_start (ours only: peers do not warn); wasted = tool calls let
    through from loop_start up to the trip, median over caught loops;
  * good runs (succeeded, no loop): cut = tripped (a false positive), warned;
  * other runs: tripped (no verdict on whether that is right);
  * trips per heuristic, for loops / good / other; the same loop and good figures per source.

A table goes to stdout, everything as JSON to --json OUT.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks._harness import Run, result_path

REPO = Path(__file__).resolve().parent.parent
TRACES = REPO / "tests" / "traces"
EVAL = Path(os.path.expanduser(os.environ.get("AGENT_BREAKER_CORPUS") or "~/.cache/agent-breaker/corpus"))
PEERS_SCRIPT = REPO.parent / "shared" / "tools" / "peers.py"
OURS = "agent-breaker"


def load_labels(include_seen: bool) -> dict[str, dict]:
    labels: dict[str, dict] = {}
    files = [EVAL / "labels.jsonl"] + ([EVAL / "labels-seen.jsonl"] if include_seen else [])
    for path in files:
        if not path.exists():
            sys.exit(f"{path} is missing: run python benchmarks/corpus/label.py first")
        with open(path) as f:
            for line in f:
                if line.strip():
                    rec = json.loads(line)
                    labels[rec["session"]] = rec
    return labels


def trace_files(include_seen: bool) -> list[tuple[str, Path]]:
    out = [(p.name.split(".jsonl")[0], p) for p in sorted(EVAL.glob("*.jsonl.gz"))]
    if include_seen:
        seen = sorted(TRACES.glob("real-*.jsonl")) + sorted(TRACES.glob("real-*.jsonl.gz"))
        out += [(p.name.split(".jsonl")[0], p) for p in seen]
    return out


def write_subset(src: Path, keep: set[str], dst: Path) -> dict[str, list[int]]:
    """Copy the events of the kept sessions to dst; return each session's tool-call event indices (1-based)."""
    opener = gzip.open if src.suffix == ".gz" else open
    calls: dict[str, list[int]] = {}
    idx: Counter[str] = Counter()
    with opener(src, "rt", encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as out:
        for line in f:
            if not line.strip():
                continue
            ev = json.loads(line)
            sid = ev.get("session")
            if sid not in keep:
                continue
            out.write(line if line.endswith("\n") else line + "\n")
            idx[sid] += 1
            calls.setdefault(sid, [])
            if ev.get("type") == "tool_call":
                calls[sid].append(idx[sid])
    return calls


def run_detector(name: str, path: Path, config: str | None, observe: bool) -> tuple[dict[str, dict], float, str]:
    if name == OURS:
        cmd = [sys.executable, "-m", "agent_breaker.cli", "replay", str(path)]
        if config:
            cmd += ["--config", config]
        if observe:
            cmd.append("--observe")
    else:
        cmd = [sys.executable, str(PEERS_SCRIPT), name, str(path)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    verdicts = {}
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            v = json.loads(line)
            if isinstance(v, dict) and "session" in v:
                verdicts[v["session"]] = v
    return verdicts, wall, proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""


def new_bucket() -> dict:
    return {
        "loops": 0,
        "loops_caught": 0,
        "loops_tripped": 0,
        "loops_premature": 0,
        "loops_warned": 0,
        "wasted": [],
        "good": 0,
        "good_cut": 0,
        "good_warned": 0,
        "other": 0,
        "other_tripped": 0,
        "heuristics": {"loop": Counter(), "good": Counter(), "other": Counter()},
        "missing": 0,
    }


def score(bucket: dict, lab: dict, v: dict | None, call_idx: list[int]) -> None:
    kind = lab["kind"]
    if v is None:
        bucket["missing"] += 1
        v = {}
    tripped = bool(v.get("tripped"))
    te = v.get("trip_event")
    we = v.get("warn_event")
    warned = we is not None or bool(v.get("warnings"))
    if tripped:
        bucket["heuristics"][kind][v.get("heuristic") or "?"] += 1
    if kind == "loop":
        ls = lab["loop_start"]
        bucket["loops"] += 1
        bucket["loops_tripped"] += tripped
        if tripped and te is not None and te >= ls:
            bucket["loops_caught"] += 1
            bucket["wasted"].append(sum(1 for i in call_idx if ls <= i < te))
        elif tripped:
            bucket["loops_premature"] += 1
        if we is not None and we >= ls:
            bucket["loops_warned"] += 1
    elif kind == "good":
        bucket["good"] += 1
        bucket["good_cut"] += tripped
        bucket["good_warned"] += warned
    else:
        bucket["other"] += 1
        bucket["other_tripped"] += tripped


def finish(b: dict) -> dict:
    out = {k: v for k, v in b.items() if k not in ("wasted", "heuristics")}
    out["recall"] = b["loops_caught"] / b["loops"] if b["loops"] else None
    out["recall_any_trip"] = b["loops_tripped"] / b["loops"] if b["loops"] else None
    out["good_cut_rate"] = b["good_cut"] / b["good"] if b["good"] else None
    out["good_warned_rate"] = b["good_warned"] / b["good"] if b["good"] else None
    out["median_wasted_calls"] = statistics.median(b["wasted"]) if b["wasted"] else None
    out["heuristics"] = {k: dict(c.most_common()) for k, c in b["heuristics"].items()}
    return out


def pct(a: int, n: int) -> str:
    return f"{a}/{n} ({100 * a / n:.1f}%)" if n else "-"


def print_tables(report: dict, detectors: list[str]) -> None:
    for split, per_det in report["splits"].items():
        any_det = per_det[detectors[0]]["total"]
        print(f"\n## split: {split}  (loops {any_det['loops']}, good {any_det['good']}, other {any_det['other']})\n")
        print(
            "| detector | loops caught (trip >= loop_start) | loops tripped at all | premature | loops warned | "
            "median wasted calls | good cut | good warned | other tripped |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for d in detectors:
            t = per_det[d]["total"]
            mw = t["median_wasted_calls"]
            print(
                f"| {d} | {pct(t['loops_caught'], t['loops'])} | {pct(t['loops_tripped'], t['loops'])} | "
                f"{t['loops_premature']} | {pct(t['loops_warned'], t['loops']) if d == OURS else '-'} | "
                f"{'-' if mw is None else mw} | {pct(t['good_cut'], t['good'])} | "
                f"{pct(t['good_warned'], t['good']) if d == OURS else '-'} | {pct(t['other_tripped'], t['other'])} |"
            )
        print("\ntrips per heuristic (loop / good / other sessions):\n")
        for d in detectors:
            h = per_det[d]["total"]["heuristics"]
            names = sorted(set(h["loop"]) | set(h["good"]) | set(h["other"]))
            cells = ", ".join(f"{n} {h['loop'].get(n, 0)}/{h['good'].get(n, 0)}/{h['other'].get(n, 0)}" for n in names)
            print(f"- {d}: {cells or 'no trips'}")
        print("\nper source (loops caught / good cut):\n")
        print("| source | loops | good | " + " | ".join(detectors) + " |")
        print("|---|---|---|" + "---|" * len(detectors))
        sources = sorted(per_det[detectors[0]]["sources"])
        for s in sources:
            t0 = per_det[detectors[0]]["sources"][s]
            cells = []
            for d in detectors:
                t = per_det[d]["sources"][s]
                cells.append(f"{t['loops_caught']}/{t['loops']} caught, {t['good_cut']}/{t['good']} cut")
            print(f"| {s} | {t0['loops']} | {t0['good']} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=("dev", "holdout", "all"), default="dev")
    ap.add_argument("--config", help="agent-breaker config for the replay (the agent_breaker block or a NeMo config)")
    ap.add_argument("--observe", action="store_true", help="replay in observe mode (nothing blocked)")
    ap.add_argument("--include-seen", action="store_true", help="also the older tests/traces/real-* traces")
    ap.add_argument("--peers", default="openhands,geminicli", help="peers of ../shared/tools/peers.py ('' for none)")
    ap.add_argument("--sources", help="only these sources (comma-separated file stems)")
    ap.add_argument("--jobs", type=int, default=2, help="detector processes at once")
    ap.add_argument("--out", type=Path, help="write the figures here as JSON (default benchmarks/results/detection_<split>.json)")
    a = ap.parse_args(argv)
    run = Run("bench_detection", a, argv)

    labels = load_labels(a.include_seen)
    peers = [p for p in a.peers.split(",") if p]
    if peers and not PEERS_SCRIPT.exists():
        print(f"note: {PEERS_SCRIPT} not found: peers skipped", file=sys.stderr)
        peers = []
    detectors = [OURS] + peers
    splits = ["dev", "holdout"] if a.split == "all" else [a.split]
    wanted = set(splits) | ({"seen"} if a.include_seen else set())
    only = set(a.sources.split(",")) if a.sources else None

    files = [(s, p) for s, p in trace_files(a.include_seen) if only is None or s in only]
    results: dict[str, dict[str, dict]] = defaultdict(dict)  # detector -> session -> verdict
    timings: dict[str, dict[str, float]] = defaultdict(dict)
    call_idx: dict[str, list[int]] = {}
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_detection_") as tmp:
        jobs = []
        for source, path in files:
            keep = {sid for sid, lab in labels.items() if lab["source"] == source and lab["split"] in wanted}
            if not keep:
                continue
            dst = Path(tmp) / f"{source}.jsonl"
            call_idx.update(write_subset(path, keep, dst))
            for d in detectors:
                jobs.append((d, source, dst))
        with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
            futs = {pool.submit(run_detector, d, dst, a.config, a.observe): (d, source) for d, source, dst in jobs}
            for fut, (d, source) in futs.items():
                verdicts, wall, _note = fut.result()
                results[d].update(verdicts)
                timings[d][source] = round(wall, 2)
                print(f"  {d:>14} {source:<24} {len(verdicts):6d} sessions {wall:7.1f} s", file=sys.stderr)

    report: dict = {
        "detectors": detectors,
        "seconds": round(time.perf_counter() - t_start, 1),
        "timings_s": timings,
        "splits": {},
    }
    groups = splits + (["seen"] if a.include_seen else [])
    for split in groups:
        per_det = {}
        for d in detectors:
            total = new_bucket()
            by_src: dict[str, dict] = defaultdict(new_bucket)
            for sid, lab in labels.items():
                if lab["split"] != split or sid not in call_idx:
                    continue
                v = results[d].get(sid)
                score(total, lab, v, call_idx[sid])
                score(by_src[lab["source"]], lab, v, call_idx[sid])
            per_det[d] = {"total": finish(total), "sources": {s: finish(b) for s, b in sorted(by_src.items())}}
        report["splits"][split] = per_det

    print_tables(report, detectors)
    out = a.out or result_path(f"detection_{a.split}")
    run.write(report, out)
    print(f"\nwrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
