"""Scale-out: `agent-breaker serve --workers N` on the Redis config, and the engine called directly.

    python -m benchmarks.bench_workers [--workers 1,2,4] [--rounds 1] [--clients 64] [--client raw|httpx]
        [--duration-s 20] [--warmup-s 5] [--latency-s 10] [--redis-url redis://127.0.0.1:6379/9]
        [--engine-steps 3000] [--out FILE]

For each N in --workers: the Redis database is emptied of the config's keys (`ab:*`), then
`agent-breaker serve --workers N --config config/agent_breaker_redis` starts on a free loopback
port (with an API token, $REDIS_URL set to --redis-url) and three phases run against it, each
by --clients closed-loop clients (asyncio, no think time) in a client process of their own, so
its CPU time is apart from the server's. By default (--client raw) each client has a keep-alive
connection of its own and writes HTTP/1.1 by hand, at about a tenth of httpx's CPU per request;
--client httpx shares one httpx.AsyncClient. On a small machine the clients and the server share
the cores: the client process's CPU share is reported beside the server's.

1. warm-up (--warmup-s, not reported): the events endpoint, as in phase 2;
2. events (--duration-s): POST /v1/agent-breaker/events, one event per request: a
   ToolCallRequested for `search` with new args, then its ToolResultReceived, one session per
   client (a new one every CALLS_PER_SESSION calls). Reported: events/s, p50/p99 per event;
3. check (--duration-s): the gateway's flow: POST /v1/agent-breaker/check (the call; 200 or
   429), then the result through the events endpoint. Reported: checks/s and p50/p99 of the
   check, events/s of both kinds;
4. alone (--latency-s each): phases 2 and 3 by one client, one request at a time: the latency
   of an event with no queue in front of it (under load, p50 is mostly queueing: with K
   closed-loop clients it is about K / (events/s)).

Every verdict is read: a refused call or result counts as refused (there should be none: the
args are new each time). CPU, each as a share of one core over the phase: the server (the
supervisor and its workers, /proc; `worker_cpu_pct` per worker in the JSON: how evenly the
connections were spread), the client process, Redis (INFO cpu), the rest of the machine
(/proc/stat: other processes, the kernel), and idle.

Then the engine called directly (`agent_breaker.Engine` on the same config, state on the same
Redis, one process, no HTTP): --engine-steps tool calls and their results, p50/p99 of each
`check_tool_call` and `record_tool_result`, and events/s (both count).

Reading the figures: a worker is one Python process, so at most one core (the interpreter
lock): one worker at about 95% of a core is as fast as one process gets. N workers can use N
cores, if the machine has them free: on 2 cores the client process, Redis and anything else
running take their share first. The Redis database is emptied again at the end. One table; every
figure goes to --out as JSON (default benchmarks/results/workers.json), with the machine's facts and
the load average at start and end. Percentiles are nearest-rank; the medians over rounds too.
Reports figures; nothing is asserted.
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
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from benchmarks._harness import (
    CALLS_PER_SESSION,
    REQUEST_TIMEOUT_S,
    RawConnection,
    Run,
    args_for,
    children,
    cpu_s,
    describe_machine,
    flush_redis,
    free_port,
    ms_percentile,
    out_argument,
    percentile,
    result_for,
    save,
    serve,
    server_env,
    stop_process,
    tool_call,
    tool_result,
    wait_ready,
)

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "config" / "agent_breaker_redis"
CONFIG_ID = "agent_breaker_redis"
EVENTS_PATH = "/v1/agent-breaker/events"
CHECK_PATH = "/v1/agent-breaker/check"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/9"
KEY_PATTERN = "ab:*"  # the config's key prefix (storage.key_prefix: ab)


# ----------------------------------------------------------------------------- Redis, the server


def start_server(port: int, workers: int, token: str, redis_url: str, log: Any) -> subprocess.Popen:
    env = {
        "REDIS_URL": redis_url,
        # escalations (none expected) in a file of the run's own, never the user's queue
        "AGENT_BREAKER_ESCALATIONS_DB": os.path.join(tempfile.mkdtemp(prefix="bench-workers-"), "escalations.db"),
    }
    # the benchmark stops the supervisor by PID (it stops its workers); the group is the safety
    # net for a supervisor that had to be killed
    return serve(port, token, log, "--config", str(CONFIG), "--workers", str(workers), env=env)


def machine_cpu_s() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine, all cores (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    return (total - idle) / tick, total / tick


def redis_cpu_s(url: str) -> float:
    """CPU seconds the Redis server has used (INFO cpu)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        info = client.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
    finally:
        client.close()


