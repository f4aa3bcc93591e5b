"""Where a payload-heavy event's time goes, piece by piece.

    python -m benchmarks.bench_pieces [--events 20000] [--seed 1] [--repeat 5] [--out FILE]

On the benchmarks' payload-heavy trace (benchmarks/_trace.py, `generate_trace(..., payload="heavy")`), in us:

  * per event: JSON parsing of the lines alone, and a whole replay (`replay_lines`, JSON parsing
    included) with the default config, with `mode: off` (the replay's floor: parsing, event
    validation, its own bookkeeping) and with every heuristic off through `modes:`;
  * per tool call: the pieces of its facts (canonical args, their word and shape fingerprints,
    the thought's shapes and their sorting) and the facts whole (`call_facts`);
  * per tool result: canonical JSON, its BLAKE2b hash, the churn masks, the reference ids and
    the failure classification.

Best of --repeat passes of each, wall clock, one process, GC on (the trace frozen out of it).
Figures only, nothing asserted. The pieces call the engine's internals as it calls them.
Every figure goes to --out as JSON (default benchmarks/results/pieces.json), with the machine's facts.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from agent_breaker import Engine, ReceiptKeys, ToolCall, ToolResult, parse_event
from agent_breaker import heuristics as H
from agent_breaker._canonical import normalize_text
from agent_breaker._json import loads
from agent_breaker._outcomes import classify
from agent_breaker._replay import replay_engine, replay_lines
from agent_breaker.config import parse_config
from agent_breaker.engine._facts import call_facts
from benchmarks._harness import Run, describe_machine, out_argument, percentile
from benchmarks._trace import generate_trace


def best_us(fn: Callable[[], Any], n: int, repeat: int) -> float:
    """The best of `repeat` runs of fn, in us per one of its n items."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=20_000, help="events of the heavy trace (default 20000)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the trace (default 1)")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each piece; the best counts (default 5)")
    out_argument(ap, "pieces")
    args = ap.parse_args(argv)
    run = Run("bench_pieces", args, argv)

    raw = generate_trace(args.events, args.seed, payload="heavy")
    lines = [json.dumps(ev) for ev in raw]
    events = [parse_event(dict(ev)) for ev in raw]
    calls = [ev for ev in events if isinstance(ev, ToolCall)]
    results = [ev for ev in events if isinstance(ev, ToolResult)]
    gc.collect()
    gc.freeze()
    print(describe_machine(run.machine))
    print(f"bench_pieces: heavy trace, {len(lines):,} events ({len(calls):,} calls, {len(results):,} results), seed {args.seed}")
    print(f"best of {args.repeat}, us\n")

    def replay(config: dict[str, Any] | None) -> Callable[[], Any]:
        return lambda: replay_lines(lines, replay_engine(parse_config(config)))

    n = len(lines)
    print("per event")
    rows: list[tuple[str, float]] = [
        ("JSON parsing of the lines", best_us(lambda: [loads(line) for line in lines], n, args.repeat)),
        ("replay, default config", best_us(replay(None), n, args.repeat)),
        ("replay, mode: off (the floor)", best_us(replay({"mode": "off"}), n, args.repeat)),
        (
            "replay, every heuristic off (modes:)",
            best_us(replay({"modes": dict.fromkeys(H.CONFIGURABLE, "off")}), n, args.repeat),
        ),
    ]
    for label, us in rows:
        print(f"  {label:<44}{us:>9.1f}")
    figures: dict[str, Any] = {
        "trace": {"events": len(lines), "calls": len(calls), "results": len(results), "seed": args.seed, "payload": "heavy"},
        "per_event_us": {label: round(us, 2) for label, us in rows},
    }

    engine = Engine(receipt_keys=ReceiptKeys.ephemeral())
    p = engine.policies.get(None, None, None)
    fp = engine.fingerprints
    args_canon = [p.canon.canonical(c.args) for c in calls]
    thoughts = [normalize_text(c.thought) for c in calls if c.thought]
    shapes = [fp.shapes(t) for t in thoughts]
    print(f"\nper tool call ({len(thoughts):,} of {len(calls):,} with a thought; thought pieces per thought)")
    figures["calls_with_thought"] = len(thoughts)
    figures["per_call_us"] = per_call = {}
    for label, fn, count in (
        ("canonical args", lambda: [p.canon.canonical(c.args) for c in calls], len(calls)),
        ("word fingerprint of the args", lambda: [fp.tokens(c) for c in args_canon], len(calls)),
        ("shape fingerprint of the args", lambda: [fp.shapes(c) for c in args_canon], len(calls)),
        ("shapes of the thought", lambda: [fp.shapes(t) for t in thoughts], len(thoughts)),
        ("sorting them", lambda: [tuple(sorted(s)) for s in shapes], len(thoughts)),
        ("the facts whole (call_facts)", lambda: [call_facts(engine.fingerprints, c, p) for c in calls], len(calls)),
    ):
        per_call[label] = us = best_us(fn, max(count, 1), args.repeat)
        print(f"  {label:<44}{us:>9.1f}")

    canon = [p.result_canon.canonical(r.result) for r in results]
    timed = [p.churn.timing(c) for c in canon]
    canon_p50 = percentile(map(len, canon), 50)
    print(f"\nper tool result (canonical JSON p50 {canon_p50:,} characters)")
    figures["result_canonical_json_chars_p50"] = canon_p50
    figures["per_result_us"] = per_result = {}
    for label, fn in (
        ("canonical JSON, volatile fields out", lambda: [p.result_canon.canonical(r.result) for r in results]),
        ("its BLAKE2b hash", lambda: [fp.hash64(c) for c in canon]),
        ("churn mask: timings", lambda: [p.churn.timing(c) for c in canon]),
        ("churn mask: identities", lambda: [p.churn.identity(c) for c in timed]),
        ("reference ids", lambda: [p.claims.result_references(c) for c in canon]),
        ("failure classification", lambda: [classify(r, p.cfg, p.in_progress, None) for r in results]),
    ):
        per_result[label] = us = best_us(fn, len(results), args.repeat)
        print(f"  {label:<44}{us:>9.1f}")
    for table in (per_call, per_result):
        table.update((k, round(v, 2)) for k, v in table.items())
    run.write(figures, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
