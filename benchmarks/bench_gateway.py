"""The gateway path under load: `POST /v1/agent-breaker/check` before each tool call and
`POST /v1/agent-breaker/result` after it, as a gateway sends them, against the engine called in
process on the same machine in the same run.

    python -m benchmarks.bench_gateway [--sessions 1,50,200] [--paced-sessions 50,200]
        [--rates 100,250,500,1000] [--check-only-rates 1000] [--duration-s 10] [--warmup-s 2]
        [--redis-url redis://127.0.0.1:6379/9] [--engine-steps 3000] [--out FILE]

Servers, each started on a free loopback port and stopped by PID: the memory config
(`config/agent_breaker`, one worker: its state lives in the worker's memory, so `serve` refuses
more) and the Redis config (`config/agent_breaker_redis`, 1 and 2 workers; its keys emptied
before and after). The clients run in a process of their own (asyncio, one keep-alive
connection per session, HTTP/1.1 written by hand: about a tenth of httpx's CPU); each session
calls `search` with new arguments (a new session every CALLS_PER_SESSION calls) and reports each
allowed call's result, so every check is two requests, except in the check-only phases
(--check-only-rates: /check alone, as the issue that asked for this benchmark measured it; as
no call's result comes, a session holds at most 64 calls in flight, so these sessions end after
CHECK_ONLY_CALLS_PER_SESSION calls). Each session's connection is opened before the clock starts.
Two kinds of phase:

- closed: each of --sessions sends its next check as soon as the last result is answered. What
  it measures is capacity: checks/s at saturation. Its latency is queueing by construction:
  N sessions always in flight wait N / throughput on average (Little's law), so 50 closed
  sessions at 1,000 checks/s cannot see less than 50 ms.
- paced: each of --paced-sessions sends checks at random times (Poisson), all together at the
  offered rate (each of --rates, checks/s), as agents whose tools and models take time between
  calls. A check's latency counts from the moment it was due, so a server (or client) that
  falls behind is charged for the wait (no coordinated omission).

Reported per phase: checks answered per second (200: run it, 429: refused), p50 / p99 / max of
/check and p99 of /result, the failed requests (connection errors, any status but 200 or 429;
a busy server's 503 is counted apart and as failed), and the server's own CPU time per request
(its processes' user + system time over the phase / the requests answered), and the client's.
The clients share the 2 cores with the server: the two CPU figures say how much of the machine
each took. Then the engine called directly (`agent_breaker.Engine` on each
config, one process, no HTTP): --engine-steps tool calls and their results.
Percentiles are nearest-rank. Reports figures; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
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
    cpu_s,
    flush_redis,
    free_port,
    ms_percentile,
    out_argument,
    process_tree,
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
#: the check-only phases' sessions: under the engine's 64 calls in flight a session (MAX_PENDING)
CHECK_ONLY_CALLS_PER_SESSION = 50


def gateway_body(config_id: str, session: str, event: dict[str, Any]) -> dict[str, Any]:
    return {"config_id": config_id, "session_id": session, "event": {k: v for k, v in event.items() if k != "type"}}


class Tally:
    """What one phase's clients saw."""

    def __init__(self) -> None:
        self.check: list[float] = []
        self.result: list[float] = []
        self.counts: Counter = Counter()

    async def call(
        self, conn: RawConnection, config_id: str, session: str, rng: random.Random, n: int, due: float, results: bool
    ) -> None:
        """One check, timed from `due`, and its result when the call may run (and `results`)."""
        try:
            status, _ = await conn.post(CHECK_PATH, gateway_body(config_id, session, tool_call(n, args_for(rng, n))))
            self.check.append(time.perf_counter() - due)
            self.counts[f"check {status}"] += 1
            if status != 200 or not results:
                return  # refused (429) or failed: no result to report
            t = time.perf_counter()
            status, _ = await conn.post(RESULT_PATH, gateway_body(config_id, session, tool_result(n, result_for(rng, n))))
            self.result.append(time.perf_counter() - t)
            self.counts[f"result {status}"] += 1
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            self.counts[f"error {type(exc).__name__}"] += 1


async def session_client(
    conn: RawConnection, config_id: str, name: str, deadline: float, tally: Tally, mean_gap_s: float | None, results: bool
) -> None:
    """One session's calls until `deadline`: back to back (closed), or at random times averaging
    one per `mean_gap_s` (paced)."""
    rng = random.Random(name)
    due = time.perf_counter() + (rng.expovariate(1 / mean_gap_s) if mean_gap_s else 0.0)
    n = 0
    try:
        while time.perf_counter() < deadline:
            if mean_gap_s:
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
            else:
                due = time.perf_counter()
            n += 1
            # without results every call stays in flight: a session holds at most MAX_PENDING
            per_session = CALLS_PER_SESSION if results else CHECK_ONLY_CALLS_PER_SESSION
            await tally.call(conn, config_id, f"{name}-s{n // per_session}", rng, n, due, results)
            if mean_gap_s:
                due += rng.expovariate(1 / mean_gap_s)
    finally:
        await conn.close()


