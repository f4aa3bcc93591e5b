"""Escalation outbox benchmark: how many escalations per second, and how long until they are
on the queue.

    python benchmarks/bench_outbox.py [--escalations 3000] [--rate 100] [--seconds 10]
        [--queue-url amqp://guest:guest@127.0.0.1:5672/%2F]

Printed, each in a temporary SQLite file and a RabbitMQ queue of its own (deleted after):
1. `escalate()` per second, one thread, with `synchronous=FULL` (the default) and NORMAL: an
   escalation and its outbox row in one transaction each; and `frozen()` (the read the engine
   makes on each decision) in microseconds, for a frozen session (the record is read back) and
   a free one.
2. The relay draining a backlog of that many escalations to RabbitMQ (a durable quorum queue,
   publisher confirms, one message at a time): messages per second.
3. The relay delay, created -> marked delivered (both on the wall clock), while a writer
   escalates `--rate` per second for `--seconds`, with the relay thread polling every 0.25 s
   (a writer in another process: nothing tells the relay) and woken by the writer (`wake()`,
   the same process): p50 / p99 / max in milliseconds.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import pika

from agent_breaker.escalations import Escalation, Relay, Spend, SqliteEscalations, ToolOutcome
from agent_breaker.escalations.rabbitmq import RabbitPublisher


def record(i: int) -> Escalation:
    return Escalation.new(
        session=f"s{i}",
        tenant="acme",
        heuristic="unverified_claim",
        reason="the answer claims wire_transfer ran; no receipt for it",
        now=time.time(),
        counters={"claims": 1, "receipts": 0, "args_hash": "9f2c" * 16},
        spend=Spend(tokens=12_000, usd=0.42),
        tools=[ToolOutcome("wire_transfer", "blocked", 2), ToolOutcome("get_balance", "ok", 3)],
    )


def escalate_rate(folder: Path, n: int, synchronous: str) -> tuple[float, SqliteEscalations]:
    store = SqliteEscalations(folder / f"{synchronous}.db", synchronous=synchronous)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    for i in range(n):
        store.escalate(record(i))
    return n / (time.perf_counter() - t0), store


def frozen_us(store: SqliteEscalations, n: int, prefix: str) -> tuple[float, float]:
    lat = []
    for i in range(n):
        t0 = time.perf_counter_ns()
        store.frozen("acme", f"{prefix}{i}")
        lat.append(time.perf_counter_ns() - t0)
    lat.sort()
    return lat[len(lat) // 2] / 1000, lat[int(len(lat) * 0.99)] / 1000


def delays_ms(path: Path) -> list[float]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT (delivered_at - created_at) * 1000 FROM outbox WHERE delivered_at IS NOT NULL").fetchall()
    finally:
        conn.close()
    return sorted(r[0] for r in rows)


def steady(folder: Path, url: str, queue: str, rate: float, seconds: float, wake: bool) -> list[float]:
    path = folder / f"steady-{'wake' if wake else 'poll'}.db"
    store = SqliteEscalations(path)
    publisher = RabbitPublisher(url, queue)
    relay = Relay(store, {"rabbitmq": publisher}).start()
    try:
        n = int(rate * seconds)
        t0 = time.perf_counter()
        for i in range(n):
            time.sleep(max(0.0, t0 + i / rate - time.perf_counter()))
            store.escalate(record(i))
            if wake:
                relay.wake()
        deadline = time.monotonic() + 30
        while store.pending_count() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        relay.stop()
        publisher.close()
        store.close()
    return delays_ms(path)


def pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--escalations", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=100.0, help="escalations per second during the delay runs")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--queue-url", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    args = parser.parse_args()
    queue = f"agent-breaker-bench-{uuid.uuid4().hex}"
    with tempfile.TemporaryDirectory(prefix="bench-outbox-") as tmp:
        folder = Path(tmp)
        try:
            for sync in ("FULL", "NORMAL"):
                rate, store = escalate_rate(folder, args.escalations, sync)
                hit = frozen_us(store, 2000, "s")
                miss = frozen_us(store, 2000, "free")
                print(
                    f"escalate() synchronous={sync}: {rate:,.0f}/s; frozen() p50 / p99: a frozen session "
                    f"{hit[0]:.0f} / {hit[1]:.0f} us, a free one {miss[0]:.0f} / {miss[1]:.0f} us"
                )
                if sync == "FULL":
                    backlog = store
                else:
                    store.close()
            publisher = RabbitPublisher(args.queue_url, queue)
            relay = Relay(backlog, {"rabbitmq": publisher})
            t0 = time.perf_counter()
            while relay.run_once():
                pass
            took = time.perf_counter() - t0
            relay.close()
            publisher.close()
            backlog.close()
            rate = relay.delivered / took
            print(f"relay -> RabbitMQ (quorum queue, confirms): {relay.delivered:,} messages in {took:.2f} s, {rate:,.0f}/s")
            for wake in (False, True):
                d = steady(folder, args.queue_url, queue, args.rate, args.seconds, wake)
                how = "woken by the writer" if wake else "polling every 0.25 s"
                print(
                    f"relay delay at {args.rate:g} escalations/s, {how}: {len(d)} delivered, p50 {pct(d, 0.5):.1f} ms, "
                    f"p99 {pct(d, 0.99):.1f} ms, max {d[-1]:.1f} ms (mean {statistics.fmean(d):.1f})"
                )
        finally:
            connection = pika.BlockingConnection(pika.URLParameters(args.queue_url))
            connection.channel().queue_delete(queue)
            connection.close()


if __name__ == "__main__":
    main()
