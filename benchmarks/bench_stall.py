"""Does a slow Redis stall the decisions that do not use it?

    python benchmarks/bench_stall.py [--delay-ms 50] [--slow-clients 4] [--seconds 10]

Starts `agent-breaker serve` (the agent_breaker that this Python imports: to measure another
version, run the script with the Python of a venv that holds it, from outside any checkout)
with two configs: the in-memory `agent_breaker` and the Redis one, whose Redis sits behind a
TCP proxy that delays each reply by --delay-ms. Then, for --seconds each:

1. quiet: one client sends in-memory events back to back (one event per request);
2. slow Redis: the same client, while --slow-clients clients send events to the Redis config.

Reported: the in-memory client's p50 / p99 latency and events/s in each phase, and the Redis
clients' events/s. Figures only, nothing asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from _proxy import TcpProxy  # noqa: E402
from _server import TOKEN, call, db_url, start  # noqa: E402
from test_serve_concurrency import served_root  # noqa: E402

os.environ.setdefault("NEMO_GUARDRAILS_NO_USAGE_STATS", "1")


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


def describe(name: str, fast: list[float], slow_n: int, seconds: float) -> None:
    fast_sorted = sorted(fast)
    p99 = fast_sorted[min(len(fast_sorted) - 1, int(len(fast_sorted) * 0.99))]
    print(
        f"  {name:28} in-memory p50 {statistics.median(fast) * 1000:7.1f} ms  p99 {p99 * 1000:7.1f} ms  "
        f"{len(fast) / seconds:6.1f} events/s | Redis config {slow_n / seconds:6.1f} events/s"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delay-ms", type=float, default=50.0)
    ap.add_argument("--slow-clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args(argv)
    upstream = httpx.URL(db_url(11).replace("redis://", "http://"))
    proxy = TcpProxy((upstream.host, upstream.port or 6379), delay_s=args.delay_ms / 1000)
    env = {"REDIS_URL": f"redis://127.0.0.1:{proxy.port}/11", "AGENT_BREAKER_API_TOKEN": TOKEN}
    server = start(env, args=("--config", str(served_root(Path(tempfile.mkdtemp())))), token=TOKEN)
    try:
        where = subprocess.run(
            [sys.executable, "-c", "import agent_breaker; print(agent_breaker.__file__)"], capture_output=True, text=True, cwd="/"
        ).stdout.strip()
        print(f"server: {where}; Redis replies delayed {args.delay_ms:g} ms; {args.slow_clients} Redis clients")
        fast, _ = phase(server, args.seconds, 0)
        describe("quiet", fast, 0, args.seconds)
        fast, slow_n = phase(server, args.seconds, args.slow_clients)
        describe("with a slow Redis", fast, slow_n, args.seconds)
    finally:
        server.stop()
        proxy.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
