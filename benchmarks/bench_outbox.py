"""Escalation outbox benchmark: how many escalations per second, and how long until they are
on the queue.

    python -m benchmarks.bench_outbox [--escalations 3000] [--rate 100] [--seconds 10]
        [--queue-url amqp://guest:guest@127.0.0.1:5672/%2F] [--redis redis://127.0.0.1:6379/0] [--out FILE]

Printed, each in a temporary SQLite file and a RabbitMQ queue of its own (deleted after):
1. `escalate()` per second, one thread, with `synchronous=FULL` (the default) and NORMAL: an
   escalation and its outbox row in one transaction each; and `frozen()` in microseconds, for
   a frozen session (the record is read back) and a free one.
2. The relay draining a backlog of that many escalations to RabbitMQ (a durable quorum queue,
   publisher confirms, one message at a time): messages per second.
3. The relay delay, created -> marked delivered (both on the wall clock), while a writer
   escalates `--rate` per second for `--seconds`, with the relay thread polling every 0.25 s
   (a writer in another process: nothing tells the relay) and woken by the writer (`wake()`,
   the same process): p50 / p99 / max in milliseconds.

With `--redis URL`, the same on `RedisEscalations` instead (a key prefix of its own, deleted
after): `escalate()` is one Lua script (the record, its indexes and the stream entry), and the
delay is created -> confirmed by the broker (a stream entry keeps no delivery time).

Percentiles are nearest-rank. Every figure goes to --out as JSON (default
benchmarks/results/outbox_sqlite.json, or outbox_redis.json with --redis), with the machine's facts.
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika

from agent_breaker.escalations import Escalation, RedisEscalations, Relay, Spend, SqliteEscalations, Target, ToolOutcome
from agent_breaker.escalations.rabbitmq import RabbitPublisher
from benchmarks._harness import Run, describe_machine, percentile, result_path

Store = SqliteEscalations | RedisEscalations


#: tenants the escalations are spread over: each holds fewer than the stores' cap of open ones
#: (escalations.max_open_per_tenant), so every escalation writes a record, as measured here
TENANTS = 100_000


def record(i: int) -> Escalation:
    return Escalation.new(
        session=f"s{i}",
        tenant=f"t{i % TENANTS}",
        heuristic="unverified_claim",
        reason="the answer claims wire_transfer ran; no receipt for it",
        now=time.time(),
        counters={"claims": 1, "receipts": 0, "args_hash": "9f2c" * 16},
        spend=Spend(tokens=12_000, usd=0.42),
        tools=[ToolOutcome("wire_transfer", "blocked", 2), ToolOutcome("get_balance", "ok", 3)],
    )


def escalate_rate(store: Store, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        store.escalate(record(i))
    return n / (time.perf_counter() - t0)


def frozen_us(store: Store, n: int, prefix: str) -> tuple[float, float]:
    lat = []
    for i in range(n):
        t0 = time.perf_counter_ns()
        store.frozen(f"t{i % TENANTS}", f"{prefix}{i}")
        lat.append(time.perf_counter_ns() - t0)
    return percentile(lat, 50) / 1000, percentile(lat, 99) / 1000


def delays_ms(path: Path) -> list[float]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT (delivered_at - created_at) * 1000 FROM outbox WHERE delivered_at IS NOT NULL").fetchall()
    finally:
        conn.close()
    return sorted(r[0] for r in rows)


def drain(store: Store, url: str, queue: str) -> dict[str, Any]:
    """The relay to RabbitMQ through a backlog: messages per second."""
    publisher = RabbitPublisher(url, queue)
    relay = Relay(store, {"rabbitmq": publisher})
    t0 = time.perf_counter()
    while relay.run_once():
        pass
    took = time.perf_counter() - t0
    relay.close()
    publisher.close()
    rate = relay.delivered / took
    print(f"relay -> RabbitMQ (quorum queue, confirms): {relay.delivered:,} messages in {took:.2f} s, {rate:,.0f}/s")
    return {"messages": relay.delivered, "seconds": round(took, 2), "messages_per_s": round(rate)}


def steady(store: Store, target: Target, rate: float, seconds: float, wake: bool) -> None:
    """A writer escalating `rate` per second for `seconds`, the relay thread delivering to `target`."""
    relay = Relay(store, {"rabbitmq": target}).start()
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


def steady_sqlite(folder: Path, url: str, queue: str, rate: float, seconds: float, wake: bool) -> list[float]:
    path = folder / f"steady-{'wake' if wake else 'poll'}.db"
    store = SqliteEscalations(path)
    publisher = RabbitPublisher(url, queue)
    try:
        steady(store, publisher, rate, seconds, wake)
    finally:
        publisher.close()
        store.close()
    return delays_ms(path)


def steady_redis(store: RedisEscalations, url: str, queue: str, rate: float, seconds: float, wake: bool) -> list[float]:
    publisher = RabbitPublisher(url, queue)
    delays: list[float] = []

    def timed(message: dict, key: str) -> None:
        publisher(message, key)
        delays.append((time.time() - message["created_at"]) * 1000)

    try:
        steady(store, timed, rate, seconds, wake)
    finally:
        publisher.close()
    return sorted(delays)


def print_delays(d: list[float], rate: float, wake: bool) -> dict[str, Any]:
    how = "woken by the writer" if wake else "polling every 0.25 s"
    p50, p99, high = percentile(d, 50), percentile(d, 99), percentile(d, 100)
    print(
        f"relay delay at {rate:g} escalations/s, {how}: {len(d)} delivered, p50 {p50:.1f} ms, "
        f"p99 {p99:.1f} ms, max {high:.1f} ms (mean {statistics.fmean(d):.1f})"
    )
    return {
        "relay": "woken" if wake else "polling",
        "delivered": len(d),
        "p50_ms": round(p50, 1),
        "p99_ms": round(p99, 1),
        "max_ms": round(high, 1),
        "mean_ms": round(statistics.fmean(d), 1),
    }


def escalate_figures(rate: float, hit: tuple[float, float], miss: tuple[float, float]) -> dict[str, Any]:
    return {
        "escalate_per_s": round(rate),
        "frozen_us": {
            "frozen_session": {"p50": round(hit[0], 1), "p99": round(hit[1], 1)},
            "free_session": {"p50": round(miss[0], 1), "p99": round(miss[1], 1)},
        },
    }


def on_sqlite(args: argparse.Namespace, queue: str) -> dict[str, Any]:
    out: dict[str, Any] = {"store": "sqlite"}
    with tempfile.TemporaryDirectory(prefix="bench-outbox-") as tmp:
        folder = Path(tmp)
        for sync in ("FULL", "NORMAL"):
            store = SqliteEscalations(folder / f"{sync}.db", synchronous=sync)  # type: ignore[arg-type]
            rate = escalate_rate(store, args.escalations)
            hit = frozen_us(store, 2000, "s")
            miss = frozen_us(store, 2000, "free")
            print(
                f"escalate() synchronous={sync}: {rate:,.0f}/s; frozen() p50 / p99: a frozen session "
                f"{hit[0]:.0f} / {hit[1]:.0f} us, a free one {miss[0]:.0f} / {miss[1]:.0f} us"
            )
            out[f"synchronous_{sync}"] = escalate_figures(rate, hit, miss)
            if sync == "FULL":
                out["drain"] = drain(store, args.queue_url, queue)
            store.close()
        out["delay"] = [
            print_delays(steady_sqlite(folder, args.queue_url, queue, args.rate, args.seconds, wake), args.rate, wake)
            for wake in (False, True)
        ]
    return out


@contextlib.contextmanager
def fresh_redis(url: str) -> Iterator[RedisEscalations]:
    """A Redis store on a key prefix of its own, deleted after."""
    prefix = f"bench-outbox-{uuid.uuid4().hex[:12]}"
    store = RedisEscalations(url, prefix=prefix, timeout_s=5.0)
    try:
        yield store
    finally:
        keys = list(store.redis.scan_iter(match=f"{prefix}:*"))
        if keys:
            store.redis.delete(*keys)
        store.close()


def on_redis(args: argparse.Namespace, queue: str) -> dict[str, Any]:
    out: dict[str, Any] = {"store": "redis"}
    with fresh_redis(args.redis) as store:
        rate = escalate_rate(store, args.escalations)
        hit = frozen_us(store, 2000, "s")
        miss = frozen_us(store, 2000, "free")
        print(
            f"escalate() on Redis: {rate:,.0f}/s; frozen() p50 / p99: a frozen session "
            f"{hit[0]:.0f} / {hit[1]:.0f} us, a free one {miss[0]:.0f} / {miss[1]:.0f} us"
        )
        out["redis"] = escalate_figures(rate, hit, miss)
        out["drain"] = drain(store, args.queue_url, queue)
    out["delay"] = []
    for wake in (False, True):
        with fresh_redis(args.redis) as store:
            delays = steady_redis(store, args.queue_url, queue, args.rate, args.seconds, wake)
            out["delay"].append(print_delays(delays, args.rate, wake))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--escalations", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=100.0, help="escalations per second during the delay runs")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--queue-url", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    parser.add_argument("--redis", metavar="URL", help="measure RedisEscalations on this Redis instead of SQLite")
    parser.add_argument(
        "--out",
        type=Path,
        help="write the figures here as JSON (default benchmarks/results/outbox_sqlite.json or outbox_redis.json)",
    )
    args = parser.parse_args()
    out = args.out or result_path("outbox_redis" if args.redis else "outbox_sqlite")
    run = Run("bench_outbox", args)
    print(describe_machine(run.machine))
    queue = f"agent-breaker-bench-{uuid.uuid4().hex}"
    try:
        figures = on_redis(args, queue) if args.redis else on_sqlite(args, queue)
    finally:
        connection = pika.BlockingConnection(pika.URLParameters(args.queue_url))
        connection.channel().queue_delete(queue)
        connection.close()
    run.write(figures, out)


if __name__ == "__main__":
    main()