async def drive_async(
    base: str, token: str, config_id: str, sessions: int, seconds: float, tag: str, rate: float | None, results: bool
) -> dict[str, Any]:
    tally = Tally()
    conns = [RawConnection(base, token) for _ in range(sessions)]
    await asyncio.gather(*(c.open() for c in conns))  # a gateway's pool is warm: connecting is not deciding
    mean_gap_s = sessions / rate if rate else None
    t0, cpu0 = time.perf_counter(), time.process_time()
    deadline = t0 + seconds
    await asyncio.gather(
        *(session_client(c, config_id, f"{tag}-{i}", deadline, tally, mean_gap_s, results) for i, c in enumerate(conns))
    )
    return {
        "check": tally.check,
        "result": tally.result,
        "counts": dict(tally.counts),
        "elapsed": time.perf_counter() - t0,
        "client_cpu_s": time.process_time() - cpu0,
    }


def drive(
    base: str,
    token: str,
    config_id: str,
    sessions: int,
    seconds: float,
    tag: str,
    rate: float | None = None,
    results: bool = True,
) -> dict[str, Any]:
    """One phase, in the client process."""
    return asyncio.run(drive_async(base, token, config_id, sessions, seconds, tag, rate, results))


def phase_figures(raw: dict[str, Any], cpu_seconds: float) -> dict[str, Any]:
    counts = raw["counts"]
    # decided: the call let through (200) or refused (429); anything else failed the gateway
    decided = counts.get("check 200", 0) + counts.get("check 429", 0)
    requests = sum(n for k, n in counts.items() if not k.startswith("error"))
    failed = sum(n for k, n in counts.items() if k.startswith("error") or k.split()[-1] not in ("200", "429"))
    return {
        "checks_per_s": round(decided / raw["elapsed"], 1),
        "check_p50_ms": ms_percentile(raw["check"], 50),
        "check_p99_ms": ms_percentile(raw["check"], 99),
        "check_max_ms": ms_percentile(raw["check"], 100),
        "result_p99_ms": ms_percentile(raw["result"], 99),
        "refused_429": counts.get("check 429", 0),
        "busy_503": sum(n for k, n in counts.items() if k.endswith(" 503")),
        "failed": failed,
        "server_cpu_ms_per_request": round(1000 * cpu_seconds / requests, 3) if requests else None,
        "client_cpu_ms_per_request": round(1000 * raw["client_cpu_s"] / requests, 3) if requests else None,
    }


def server_cpu_s(pid: int) -> float:
    total = 0.0
    for p in process_tree(pid):
        with contextlib.suppress(OSError):  # a worker gone between the listing and the read
            total += cpu_s(p)
    return total


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
    phases: list[dict[str, Any]] = []
    plan = (
        [("closed", s, None, True) for s in args.sessions]
        + [("paced", s, r, True) for s in args.paced_sessions for r in args.rates]
        + [("paced", s, r, False) for s in args.paced_sessions for r in args.check_only_rates]
    )
    with tempfile.TemporaryFile() as log:
        proc = serve(port, token, log, "--config", str(ROOT / "config" / config), "--workers", str(workers), env=env)
        try:
            wait_ready(proc, base, token, log)
            pool.submit(drive, base, token, config, 1, args.warmup_s, f"{config}-{workers}-warm").result()
            for i, (mode, sessions, rate, results) in enumerate(plan):
                offered = f" at {rate:g} checks/s" if rate else ""
                alone = "" if results else ", checks only"
                print(
                    f"bench_gateway: {config}, {workers} worker(s), {sessions} {mode} sessions{offered}{alone} ...",
                    file=sys.stderr,
                    flush=True,
                )
                before = server_cpu_s(proc.pid)
                tag = f"{config}-{workers}-{i}"
                raw = pool.submit(drive, base, token, config, sessions, args.duration_s, tag, rate, results).result()
                figures = phase_figures(raw, server_cpu_s(proc.pid) - before)
                phase = {"phase": f"{mode} {sessions}", "offered_checks_per_s": rate, "results": results}
                phases.append({**phase, **figures})
        finally:
            stop_process(proc)
            if redis:
                flush_redis(args.redis_url, KEY_PATTERN)
    return {
        "name": f"{config}, {workers} worker{'s' if workers > 1 else ''}",
        "config": config,
        "workers": workers,
        "phases": phases,
    }


