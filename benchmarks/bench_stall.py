"""Does a slow Redis stall the decisions that do not use it?

    python -m benchmarks.bench_stall [--delay-ms 50] [--slow-clients 4] [--seconds 10] [--out FILE]

Starts `agent-breaker serve` (by the tests' helper, tests/_server.py; in the current directory,
so run from the repository root it serves the checkout's agent_breaker) with two configs: the
in-memory `agent_breaker` and the Redis one, whose Redis sits behind a TCP proxy that delays each
reply by --delay-ms. Then, for --seconds each:

1. quiet: one client sends in-memory events back to back (one event per request);
2. slow Redis: the same client, while --slow-clients clients send events to the Redis config.

Reported: the in-memory client's p50 / p99 latency (nearest-rank) and events/s in each phase,
and the Redis clients' events/s. Figures only, nothing asserted. Every figure goes to --out as
JSON (default benchmarks/results/stall.json), with the machine's facts.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from benchmarks._harness import Run, describe_machine, out_argument, percentile, tests_module

os.environ.setdefault("NEMO_GUARDRAILS_NO_USAGE_STATS", "1")
TcpProxy = tests_module("_proxy").TcpProxy
_server = tests_module("_server")
TOKEN, call, db_url, start = _server.TOKEN, _server.call, _server.db_url, _server.start
served_root = tests_module("test_serve_concurrency").served_root


def client(server, config_id: str, stop: threading.Event, latencies: list[float]) -> None:
    session, i = f"b-{uuid.uuid4().hex[:8]}", 0
    with httpx.Client(base_url=server.base, headers=server.headers, timeout=120) as http:
        while not stop.is_set():
            i += 1
            if i % 40 == 0:
                session = f"b-{uuid.uuid4().hex[:8]}"  # under the step ceiling
            body = {"config_id": config_id, "session_id": session, "events": [call(i, "search", {"q": f"term {i}"})]}
            t = time.perf_counter()
            r = http.post("/v1/agent-breaker/events", json=body)
            latencies.append(time.perf_counter() - t)
            assert r.status_code == 200, r.text


def phase(server, seconds: float, slow_clients: int) -> tuple[list[float], int]:
    stop = threading.Event()
    fast: list[float] = []
    slow: list[list[float]] = [[] for _ in range(slow_clients)]
    threads = [threading.Thread(target=client, args=(server, "agent_breaker_redis", stop, s)) for s in slow]
    threads.append(threading.Thread(target=client, args=(server, "agent_breaker", stop, fast)))
    for t in threads:
        t.start()
    time.sleep(seconds)  # a benchmark's duration, not a test's wait
    stop.set()
    for t in threads:
        t.join()
    return fast, sum(len(s) for s in slow)


def describe(name: str, fast: list[float], slow_n: int, seconds: float) -> dict[str, Any]:
    p50, p99 = percentile(fast, 50) * 1000, percentile(fast, 99) * 1000
    print(
        f"  {name:28} in-memory p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  "
        f"{len(fast) / seconds:6.1f} events/s | Redis config {slow_n / seconds:6.1f} events/s"
    )
    return {
        "phase": name,
        "in_memory_events": len(fast),
        "in_memory_p50_ms": round(p50, 1),
        "in_memory_p99_ms": round(p99, 1),
        "in_memory_events_per_s": round(len(fast) / seconds, 1),
        "redis_config_events_per_s": round(slow_n / seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delay-ms", type=float, default=50.0)
    ap.add_argument("--slow-clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10.0)
    out_argument(ap, "stall")
    args = ap.parse_args(argv)
    run = Run("bench_stall", args, argv)
    print(describe_machine(run.machine))
    upstream = httpx.URL(db_url(11).replace("redis://", "http://"))
    proxy = TcpProxy((upstream.host, upstream.port or 6379), delay_s=args.delay_ms / 1000)
    env = {"REDIS_URL": f"redis://127.0.0.1:{proxy.port}/11", "AGENT_BREAKER_API_TOKEN": TOKEN}
    server = start(env, args=("--config", str(served_root(Path(tempfile.mkdtemp())))), token=TOKEN)
    try:
        where = run.machine["agent_breaker"]  # the server inherits the current directory: the same package
        print(f"server: {where}; Redis replies delayed {args.delay_ms:g} ms; {args.slow_clients} Redis clients")
        fast, _ = phase(server, args.seconds, 0)
        quiet = describe("quiet", fast, 0, args.seconds)
        fast, slow_n = phase(server, args.seconds, args.slow_clients)
        slow = describe("with a slow Redis", fast, slow_n, args.seconds)
    finally:
        server.stop()
        proxy.close()
    run.write({"server_agent_breaker": where, "phases": [quiet, slow]}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
