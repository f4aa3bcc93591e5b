"""The gateway path under load: `POST /v1/agent-breaker/check` before each tool call and
`POST /v1/agent-breaker/result` after it, as a gateway sends them, through the clients gateways
use, against the engine called in process on the same machine in the same run.

    python -m benchmarks.bench_gateway [--clients raw,httpx,aiohttp] [--redis-clients raw]
        [--fixed 50x40,200x10] [--sessions 1,50,200] [--paced-sessions 50,200] [--rates 250,1000]
        [--check-only-rates 1000] [--duration-s 8] [--warmup-s 2] [--servers CONFIG:WORKERS,...]
        [--redis-url redis://127.0.0.1:6379/9] [--engine-steps 3000] [--out FILE]

Servers, each started on a free loopback port and stopped by PID: the memory config
(`config/agent_breaker`, one worker: its state lives in the worker's memory, so `serve` refuses
more) and the Redis config (`config/agent_breaker_redis`, 1 and 2 workers; its keys emptied
before and after). Every request carries the one token the server was started with. The clients
run in a process of their own (asyncio), each phase through one of three:

- raw: a keep-alive connection per session, HTTP/1.1 written by hand (about a tenth of httpx's
  CPU: on 2 cores, the most left to the server);
- httpx: one `httpx.AsyncClient` shared by every session, as a gateway shares it, with its
  default pool (at most 100 connections, 20 kept alive), HTTP/1.1, keep-alive;
- aiohttp: one `aiohttp.ClientSession` shared by every session, its default TCPConnector (at
  most 100 connections).

Every phase runs once per client of --clients (all three) on the memory config, and of
--redis-clients (raw alone) on the Redis configs: the clients differ in their own CPU and in how
they pool connections, not in what the store does; so the default run stays under 10 minutes on
2 cores (3 servers, 55 phases: 45 of --duration-s and 10 fixed ones, as long as their checks
take; a minute more to start the servers and run the engines). Before the clock starts each
phase opens its connections (a gateway's pool is warm: connecting is not deciding): raw connects
each session; httpx and aiohttp send one request per session at once, and their pool keeps what
it keeps.

Each session calls `search` with new arguments (a new session every CALLS_PER_SESSION calls) and
reports each allowed call's result, so every check is two requests, except in the check-only
phases (--check-only-rates: /check alone, as the issue that asked for this benchmark measured it;
as no call's result comes, a session holds at most 64 calls in flight, so these sessions end
after CHECK_ONLY_CALLS_PER_SESSION calls). Three kinds of phase:

- fixed (`closed NxM`, --fixed): N sessions, each sending exactly M checks back to back: is every
  check answered (no 503, no failure), and how long do they all take.
- closed: each of --sessions sends its next check as soon as the last result is answered, for
  --duration-s. What it measures is capacity: checks/s at saturation. Its latency is queueing by
  construction: N sessions always in flight wait N / throughput on average (Little's law), so 50
  closed sessions at 1,000 checks/s cannot see less than 50 ms.
- paced: each of --paced-sessions sends checks at random times (Poisson), all together at the
  offered rate (each of --rates, checks/s), for --duration-s, as agents whose tools and models
  take time between calls. A check's latency counts from the moment it was due, so a server (or
  client) that falls behind is charged for the wait (no coordinated omission); the checks due
  but not yet sent when the phase ends are not sent (fewer checks than offered x seconds).

Reported per phase and client: the checks sent and answered (200: run it, 429: refused), the
phase's seconds, checks answered per second, p50 / p99 / max of /check and p99 of /result (of
the answers that decided: 200 or 429); the 503s apart (`busy_503`: a server too busy answered,
Retry-After, and nothing was decided; not counted as failed); the failed requests (`failed`, by
type in `failures`: the client's exceptions, such as a connection lost, a timeout or an answer
not JSON, and any status but 200, 429 or 503); and the server's own CPU time per request
answered (its processes' user + system time, /proc, read right before and after the clock), and
the client's. The clients share the 2 cores with the server: the two CPU figures say how much of
the machine each took, and a client that takes a core bounds what it can offer. With one worker,
also the server's own p99 of /check, from its histogram `agent_breaker_gateway_seconds` scraped
before and after the phase (`server_check_p99_ms_at_most`: the bound of the bucket holding it;
the pooled clients' warm-up requests are in it too): what the server took, whatever the client. Then the engine
called directly (`agent_breaker.Engine` on each config, one process, no HTTP): --engine-steps
tool calls and their results. Percentiles are nearest-rank. Reports figures; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import dataclasses
import math
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
    CLIENTS,
    Connection,
    Run,
    args_for,
    connections,
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
#: the answers that decide: the call may run or its result is taken (200), or refused (429); a busy server's 503 decides nothing
DECIDED = (200, 429)
BUSY = 503


@dataclasses.dataclass(frozen=True)
class Phase:
    """One phase's load: `sessions` sessions of one client, each sending its checks back to back
    (closed) or at random times, `rate` checks/s offered by all together (paced); for the phase's
    duration, or `checks` checks each."""

    client: str
    sessions: int
    rate: float | None = None
    checks: int | None = None
    results: bool = True  # each allowed check followed by its result

    @property
    def name(self) -> str:
        count = f"x{self.checks}" if self.checks else ""
        return f"{'paced' if self.rate else 'closed'} {self.sessions}{count}"


def gateway_body(config_id: str, session: str, event: dict[str, Any]) -> dict[str, Any]:
    return {"config_id": config_id, "session_id": session, "event": {k: v for k, v in event.items() if k != "type"}}


class Tally:
    """What one phase's clients saw: latencies, statuses and the clients' exceptions, by request ("check", "result")."""

    def __init__(self) -> None:
        self.latency: dict[str, list[float]] = {"check": [], "result": []}
        self.statuses: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()

    async def post(self, conn: Connection, what: str, path: str, body: dict[str, Any], since: float) -> int | None:
        """One request, counted, its latency from `since` when it was decided; its status, None when it failed."""
        try:
            status, _ = await conn.post(path, body)
        except conn.errors as exc:
            self.errors[f"{what} {type(exc).__name__}"] += 1
            return None
        if status in DECIDED:  # a busy server's 503 comes at once: its latency would flatter the figures
            self.latency[what].append(time.perf_counter() - since)
        self.statuses[f"{what} {status}"] += 1
        return status

    async def call(
        self, conn: Connection, config_id: str, session: str, rng: random.Random, n: int, due: float, results: bool
    ) -> None:
        """One check, timed from `due`, and its result when the call may run (and `results`)."""
        status = await self.post(conn, "check", CHECK_PATH, gateway_body(config_id, session, tool_call(n, args_for(rng, n))), due)
        if status == 200 and results:  # refused (429), busy (503) or failed: no result to report
            body = gateway_body(config_id, session, tool_result(n, result_for(rng, n)))
            await self.post(conn, "result", RESULT_PATH, body, time.perf_counter())


async def session_client(conn: Connection, config_id: str, name: str, phase: Phase, deadline: float, tally: Tally) -> None:
    """One session's checks until `deadline` or its phase's count: back to back (closed), or at
    random times averaging one per sessions / rate seconds (paced)."""
    rng = random.Random(name)
    mean_gap_s = phase.sessions / phase.rate if phase.rate else None
    due = time.perf_counter() + (rng.expovariate(1 / mean_gap_s) if mean_gap_s else 0.0)
    # without results every call stays in flight: a session holds at most MAX_PENDING
    per_session = CALLS_PER_SESSION if phase.results else CHECK_ONLY_CALLS_PER_SESSION
    n = 0
    # the phase ends on time: a paced check due after the deadline is not waited for, and one due
    # before it but not sent by then (the client or the server fell behind) is not sent
    while n < (phase.checks or math.inf) and max(due, time.perf_counter()) < deadline:
        if mean_gap_s:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
        n += 1
        await tally.call(conn, config_id, f"{name}-s{n // per_session}", rng, n, due, phase.results)
        due = due + rng.expovariate(1 / mean_gap_s) if mean_gap_s else time.perf_counter()


def server_cpu_s(pid: int) -> float:
    total = 0.0
    for p in process_tree(pid):
        with contextlib.suppress(OSError):  # a worker gone between the listing and the read
            total += cpu_s(p)
    return total


async def drive_async(
    base: str, token: str, config_id: str, phase: Phase, seconds: float, tag: str, server_pid: int
) -> dict[str, Any]:
    tally = Tally()
    async with connections(phase.client, base, token, phase.sessions) as conns:
        # the server's CPU read here, after the connections opened: the requests' alone
        server0 = server_cpu_s(server_pid)
        t0, cpu0 = time.perf_counter(), time.process_time()
        deadline = math.inf if phase.checks else t0 + seconds
        await asyncio.gather(*(session_client(c, config_id, f"{tag}-{i}", phase, deadline, tally) for i, c in enumerate(conns)))
        elapsed, client_cpu = time.perf_counter() - t0, time.process_time() - cpu0
        server_cpu = server_cpu_s(server_pid) - server0
    return {
        **tally.latency,
        "statuses": dict(tally.statuses),
        "errors": dict(tally.errors),
        "elapsed": elapsed,
        "client_cpu_s": client_cpu,
        "server_cpu_s": server_cpu,
    }


def drive(base: str, token: str, config_id: str, phase: Phase, seconds: float, tag: str, server_pid: int) -> dict[str, Any]:
    """One phase, in the client process."""
    return asyncio.run(drive_async(base, token, config_id, phase, seconds, tag, server_pid))


def phase_figures(raw: dict[str, Any]) -> dict[str, Any]:
    statuses, errors = raw["statuses"], raw["errors"]
    answered = sum(statuses.get(f"check {s}", 0) for s in DECIDED)
    requests = sum(statuses.values())
    # a 503 is the server answering that it is busy (Retry-After), apart: anything else not decided failed
    failures = {**errors, **{k: n for k, n in statuses.items() if int(k.split()[1]) not in (*DECIDED, BUSY)}}
    return {
        "checks": sum(n for k, n in (*statuses.items(), *errors.items()) if k.startswith("check ")),
        "answered": answered,
        "elapsed_s": round(raw["elapsed"], 2),
        "checks_per_s": round(answered / raw["elapsed"], 1),
        "check_p50_ms": ms_percentile(raw["check"], 50),
        "check_p99_ms": ms_percentile(raw["check"], 99),
        "check_max_ms": ms_percentile(raw["check"], 100),
        "result_p99_ms": ms_percentile(raw["result"], 99),
        "refused_429": statuses.get("check 429", 0),
        "busy_503": sum(n for k, n in statuses.items() if k.endswith(f" {BUSY}")),
        "failed": sum(failures.values()),
        "failures": ", ".join(f"{k} x{n}" for k, n in sorted(failures.items())),
        "server_cpu_ms_per_request": round(1000 * raw["server_cpu_s"] / requests, 3) if requests else None,
        "client_cpu_ms_per_request": round(1000 * raw["client_cpu_s"] / requests, 3) if requests else None,
    }


def check_buckets(base: str, token: str) -> dict[float, float]:
    """The server's histogram of its own time per /check (agent_breaker_gateway_seconds):
    cumulative count per bucket bound, from /metrics."""
    import httpx

    text = httpx.get(base + "/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=30).text
    out = {}
    for line in text.splitlines():
        if line.startswith('agent_breaker_gateway_seconds_bucket{endpoint="check",'):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[float(le)] = float(line.rsplit(" ", 1)[1])
    return out


def server_check_p99_ms(before: dict[float, float], after: dict[float, float]) -> float | None:
    """The bound of the bucket that holds the 99th percentile of the checks between two scrapes
    (an upper bound of the server's own p99: the time from the request guard to the answer)."""
    total = after.get(math.inf, 0.0) - before.get(math.inf, 0.0)
    if total <= 0:
        return None
    for le in sorted(after):
        if after[le] - before.get(le, 0.0) >= 0.99 * total:
            return le * 1000
    return None


def plan(clients: list[str], args: argparse.Namespace) -> list[Phase]:
    """Every phase, once per client."""
    return [
        phase
        for client in clients
        for phase in (
            *(Phase(client, sessions, checks=checks) for sessions, checks in args.fixed),
            *(Phase(client, sessions) for sessions in args.sessions),
            *(Phase(client, sessions, rate) for sessions in args.paced_sessions for rate in args.rates),
            *(Phase(client, sessions, rate, results=False) for sessions in args.paced_sessions for rate in args.check_only_rates),
        )
    ]


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
    clients = args.redis_clients if redis else args.clients
    phases: list[dict[str, Any]] = []
    with tempfile.TemporaryFile() as log:
        proc = serve(port, token, log, "--config", str(ROOT / "config" / config), "--workers", str(workers), env=env)
        try:
            wait_ready(proc, base, token, log)
            warm = Phase(clients[0], 1)
            pool.submit(drive, base, token, config, warm, args.warmup_s, f"{config}-{workers}-warm", proc.pid).result()
            for i, phase in enumerate(plan(clients, args)):
                offered = f" at {phase.rate:g} checks/s" if phase.rate else ""
                alone = "" if phase.results else ", checks only"
                print(
                    f"bench_gateway: {config}, {workers} worker(s), {phase.client}, {phase.name}{offered}{alone} ...",
                    file=sys.stderr,
                    flush=True,
                )
                tag = f"{config}-{workers}-{i}"
                # one worker answers a scrape: with more, its histogram is that worker's alone
                buckets = check_buckets(base, token) if workers == 1 else None
                raw = pool.submit(drive, base, token, config, phase, args.duration_s, tag, proc.pid).result()
                server_p99 = server_check_p99_ms(buckets, check_buckets(base, token)) if buckets is not None else None
                named = {
                    "client": phase.client,
                    "phase": phase.name,
                    "offered_checks_per_s": phase.rate,
                    "results": phase.results,
                }
                phases.append({**named, **phase_figures(raw), "server_check_p99_ms_at_most": server_p99})
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


def client_names(ap: argparse.ArgumentParser, option: str, text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [n for n in names if n not in CLIENTS]
    if unknown or not names:
        ap.error(f"{option} takes clients among {', '.join(CLIENTS)}, but was {text!r}")
    return names


def fixed_counts(ap: argparse.ArgumentParser, text: str) -> list[tuple[int, int]]:
    """--fixed's "50x40,200x10": (sessions, checks each)."""
    pairs = []
    for item in (s.strip() for s in text.split(",")):
        sessions, _, checks = item.partition("x")
        if not (sessions.isdigit() and checks.isdigit() and int(sessions) > 0 and int(checks) > 0):
            ap.error(f"--fixed takes SESSIONSxCHECKS pairs such as 50x40,200x10, but was {item!r}")
        pairs.append((int(sessions), int(checks)))
    return pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default=",".join(CLIENTS), help=f"clients on the memory config (default {','.join(CLIENTS)})")
    ap.add_argument("--redis-clients", default="raw", help="clients on the Redis configs (default raw)")
    ap.add_argument("--fixed", default="50x40,200x10", help="closed phases of SESSIONSxCHECKS each (default 50x40,200x10)")
    ap.add_argument("--sessions", default="1,50,200", help="closed-loop sessions per phase (default 1,50,200)")
    ap.add_argument("--paced-sessions", default="50,200", help="paced sessions per phase (default 50,200)")
    ap.add_argument("--rates", default="250,1000", help="offered checks/s of the paced phases (default 250,1000)")
    ap.add_argument(
        "--check-only-rates", default="1000", help="offered checks/s of the paced phases without results (default 1000)"
    )
    ap.add_argument("--duration-s", type=float, default=8.0, help="seconds per phase but the fixed ones (default 8)")
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
    args.clients = client_names(ap, "--clients", args.clients)
    args.redis_clients = client_names(ap, "--redis-clients", args.redis_clients)
    args.fixed = fixed_counts(ap, args.fixed)
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
    print(
        f"{'config':<20} {'w':>2} {'client':<7} {'phase':<12} {'offered':>7} {'results':>7} {'checks':>6} {'answered':>8} "
        f"{'s':>5} {'checks/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'503':>4} {'failed':>6} "
        f"{'server cpu ms/req':>17} {'client':>6} {'server p99 <=':>13}"
    )
    for s in servers:
        for ph in s["phases"]:
            offered = "" if ph["offered_checks_per_s"] is None else f"{ph['offered_checks_per_s']:g}"
            print(
                f"{s['config']:<20} {s['workers']:>2} {ph['client']:<7} {ph['phase']:<12} {offered:>7} "
                f"{'yes' if ph['results'] else 'no':>7} {ph['checks']:>6} {ph['answered']:>8} {ph['elapsed_s']:>5.1f} "
                f"{ph['checks_per_s']:>8} {ph['check_p50_ms']!s:>7} {ph['check_p99_ms']!s:>7} {ph['check_max_ms']!s:>7} "
                f"{ph['busy_503']:>4} {ph['failed']:>6} {ph['server_cpu_ms_per_request']!s:>17} "
                f"{ph['client_cpu_ms_per_request']!s:>6} {ph['server_check_p99_ms_at_most']!s:>13}"
                f"{'  ' + ph['failures'] if ph['failures'] else ''}"
            )
    for e in engines:
        print(
            f"engine in process ({e['engine']}): {e['checks_per_s']} checks/s with results; check p50 {e['check_p50_ms']}"
            f" / p99 {e['check_p99_ms']} ms"
        )
    run.write({"servers": servers, "engines": engines}, args.out)


if __name__ == "__main__":
    main()
