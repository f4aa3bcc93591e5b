"""The Redis store on loopback: round trips per decision, decision latency, decisions/s.

    python -m benchmarks.bench_redis [--url redis://127.0.0.1:6379/15] [--decisions 5000] [--out FILE]
    python -m benchmarks.bench_redis --url redis+cluster://127.0.0.1:7000   # a Redis Cluster

Round trips are read from the server, not assumed: INFO commandstats (which also counts the
commands scripts run inside Redis) and MONITOR (which tells client commands from script ones),
per decision and per recorded result. Latency: p50/p99 of check_tool_call
with a shared Redis store, one process. Throughput: decisions/s with 4 processes on one Redis.
On a Redis Cluster, round trips are not counted (MONITOR and INFO are per node; the commands
are those of one server). Reports figures only; nothing is asserted. Uses its own key prefix
and deletes its keys. Percentiles are nearest-rank. Every figure goes to --out as JSON (default
benchmarks/results/redis.json, or redis_cluster.json on a cluster), with the machine's facts.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from agent_breaker import Engine, ReceiptKeys
from agent_breaker.store.base import without_password
from agent_breaker.store.redis import RedisStore
from agent_breaker.store.redis_client import is_cluster_url, node_urls
from benchmarks._harness import Run, describe_machine, percentile, result_path


def commandstats(client: redis.Redis) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): v["calls"] for k, v in client.info("commandstats").items()}


def make_engine(url: str, prefix: str) -> Engine:
    return Engine(
        store=RedisStore(url, prefix=prefix), listeners=[], sinks=False, escalations=False, receipt_keys=ReceiptKeys.ephemeral()
    )


def legit_step(engine: Engine, session: str, i: int) -> float:
    """One decision (timed) and its result (not timed); distinct calls, new results."""
    t = time.perf_counter()
    v = engine.check_tool_call(
        {
            "session": session,
            "tool": f"tool{i % 4}",
            "args": {"q": f"query {i}", "limit": 10},
            "input_tokens": 900,
            "output_tokens": 60,
        }
    )
    elapsed = time.perf_counter() - t
    engine.record_tool_result(
        {"session": session, "tool": f"tool{i % 4}", "ok": True, "result": {"rows": [i]}, "call_id": v.call_id}
    )
    return elapsed


class Monitor:
    """Counts the commands clients send (MONITOR), apart from those scripts run inside Redis."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.counts: dict[str, int] = {}
        self.inside_scripts = 0
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(5)

    def _run(self) -> None:
        with self.client.monitor() as m:
            self._ready.set()
            for cmd in m.listen():
                if cmd["command"].upper().startswith("PING AGENT-BREAKER-BENCH-END"):
                    break
                if cmd.get("client_type") == "lua":
                    self.inside_scripts += 1
                    continue
                name = cmd["command"].split(" ", 1)[0].upper()
                self.counts[name] = self.counts.get(name, 0) + 1

    def stop(self) -> dict[str, int]:
        self.client.execute_command("PING", "AGENT-BREAKER-BENCH-END")
        self._thread.join(10)
        return self.counts


def round_trips(url: str, prefix: str, n: int) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    engine = make_engine(url, prefix)
    for i in range(20):  # warm: scripts loaded, breakers known closed
        legit_step(engine, "warm", i)
    rows = []
    for label, run in (
        (
            "check_tool_call",
            lambda i: engine.check_tool_call({"session": f"rt{i % 50}", "tool": f"tool{i % 4}", "args": {"q": i}}),
        ),
        (
            "record_tool_result",
            lambda i: engine.record_tool_result(
                {"session": f"rt{i % 50}", "tool": f"tool{i % 4}", "ok": True, "result": {"r": i}}
            ),
        ),
    ):
        client.config_resetstat()
        monitor = Monitor(url)
        for i in range(n):
            run(i)
        counts = monitor.stop()
        stats = commandstats(client)
        rows.append((label, counts, monitor.inside_scripts, stats))
    print(f"round trips per event, read from the server ({n} events each)")
    out: dict[str, Any] = {"events": n}
    for label, counts, inside, stats in rows:
        total = sum(counts.values())
        detail = ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(counts.items()))
        cmd = ", ".join(
            f"{k} {v / n:.2f}" for k, v in sorted(stats.items()) if k not in ("config|resetstat", "info", "ping", "monitor")
        )
        print(
            f"  {label:20} {total / n:.2f} round trips  (MONITOR, client commands: {detail}; "
            f"plus {inside / n:.2f} run inside scripts)"
        )
        print(f"  {'':20} INFO commandstats: {cmd}  (counts the commands scripts run too)")
        out[label] = {
            "round_trips": round(total / n, 2),
            "client_commands": {k: round(v / n, 2) for k, v in sorted(counts.items())},
            "commands_inside_scripts": round(inside / n, 2),
        }
    engine.store.close()
    return out