def tree_cpu_s(pid: int) -> dict[int, float]:
    """CPU time of a process and of each of its live children (the supervisor and its workers)."""
    out = {}
    for p in [pid, *children(pid)]:
        with contextlib.suppress(OSError):
            out[p] = cpu_s(p)
    return out


# ----------------------------------------------------------------------------- the clients (own process)


def body(session: str, event: dict[str, Any]) -> dict[str, Any]:
    return {"config_id": CONFIG_ID, "session_id": session, "events": [event]}


class HttpxConnection:
    """The same through a shared httpx.AsyncClient (its pool: a connection per request in flight)."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def post(self, path: str, obj: dict[str, Any]) -> tuple[int, Any]:
        r = await self.client.post(path, json=obj)
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, None

    async def close(self) -> None:
        pass


def refused_by(status: int, data: Any, verdict_type: str, flag: str) -> str | None:
    """None when an answer of the events endpoint let its one event through; else why not."""
    if status != 200 or not isinstance(data, dict):
        return f"status {status}"
    verdicts = [v for v in data.get("events") or [] if v.get("type") == verdict_type]
    if not verdicts:
        return "no verdict"
    return None if verdicts[-1].get(flag) is True else str(verdicts[-1].get("heuristic"))


async def client_loop(conn: Any, name: str, mode: str, deadline: float, lat: dict[str, list[float]], counts: Counter) -> None:
    """Tool calls and their results, one at a time, until the deadline. A request that fails
    (the server closed the connection, httpx's pool racing its keep-alive timeout) is counted
    as an error and the client goes on with its next call."""
    rng = random.Random(name)
    n = 0
    try:
        while time.monotonic() < deadline:
            n += 1
            try:
                await one_call(conn, name, mode, n, rng, lat, counts)
            except (OSError, asyncio.IncompleteReadError, ValueError, httpx.HTTPError) as exc:
                counts[f"error {type(exc).__name__}"] += 1
    finally:
        await conn.close()


async def one_call(
    conn: Any, name: str, mode: str, n: int, rng: random.Random, lat: dict[str, list[float]], counts: Counter
) -> None:
    """Call n of a client, and its result when the call was let through."""
    session = f"{name}-s{n // CALLS_PER_SESSION}"
    call = tool_call(n, args_for(rng, n))
    t = time.perf_counter()
    if mode == "check":
        status, data = await conn.post(CHECK_PATH, {"config_id": CONFIG_ID, "session_id": session, "event": call})
        lat["check"].append(time.perf_counter() - t)
        counts[f"check {status}"] += 1
        ok = status == 200 and isinstance(data, dict) and data.get("allowed") is True
        why = None if ok else str(data.get("heuristic") if isinstance(data, dict) else f"status {status}")
    else:
        status, data = await conn.post(EVENTS_PATH, body(session, call))
        lat["call"].append(time.perf_counter() - t)
        counts[f"call {status}"] += 1
        why = refused_by(status, data, "ToolCallVerdict", "allowed")
    if why is not None:
        counts["refused"] += 1
        counts[f"refused call: {why}"] += 1
        return  # a refused call gets no result
    t = time.perf_counter()
    status, data = await conn.post(EVENTS_PATH, body(session, tool_result(n, result_for(rng, n))))
    lat["result"].append(time.perf_counter() - t)
    counts[f"result {status}"] += 1
    why = refused_by(status, data, "ToolResultVerdict", "accepted")
    if why is not None:
        counts["refused"] += 1
        counts[f"refused result: {why}"] += 1


async def drive_async(base: str, token: str, mode: str, clients: int, seconds: float, tag: str, kind: str) -> dict[str, Any]:
    lat: dict[str, list[float]] = {"call": [], "result": [], "check": []}
    counts: Counter = Counter()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        base_url=base, headers={"authorization": f"Bearer {token}"}, timeout=REQUEST_TIMEOUT_S, limits=limits
    ) as client:
        conns = [RawConnection(base, token) if kind == "raw" else HttpxConnection(client) for _ in range(clients)]
        deadline = time.monotonic() + seconds
        cpu0 = sum(os.times()[:2])
        t0 = time.monotonic()
        await asyncio.gather(*(client_loop(c, f"{tag}-{i}", mode, deadline, lat, counts) for i, c in enumerate(conns)))
        elapsed = time.monotonic() - t0
        cpu = sum(os.times()[:2]) - cpu0
    return {"lat": lat, "counts": dict(counts), "elapsed": elapsed, "client_cpu_s": cpu}


def drive(base: str, token: str, mode: str, clients: int, seconds: float, tag: str, kind: str) -> dict[str, Any]:
    """One phase, in the client process."""
    return asyncio.run(drive_async(base, token, mode, clients, seconds, tag, kind))


# ----------------------------------------------------------------------------- one server


def phase_figures(raw: dict[str, Any], server_cpu: float, redis_cpu: float, machine: tuple[float, float]) -> dict[str, Any]:
    lat, elapsed = raw["lat"], raw["elapsed"]
    events = len(lat["call"]) + len(lat["result"]) + len(lat["check"])
    every = lat["call"] + lat["result"] + lat["check"]
    out = {
        "seconds": round(elapsed, 1),
        "events": events,
        "events_per_s": round(events / elapsed, 1),
        "p50_ms": ms_percentile(every, 50),
        "p99_ms": ms_percentile(every, 99),
        "statuses": raw["counts"],
        "refused": raw["counts"].get("refused", 0),
        "server_cpu_pct": round(100 * server_cpu / elapsed),
        "client_cpu_pct": round(100 * raw["client_cpu_s"] / elapsed),
        "redis_cpu_pct": round(100 * redis_cpu / elapsed),
        # the machine's busy time (percent of one core) left over by the server, the clients and
        # Redis: other processes, and the benchmark's own parent (idle while a phase runs)
        "others_cpu_pct": round(100 * (machine[0] - server_cpu - raw["client_cpu_s"] - redis_cpu) / elapsed),
        "idle_cpu_pct": round(100 * (machine[1] - machine[0]) / elapsed),
    }
    if lat["check"]:
        out.update(
            checks_per_s=round(len(lat["check"]) / elapsed, 1),
            check_p50_ms=ms_percentile(lat["check"], 50),
            check_p99_ms=ms_percentile(lat["check"], 99),
            result_p50_ms=ms_percentile(lat["result"], 50),
            result_p99_ms=ms_percentile(lat["result"], 99),
        )
    return out


def run_server(workers: int, args: argparse.Namespace, pool: concurrent.futures.Executor) -> dict[str, Any]:
    flush_redis(args.redis_url, KEY_PATTERN)
    token = secrets.token_urlsafe(32)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        t0 = time.monotonic()
        proc = start_server(port, workers, token, args.redis_url, log)
        try:
            wait_ready(proc, base, token, log)
            # every worker up: the supervisor's children are the workers (and multiprocessing's resource tracker)
            ready_s = round(time.monotonic() - t0, 1)
            procs = len(children(proc.pid))
            out: dict[str, Any] = {"workers": workers, "ready_s": ready_s, "child_processes": procs}
            print(f"bench_workers: {workers} worker(s): warm-up {args.warmup_s:g}s ...", file=sys.stderr, flush=True)
            pool.submit(drive, base, token, "events", args.clients, args.warmup_s, f"w{workers}-warm", args.client).result()
            for mode in ("events", "check"):
                print(f"bench_workers: {workers} worker(s): {mode} {args.duration_s:g}s ...", file=sys.stderr, flush=True)
                cpu0, redis0, (busy0, total0) = tree_cpu_s(proc.pid), redis_cpu_s(args.redis_url), machine_cpu_s()
                raw = pool.submit(
                    drive, base, token, mode, args.clients, args.duration_s, f"w{workers}-{mode}", args.client
                ).result()
                busy1, total1 = machine_cpu_s()
                cpu1 = tree_cpu_s(proc.pid)
                per_process = {p: cpu1[p] - cpu0.get(p, 0.0) for p in cpu1}
                out[mode] = phase_figures(
                    raw, sum(per_process.values()), redis_cpu_s(args.redis_url) - redis0, (busy1 - busy0, total1 - total0)
                )
                # each worker's share of a core (the supervisor's own is about 0): how evenly the kernel spread the connections
                out[mode]["worker_cpu_pct"] = sorted(
                    (round(100 * c / raw["elapsed"]) for p, c in per_process.items() if p != proc.pid), reverse=True
                )[:workers]
            if args.latency_s > 0:
                # one client, one request at a time: the latency of an event with no queue in front of it
                print(f"bench_workers: {workers} worker(s): unloaded {2 * args.latency_s:g}s ...", file=sys.stderr, flush=True)
                for mode in ("events", "check"):
                    phase = (base, token, mode, 1, args.latency_s, f"w{workers}-alone-{mode}", args.client)
                    raw = pool.submit(drive, *phase).result()
                    every = raw["lat"]["call"] + raw["lat"]["result"] + raw["lat"]["check"]
                    out[f"alone_{mode}"] = {
                        "requests": len(every),
                        "p50_ms": ms_percentile(every, 50),
                        "p99_ms": ms_percentile(every, 99),
                        "refused": raw["counts"].get("refused", 0),
                    }
                    if mode == "check":
                        out["alone_check"].update(
                            check_p50_ms=ms_percentile(raw["lat"]["check"], 50),
                            check_p99_ms=ms_percentile(raw["lat"]["check"], 99),
                        )
            out["server_exit"] = proc.poll()
        finally:
            stop_process(proc)
            log.seek(0)
            # the store's warnings: Redis slower than storage.timeout_ms (a starved machine) means decisions on local state
            out["redis_failures_logged"] = log.read().decode(errors="replace").count("agent-breaker: Redis at")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # nothing should be left; if something is, it goes
            flush_redis(args.redis_url, KEY_PATTERN)
    return out


# ----------------------------------------------------------------------------- the engine, directly


def run_engine(args: argparse.Namespace) -> dict[str, Any]:
    """The same config's engine in this process, on the same Redis: no HTTP, no NeMo."""
    from agent_breaker import Engine
    from agent_breaker.config import load_config

    flush_redis(args.redis_url, KEY_PATTERN)
    env = {"REDIS_URL": args.redis_url, **server_env("unused-token-" + "x" * 20)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        engine = Engine(load_config(CONFIG / "config.yml"), listeners=[])
        rng = random.Random("engine")
        calls: list[float] = []
        results: list[float] = []
        refused = 0
        t0 = time.perf_counter()
        for n in range(1, args.engine_steps + 1):
            session = f"engine-s{n // CALLS_PER_SESSION}"
            t = time.perf_counter()
            v = engine.check_tool_call({"session": session, "tool": "search", "args": args_for(rng, n)})
            calls.append(time.perf_counter() - t)
            if not v.allowed:
                refused += 1
                continue
            t = time.perf_counter()
            r = engine.record_tool_result(
                {"session": session, "tool": "search", "ok": True, "result": result_for(rng, n), "call_id": v.call_id}
            )
            results.append(time.perf_counter() - t)
            refused += not r.accepted
        elapsed = time.perf_counter() - t0
        engine.store.close()  # type: ignore[attr-defined]
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        flush_redis(args.redis_url, KEY_PATTERN)
    return {
        "steps": args.engine_steps,
        "events_per_s": round((len(calls) + len(results)) / elapsed, 1),
        "check_p50_ms": ms_percentile(calls, 50),
        "check_p99_ms": ms_percentile(calls, 99),
        "result_p50_ms": ms_percentile(results, 50),
        "result_p99_ms": ms_percentile(results, 99),
        "p50_ms": ms_percentile(calls + results, 50),
        "p99_ms": ms_percentile(calls + results, 99),
        "refused": refused,
    }


# ----------------------------------------------------------------------------- report


def medians(servers: list[dict[str, Any]], counts: list[int]) -> list[dict[str, Any]]:
    """Per worker count, over the rounds: medians of the loaded phases' figures, and of each
    round's ratio to that round's first worker count (a round's servers share its conditions)."""

    def median(values: list[float]) -> float:
        return round(percentile(values, 50), 1)

    firsts = {r["round"]: r["events"]["events_per_s"] for r in servers if r["workers"] == counts[0]}
    out = []
    for n in counts:
        runs = [r for r in servers if r["workers"] == n]
        rates = [r["events"]["events_per_s"] for r in runs]
        ratios = [r["events"]["events_per_s"] / firsts[r["round"]] for r in runs]
        out.append(
            {
                "workers": n,
                "rounds": len(runs),
                "events_per_s": median(rates),
                "events_per_s_range": [min(rates), max(rates)],
                "ratio": round(percentile(ratios, 50), 2),
                "ratio_range": [round(min(ratios), 2), round(max(ratios), 2)],
                "p50_ms": median([r["events"]["p50_ms"] for r in runs]),
                "p99_ms": median([r["events"]["p99_ms"] for r in runs]),
                "checks_per_s": median([r["check"]["checks_per_s"] for r in runs]),
                "check_p50_ms": median([r["check"]["check_p50_ms"] for r in runs]),
                "check_p99_ms": median([r["check"]["check_p99_ms"] for r in runs]),
            }
        )
    return out


def fmt(value: Any) -> str:
    return "-" if value is None else str(value)


def print_table(result: dict[str, Any]) -> None:
    s, machine = result["setup"], result["machine"]
    print(
        f"\nScale-out on the Redis config: {s['clients']} closed-loop clients ({s['client']}) in one process, "
        f"{s['duration_s']:g}s per phase "
        f"(after {s['warmup_s']:g}s warm-up) | python {machine['python']} | cpus {machine['cpu_count']} | load avg "
        f"{machine['load_average_at_start'][0]} before, {machine['load_average_at_end'][0]} after | {machine['date_utc']}"
    )
    print(
        f"  {'workers':>7} {'events/s':>9} {'x1':>5} {'p50 ms':>7} {'p99 ms':>7} | {'checks/s':>8} {'chk p50':>7} {'chk p99':>7} "
        f"{'events/s':>9} | {'srv cpu':>7} {'cli cpu':>7} {'redis':>6} {'others':>6} {'idle':>6} {'refused':>7}  per worker"
    )
    first = s["workers"][0]
    ones = {r["round"]: r["events"]["events_per_s"] for r in result["servers"] if r["workers"] == first}
    for r in result["servers"]:
        e, c = r["events"], r["check"]
        ratio = f"{e['events_per_s'] / ones[r['round']]:.2f}"
        print(
            f"  {r['workers']:>7} {e['events_per_s']:>9} {ratio:>5} {fmt(e['p50_ms']):>7} {fmt(e['p99_ms']):>7} | "
            f"{fmt(c.get('checks_per_s')):>8} {fmt(c.get('check_p50_ms')):>7} {fmt(c.get('check_p99_ms')):>7} "
            f"{c['events_per_s']:>9} | {e['server_cpu_pct']:>6}% {e['client_cpu_pct']:>6}% {e['redis_cpu_pct']:>5}% "
            f"{e['others_cpu_pct']:>5}% {e['idle_cpu_pct']:>5}% {e['refused'] + c['refused']:>7}  "
            f"{'/'.join(str(w) for w in e['worker_cpu_pct']) or '-'}"
        )
    if s["rounds"] > 1:
        print(f"\n  medians over {s['rounds']} rounds (x{first}: each round's ratio to its own {first}-worker server)")
        print(
            f"  {'workers':>7} {'events/s':>9} {'range':>13} {'x1':>5} {'range':>11} {'p50 ms':>7} {'p99 ms':>7} | "
            f"{'checks/s':>8} {'chk p50':>7} {'chk p99':>7}"
        )
        for m in result["medians"]:
            lo, hi = m["events_per_s_range"]
            rlo, rhi = m["ratio_range"]
            print(
                f"  {m['workers']:>7} {m['events_per_s']:>9} {f'{lo}-{hi}':>13} {m['ratio']:>5} {f'{rlo}-{rhi}':>11} "
                f"{m['p50_ms']:>7} {m['p99_ms']:>7} | {m['checks_per_s']:>8} {m['check_p50_ms']:>7} {m['check_p99_ms']:>7}"
            )
    if any("alone_events" in r for r in result["servers"]):
        print(f"\n  one client alone (no queue), {s['latency_s']:g}s each: p50 / p99 ms")
        print(f"  {'workers':>7} {'events endpoint':>16} {'check endpoint':>16}")
        for r in result["servers"]:
            a, k = r.get("alone_events"), r.get("alone_check")
            if a and k:
                events, check = f"{a['p50_ms']} / {a['p99_ms']}", f"{k['check_p50_ms']} / {k['check_p99_ms']}"
                print(f"  {r['workers']:>7} {events:>16} {check:>16}")
    g = result.get("engine")
    if g:
        print(
            f"  engine, called directly (one process, same Redis): {g['events_per_s']} events/s; "
            f"check_tool_call p50 {g['check_p50_ms']} / p99 {g['check_p99_ms']} ms, "
            f"record_tool_result p50 {g['result_p50_ms']} / p99 {g['result_p99_ms']} ms; refused {g['refused']}"
        )
    for line in result["findings"]:
        print(f"  - {line}")


def findings(servers: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in servers:
        for mode in ("events", "check"):
            p = r[mode]
            bad = {k: v for k, v in p["statuses"].items() if not k.startswith("refused") and not k.endswith(" 200")}
            if mode == "check":
                bad = {k: v for k, v in bad.items() if k != "check 429"}
            why = {k: v for k, v in p["statuses"].items() if k.startswith("refused ")}
            if bad or p["refused"]:
                out.append(f"{r['workers']} worker(s), {mode}: {p['refused']} refused {why}, other statuses {bad}")
        if r.get("redis_failures_logged"):
            failures = r["redis_failures_logged"]
            out.append(f"{r['workers']} worker(s): the store logged {failures} Redis failure(s) (timeouts: local state)")
        if r.get("server_exit") is not None:
            out.append(f"{r['workers']} worker(s): the server exited during the run ({r['server_exit']})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", default="1,2,4", help="comma-separated worker counts (default 1,2,4)")
    ap.add_argument(
        "--clients", type=int, default=64, help="concurrent closed-loop clients (default 64: enough to keep 4 workers busy)"
    )
    ap.add_argument(
        "--client",
        choices=["raw", "httpx"],
        default="raw",
        help="raw: a keep-alive connection per client, HTTP written by hand (default; light); httpx: one AsyncClient's pool",
    )
    ap.add_argument("--duration-s", type=float, default=20.0, help="length of each measured phase (default 20)")
    ap.add_argument("--warmup-s", type=float, default=5.0, help="warm-up before the phases (default 5)")
    ap.add_argument("--latency-s", type=float, default=10.0, help="each unloaded phase, one client (default 10; 0: none)")
    ap.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help=f"the run's Redis database (default {DEFAULT_REDIS_URL})")
    ap.add_argument("--engine-steps", type=int, default=3000, help="tool calls (and results) of the direct engine run (0: none)")
    ap.add_argument(
        "--rounds", type=int, default=1, help="run the worker counts this many times, in turn (default 1): medians below the rows"
    )
    out_argument(ap, "workers")
    args = ap.parse_args()
    counts = [int(w) for w in args.workers.split(",") if w.strip()]
    if not counts or min(counts) < 1 or args.clients < 1 or args.rounds < 1:
        ap.error("--workers takes whole numbers of at least 1, --clients and --rounds at least 1")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops the run like Ctrl-C
    run = Run("bench_workers", args)
    print(describe_machine(run.machine), file=sys.stderr, flush=True)
    servers = []
    try:
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
            for round_ in range(1, args.rounds + 1):
                for n in counts:
                    servers.append({"round": round_, **run_server(n, args, pool)})
        engine = run_engine(args) if args.engine_steps > 0 else None
    except KeyboardInterrupt:
        print("bench_workers: interrupted; the server was stopped", file=sys.stderr)
        sys.exit(130)
    result = {
        "setup": {
            "workers": counts,
            "rounds": args.rounds,
            "clients": args.clients,
            "client": args.client,
            "duration_s": args.duration_s,
            "warmup_s": args.warmup_s,
            "latency_s": args.latency_s,
            "config": CONFIG_ID,
        },
        "servers": servers,
        "medians": medians(servers, counts),
        "engine": engine,
        "findings": findings(servers),
    }
    doc = run.document(result)
    print_table(doc)
    save(doc, args.out)


if __name__ == "__main__":
    main()
