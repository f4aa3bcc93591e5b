"""The gateway path under load: `POST /v1/agent-breaker/check` before each tool call and
`POST /v1/agent-breaker/result` after it, as a gateway sends them, against the engine called in
process on the same machine in the same run.

    python -m benchmarks.bench_gateway [--sessions 1,50,200] [--duration-s 10] [--warmup-s 2]
        [--redis-url redis://127.0.0.1:6379/9] [--engine-steps 3000] [--out FILE]

Servers, each started on a free loopback port and stopped by PID: the memory config
(`config/agent_breaker`, one worker: its state lives in the worker's memory, so `serve` refuses
more) and the Redis config (`config/agent_breaker_redis`, 1 and 2 workers; its keys emptied
before and after). Against each, for each count in --sessions: that many closed-loop clients
(asyncio, one keep-alive connection each, HTTP/1.1 written by hand: about a tenth of httpx's CPU)
in a client process of its own, each a session calling `search` with new arguments (a new
session every CALLS_PER_SESSION calls) and reporting each allowed call's result. Reported per
phase: checks decided per second (200: run it, 429: refused), p50 / p99 / max of every /check
answer and of /result, the statuses, and failed requests (connection errors, any status but 200
or a refusal's 429: a busy server's 503 counts as failed). The clients share the 2 cores with
the server: at high counts they limit the throughput too.
Then the engine called directly (`agent_breaker.Engine` on the memory config, one process, no
HTTP): --engine-steps tool calls and their results, p50 / p99 of `check_tool_call`.
Percentiles are nearest-rank. Reports figures; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import multiprocessing as mp
import os
import random
import secrets
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks._harness import (
    CALLS_PER_SESSION,
    RawConnection,
    Run,
    args_for,
    flush_redis,
    free_port,
    ms_percentile,
    out_argument,
    result_for,
    serve,
    stop_process,
    tool_call,
    tool_result,
    wait_ready,
)

ROOT = Path(__file__).resolve().parents[1]
CHECK_PATH = "/v1/agent-breaker/check"
RESULT_PATH = "/v1/agent-breaker/result"
#: (config folder, the config id, workers to run it with)
SERVERS = (("agent_breaker", (1,)), ("agent_breaker_redis", (1, 2)))
KEY_PATTERN = "ab:*"  # the Redis config's key prefix (storage.key_prefix: ab)


def gateway_body(config_id: str, session: str, event: dict[str, Any]) -> dict[str, Any]:
    return {"config_id": config_id, "session_id": session, "event": {k: v for k, v in event.items() if k != "type"}}


async def client(
    conn: RawConnection, config_id: str, name: str, deadline: float, lat: dict[str, list[float]], counts: Counter
) -> None:
    rng = random.Random(name)
    n = 0
    try:
        while time.monotonic() < deadline:
            n += 1
            session = f"{name}-s{n // CALLS_PER_SESSION}"
            try:
                t = time.perf_counter()
                status, data = await conn.post(CHECK_PATH, gateway_body(config_id, session, tool_call(n, args_for(rng, n))))
                lat["check"].append(time.perf_counter() - t)
                counts[f"check {status}"] += 1
                if status != 200:
                    continue  # refused (429) or failed: no result to report
                t = time.perf_counter()
                status, data = await conn.post(RESULT_PATH, gateway_body(config_id, session, tool_result(n, result_for(rng, n))))
                lat["result"].append(time.perf_counter() - t)
                counts[f"result {status}"] += 1
            except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                counts[f"error {type(exc).__name__}"] += 1
    finally:
        await conn.close()


async def drive_async(base: str, token: str, config_id: str, sessions: int, seconds: float, tag: str) -> dict[str, Any]:
    lat: dict[str, list[float]] = {"check": [], "result": []}
    counts: Counter = Counter()
    deadline = time.monotonic() + seconds
    t0 = time.monotonic()
    conns = [RawConnection(base, token) for _ in range(sessions)]
    await asyncio.gather(*(client(c, config_id, f"{tag}-{i}", deadline, lat, counts) for i, c in enumerate(conns)))
    return {"lat": lat, "counts": dict(counts), "elapsed": time.monotonic() - t0}


def drive(base: str, token: str, config_id: str, sessions: int, seconds: float, tag: str) -> dict[str, Any]:
    """One phase, in the client process."""
    return asyncio.run(drive_async(base, token, config_id, sessions, seconds, tag))


def phase_figures(raw: dict[str, Any]) -> dict[str, Any]:
    counts = raw["counts"]
    checks = raw["lat"]["check"]
    # decided: the call let through (200) or refused (429); anything else failed the gateway
    decided = counts.get("check 200", 0) + counts.get("check 429", 0)
    failed = sum(n for k, n in counts.items() if k.startswith("error") or k.split()[-1] not in ("200", "429"))
    return {
        "checks": len(checks),
        "checks_per_s": round(decided / raw["elapsed"], 1),
        "check_ms": {q: ms_percentile(checks, p) for q, p in (("p50", 50), ("p99", 99), ("max", 100))},
        "result_ms": {q: ms_percentile(raw["lat"]["result"], p) for q, p in (("p50", 50), ("p99", 99), ("max", 100))},
        "statuses": counts,
        "failed_requests": failed,
    }


def run_server(config: str, workers: int, args: argparse.Namespace, pool: concurrent.futures.Executor) -> dict[str, Any]:
    redis = config.endswith("_redis")
    if redis:
        flush_redis(args.redis_url, KEY_PATTERN)
    token = secrets.token_urlsafe(32)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        "REDIS_URL": args.redis_url,
        "AGENT_BREAKER_ESCALATIONS_DB": os.path.join(tempfile.mkdtemp(prefix="bench-gateway-"), "escalations.db"),
    }
    out: dict[str, Any] = {"config": config, "workers": workers, "phases": []}
    with tempfile.TemporaryFile() as log:
        proc = serve(port, token, log, "--config", str(ROOT / "config" / config), "--workers", str(workers), env=env)
        try:
            wait_ready(proc, base, token, log)
            pool.submit(drive, base, token, config, 1, args.warmup_s, f"{config}-{workers}-warm").result()
            for sessions in args.sessions:
                print(f"bench_gateway: {config}, {workers} worker(s), {sessions} sessions ...", file=sys.stderr, flush=True)
                raw = pool.submit(
                    drive, base, token, config, sessions, args.duration_s, f"{config}-{workers}-{sessions}"
                ).result()
                out["phases"].append({"sessions": sessions, **phase_figures(raw)})
        finally:
            stop_process(proc)
            if redis:
                flush_redis(args.redis_url, KEY_PATTERN)
    return out


def run_engine(steps: int) -> dict[str, Any]:
    """The memory config's engine in this process: no HTTP, no NeMo."""
    from agent_breaker import Engine, ReceiptKeys, load_config
    from agent_breaker.protocol import BY_COLANG, TOOL_CALL_EVENT, TOOL_RESULT_EVENT, to_engine_event

    config = load_config(ROOT / "config" / "agent_breaker" / "config.yml")
    engine = Engine(config, receipt_keys=ReceiptKeys.ephemeral(), listeners=[], sinks=False)
    rng = random.Random(0)
    lat: list[float] = []
    t0 = time.monotonic()
    for n in range(steps):
        session = f"engine-s{n // CALLS_PER_SESSION}"
        # the very events the clients send, as the server's engine receives them
        call = to_engine_event(BY_COLANG[TOOL_CALL_EVENT], {**tool_call(n, args_for(rng, n)), "session_id": session})
        t = time.perf_counter()
        engine.check_tool_call(call)
        lat.append(time.perf_counter() - t)
        engine.record_tool_result(
            to_engine_event(BY_COLANG[TOOL_RESULT_EVENT], {**tool_result(n, result_for(rng, n)), "session_id": session})
        )
    elapsed = time.monotonic() - t0
    return {
        "steps": steps,
        "checks_per_s": round(steps / elapsed, 1),  # each with its result recorded
        "check_ms": {"p50": ms_percentile(lat, 50), "p99": ms_percentile(lat, 99), "max": ms_percentile(lat, 100)},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", default="1,50,200", help="concurrent sessions per phase (default 1,50,200)")
    ap.add_argument("--duration-s", type=float, default=10.0, help="seconds per phase (default 10)")
    ap.add_argument("--warmup-s", type=float, default=2.0, help="one client before the phases (default 2)")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/9", help="the Redis config's database (emptied of ab:*)")
    ap.add_argument("--engine-steps", type=int, default=3000, help="calls of the in-process engine (default 3000)")
    out_argument(ap, "gateway")
    args = ap.parse_args()
    args.sessions = [int(s) for s in args.sessions.split(",")]
    run = Run("bench_gateway", args)
    engine = run_engine(args.engine_steps)
    servers = []
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
        for config, worker_counts in SERVERS:
            for workers in worker_counts:
                servers.append(run_server(config, workers, args, pool))
    print(
        f"{'config':<22} {'workers':>7} {'sessions':>8} {'checks/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'failed':>6}"
    )
    for s in servers:
        for ph in s["phases"]:
            c = ph["check_ms"]
            print(
                f"{s['config']:<22} {s['workers']:>8} {ph['sessions']:>8} {ph['checks_per_s']:>8} "
                f"{c['p50']:>8} {c['p99']:>8} {c['max']:>8} {ph['failed_requests']:>8}"
            )
    e = engine["check_ms"]
    print(
        f"engine in process: {engine['checks_per_s']} checks/s (with results), check_tool_call p50 {e['p50']} / p99 {e['p99']} ms"
    )
    run.write({"servers": servers, "engine": engine}, args.out)


if __name__ == "__main__":
    main()