def run_engine(config: str, steps: int, redis_url: str) -> dict[str, Any]:
    """A config's engine in this process: no HTTP, no NeMo."""
    from agent_breaker import Engine, ReceiptKeys, load_config
    from agent_breaker.protocol import BY_COLANG, TOOL_CALL_EVENT, TOOL_RESULT_EVENT, to_engine_event

    redis = config.endswith("_redis")
    if redis:
        os.environ["REDIS_URL"] = redis_url
        os.environ.setdefault("AGENT_BREAKER_FINGERPRINT_SECRET", secrets.token_hex(32))
        flush_redis(redis_url, KEY_PATTERN)
    engine = Engine(
        load_config(ROOT / "config" / config / "config.yml"), receipt_keys=ReceiptKeys.ephemeral(), listeners=[], sinks=False
    )
    rng = random.Random(0)
    checks: list[float] = []
    results: list[float] = []
    t0 = time.perf_counter()
    try:
        for n in range(steps):
            session = f"engine-s{n // CALLS_PER_SESSION}"
            # the very events the clients send, as the server's engine receives them
            call = to_engine_event(BY_COLANG[TOOL_CALL_EVENT], {**tool_call(n, args_for(rng, n)), "session_id": session})
            t = time.perf_counter()
            engine.check_tool_call(call)
            checks.append(time.perf_counter() - t)
            result = to_engine_event(BY_COLANG[TOOL_RESULT_EVENT], {**tool_result(n, result_for(rng, n)), "session_id": session})
            t = time.perf_counter()
            engine.record_tool_result(result)
            results.append(time.perf_counter() - t)
    finally:
        if redis:
            flush_redis(redis_url, KEY_PATTERN)
    return {
        "engine": config,
        "steps": steps,
        "checks_per_s": round(steps / (time.perf_counter() - t0), 1),  # each with its result recorded
        "check_p50_ms": ms_percentile(checks, 50),
        "check_p99_ms": ms_percentile(checks, 99),
        "result_p50_ms": ms_percentile(results, 50),
        "result_p99_ms": ms_percentile(results, 99),
    }


def numbers(text: str, kind: type) -> list[Any]:
    return [kind(s) for s in text.split(",") if s.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", default="1,50,200", help="closed-loop sessions per phase (default 1,50,200)")
    ap.add_argument("--paced-sessions", default="50,200", help="paced sessions per phase (default 50,200)")
    ap.add_argument("--rates", default="100,250,500,1000", help="offered checks/s of the paced phases (default 100,250,500,1000)")
    ap.add_argument(
        "--check-only-rates", default="1000", help="offered checks/s of the paced phases without results (default 1000)"
    )
    ap.add_argument("--duration-s", type=float, default=10.0, help="seconds per phase (default 10)")
    ap.add_argument("--warmup-s", type=float, default=2.0, help="one client before the phases (default 2)")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/9", help="the Redis config's database (emptied of ab:*)")
    ap.add_argument("--engine-steps", type=int, default=3000, help="calls of each in-process engine (default 3000)")
    ap.add_argument(
        "--servers",
        default=",".join(f"{c}:{w}" for c, ws in SERVERS for w in ws),
        help="config:workers to run (default: all of them)",
    )
    out_argument(ap, "gateway")
    args = ap.parse_args()
    args.sessions, args.paced_sessions = numbers(args.sessions, int), numbers(args.paced_sessions, int)
    args.rates, args.check_only_rates = numbers(args.rates, float), numbers(args.check_only_rates, float)
    run = Run("bench_gateway", args)
    configs = dict.fromkeys(spec.split(":")[0] for spec in args.servers.split(","))
    engines = [run_engine(config, args.engine_steps, args.redis_url) for config in configs]
    servers = []
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
        for spec in args.servers.split(","):
            config, workers = spec.split(":")
            servers.append(run_server(config, int(workers), args, pool))
    head = f"{'config':<20} {'w':>2} {'phase':<11} {'offered':>8} {'results':>7} {'checks/s':>9} {'p50 ms':>7} {'p99 ms':>7}"
    print(head + f" {'max ms':>7} {'failed':>6} {'server cpu ms/req':>17} {'client':>6}")
    for s in servers:
        for ph in s["phases"]:
            offered = "" if ph["offered_checks_per_s"] is None else f"{ph['offered_checks_per_s']:g}"
            print(
                f"{s['config']:<20} {s['workers']:>2} {ph['phase']:<11} {offered:>8} {'yes' if ph['results'] else 'no':>7} "
                f"{ph['checks_per_s']:>9} {ph['check_p50_ms']!s:>7} {ph['check_p99_ms']!s:>7} {ph['check_max_ms']!s:>7} "
                f"{ph['failed']:>6} {ph['server_cpu_ms_per_request']!s:>17} {ph['client_cpu_ms_per_request']!s:>6}"
            )
    for e in engines:
        print(
            f"engine in process ({e['engine']}): {e['checks_per_s']} checks/s with results; check p50 {e['check_p50_ms']}"
            f" / p99 {e['check_p99_ms']} ms"
        )
    run.write({"servers": servers, "engines": engines}, args.out)


if __name__ == "__main__":
    main()