def latency(url: str, prefix: str, n: int) -> dict[str, Any]:
    engine = make_engine(url, prefix)
    for i in range(200):
        legit_step(engine, "warm2", i)
    times = [legit_step(engine, f"lat{i % 100}", i) * 1e6 for i in range(n)]
    p50, p99 = percentile(times, 50), percentile(times, 99)
    print(f"check_tool_call latency on loopback, one process, {n} decisions: p50 {p50:.0f} us, p99 {p99:.0f} us")
    engine.store.close()
    return {"decisions": n, "check_tool_call_p50_us": round(p50), "check_tool_call_p99_us": round(p99)}


def worker(url: str, prefix: str, n: int, barrier, out) -> None:
    engine = make_engine(url, prefix)
    for i in range(50):
        legit_step(engine, f"w{os.getpid()}-warm", i)
    barrier.wait()
    t = time.perf_counter()
    for i in range(n):
        legit_step(engine, f"w{os.getpid()}-{i % 20}", i)
    out.put((n, time.perf_counter() - t))
    engine.store.close()


def throughput(url: str, prefix: str, n: int, procs: int = 4) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(procs), ctx.Queue()
    ps = [ctx.Process(target=worker, args=(url, prefix, n, barrier, out)) for _ in range(procs)]
    for p in ps:
        p.start()
    results = [out.get(timeout=600) for _ in ps]
    for p in ps:
        p.join()
    total = sum(r[0] for r in results)
    wall = max(r[1] for r in results)
    print(
        f"throughput, {procs} processes on one Redis (or cluster): {total / wall:,.0f} decisions/s "
        f"(each a check_tool_call plus its recorded result)"
    )
    return {"processes": procs, "decisions": total, "decisions_per_s": round(total / wall)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15"))
    ap.add_argument("--decisions", type=int, default=5000)
    ap.add_argument(
        "--out", type=Path, help="write the figures here as JSON (default benchmarks/results/redis.json or redis_cluster.json)"
    )
    args = ap.parse_args()
    cluster = is_cluster_url(args.url)
    out = args.out or result_path("redis_cluster" if cluster else "redis")
    run = Run("bench_redis", args)
    prefix = f"abbench-{uuid.uuid4().hex[:8]}"
    server = redis.Redis.from_url(node_urls(args.url)[0]).info("server")["redis_version"]
    print(f"{describe_machine(run.machine)} | redis-server {server} at {without_password(args.url)}")
    figures: dict[str, Any] = {"redis_server": server, "cluster": cluster}
    try:
        if cluster:
            print("round trips: not counted on a cluster (MONITOR and INFO are per node)")
        else:
            figures["round_trips_per_event"] = round_trips(args.url, prefix, 1000)
        figures["latency"] = latency(args.url, prefix, args.decisions)
        figures["throughput"] = throughput(args.url, prefix, args.decisions // 4)
    finally:
        cleanup = RedisStore(args.url, prefix=prefix, listen=False)
        print(f"deleted {cleanup.delete_all()} keys")
        cleanup.close()
    run.write(figures, out)


if __name__ == "__main__":
    main()
