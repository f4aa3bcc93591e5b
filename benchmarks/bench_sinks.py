"""Incident sinks benchmark: does a webhook that is slow or down slow the decisions?

    python -m benchmarks.bench_sinks [--sessions 300] [--refused 10] [--out FILE]

Each session makes one identical failing call three times, then keeps calling it: every later
call is refused by identical_failure and raises an incident. The same workload runs through a
fresh engine with: no sink; a webhook to a healthy local receiver; a slow receiver (1 s per
request); a receiver that hangs (never answers); a closed port (connection refused). Printed:
check_tool_call latency (p50 / p99 / max, microseconds) over every call, and the sink's
delivered / failed / dropped counts right after the last decision (the queue holds 1000; an
identical_failure trip halts its session, so each session raises one incident). For the healthy
receiver, also how long the queue takes to drain. The receivers are the tests' (tests/_receiver.py).
Percentiles are nearest-rank. Every figure goes to --out as JSON (default
benchmarks/results/sinks.json), with the machine's facts.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

from agent_breaker import Engine, FakeClock, ReceiptKeys
from agent_breaker._sinks import QueuedSink, webhook
from agent_breaker.metrics import Metrics
from benchmarks._harness import Run, describe_machine, out_argument, percentiles, tests_module

Receiver = tests_module("_receiver").Receiver


def workload(engine: Engine, clock: FakeClock, sessions: int, refused: int) -> list[int]:
    lat = []
    for n in range(sessions):
        s = f"s{n}"
        for i in range(3 + refused):
            clock.advance(1.0)
            t0 = time.perf_counter_ns()
            v = engine.check_tool_call(
                {"type": "tool_call", "session": s, "call_id": f"c{i}", "tool": "run_sql", "args": {"q": n}}
            )
            lat.append(time.perf_counter_ns() - t0)
            if v.allowed:
                engine.record_tool_result(
                    {
                        "type": "tool_result",
                        "session": s,
                        "call_id": f"c{i}",
                        "tool": "run_sql",
                        "ok": False,
                        "error": "syntax error",
                        "error_kind": "call",
                    }
                )
    return lat


def run(name: str, url: str | None, args: argparse.Namespace, *, drain: bool = False) -> dict[str, Any]:
    telemetry = Metrics()
    sink = QueuedSink("webhook", webhook(url, 5.0), retries=1, backoff_s=0.1, metrics=telemetry) if url else None
    clock = FakeClock(1_000_000.0)
    engine = Engine(
        listeners=[sink] if sink else [], sinks=False, clock=clock, receipt_keys=ReceiptKeys.ephemeral(), telemetry=telemetry
    )
    workload(engine, clock, 20, args.refused)  # warm-up
    t0 = time.perf_counter()
    lat = workload(engine, clock, args.sessions, args.refused)
    decided_s = time.perf_counter() - t0
    counts = outcomes(telemetry)
    p50, p99, high = (ns / 1000.0 for ns in percentiles(lat, (50, 99, 100)))
    out: dict[str, Any] = {
        "receiver": name,
        "calls": len(lat),
        "p50_us": round(p50, 1),
        "p99_us": round(p99, 1),
        "max_us": round(high, 1),
        "total_s": round(decided_s, 2),
        "sink_counts_after": counts,
    }
    drained = ""
    if sink is not None and drain:
        sink.flush(60.0)
        out["drained_after_s"] = round(time.perf_counter() - t0 - decided_s, 2)
        out["sink_counts_drained"] = outcomes(telemetry)
        drained = f"; all delivered {out['drained_after_s']:.2f} s after the last decision: {out['sink_counts_drained']}"
    print(f"  {name:<22}{len(lat):>8,}{p50:>9.1f}{p99:>9.1f}{high:>10.1f}{decided_s:>10.2f}   {counts or '-'}{drained}")
    return out


def outcomes(telemetry: Metrics) -> dict[str, int]:
    return {
        s.labels["outcome"]: int(s.value)
        for family in telemetry.registry.collect()
        for s in family.samples
        if s.name == "agent_breaker_incidents_total"
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=300)
    ap.add_argument("--refused", type=int, default=10, help="refused calls per session, each an incident")
    out_argument(ap, "sinks")
    args = ap.parse_args()
    bench = Run("bench_sinks", args)
    print("agent-breaker incident sinks benchmark (python -m benchmarks.bench_sinks)")
    print(describe_machine(bench.machine))
    print(f"  {'receiver':<22}{'calls':>8}{'p50 us':>9}{'p99 us':>9}{'max us':>10}{'total s':>10}   sink counts after")
    rows = [run("no sink", None, args)]
    healthy = Receiver()
    rows.append(run("healthy", healthy.url, args, drain=True))
    healthy.close()
    slow = Receiver(delay_s=1.0)
    rows.append(run("slow (1 s per request)", slow.url, args))
    gate = threading.Event()
    hung = Receiver(gate=gate)
    rows.append(run("hung", hung.url, args))
    down = Receiver()
    url = down.url
    down.close()
    rows.append(run("down (refused)", url, args))
    gate.set()
    hung.close()
    slow.close()
    bench.write({"check_tool_call": rows}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
