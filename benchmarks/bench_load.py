"""Load: do large or hostile requests block small ones, and does server memory stay bounded?

    python -m benchmarks.bench_load --clients 200 --duration-s 120
    python -m benchmarks.bench_load --clients 50 --duration-s 20 --baseline-s 10 --out /tmp/load.json

Starts `agent-breaker serve` (with an API token) on a free loopback port and runs two phases:

1. baseline (--baseline-s): the small clients only, no attackers;
2. mixed (--duration-s): the same small clients plus --hostile-share of --clients attackers.

A small client is a closed loop (no think time unless --think-ms) of legitimate requests to
POST /v1/agent-breaker/events, one event per request: a ToolCallRequested for `search` with
new args, then its ToolResultReceived, in one session per client (a new one every
CALLS_PER_SESSION calls, under the default step limit). Its verdicts are checked: a refused
call or result counts as `refused` (there should be none).

An attacker (back to back, or --attack-interval-ms apart) cycles through requests the server
must turn away, each with the status it must get: a body over the request limit with a
correct Content-Length (413), the same body chunked with no Content-Length (413), a body
nested DEEP_LEVELS deep (400), MANY_EVENTS events in one request (413), one event of about
1 MB, under the request limit but over the per-event one (413), a lone surrogate in the args
(400), no token (401); and a chat-completions request with a new random `model` each time
(200: one engine serves each config whatever the model, so
memory must not grow per model string).

Reported per phase: requests/s, p50/p95/p99/max latency of the small requests, their status
codes and refusals; per attack kind: count, status codes, p50/p99 of the rejection. The
server's RSS (/proc/<pid>/status VmRSS) is sampled every second: start, max, end, and the
slope over the second half of the run (MB/min), so a leak shows. Server and benchmark CPU
time are reported too: the clients run on the same machine as the server.

Reading the figures: a small client is a closed loop, so its latency is mostly queueing.
NeMo runs one `process_events_async` at a time per process (a module-level
asyncio.Semaphore(1) in nemoguardrails.rails.llm.llmrails), and its runtime awaits
asyncio.sleep(0.001) after each step, so every event holds that semaphore across several turns
of the event loop: the events endpoint serves about as many events/s however many clients
send them (p50 is about small clients / small requests per second), and any time the loop
spends on other requests, rejected ones included, lengthens each hold. Chat completions call
the runtime without that semaphore. --attacks runs a subset of the kinds, to tell their costs
apart.

One summary table; every figure goes to --out as JSON (default benchmarks/results/load.json), with
the machine's facts and the load average at start and end. Percentiles are nearest-rank.
Reports figures and flags what breaks the expectations; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from benchmarks._harness import (
    CALLS_PER_SESSION,
    MAX_EVENT_BYTES,
    MAX_EVENTS_PER_REQUEST,
    MAX_JSON_DEPTH,
    MAX_REQUEST_BYTES,
    REQUEST_TIMEOUT_S,
    Run,
    args_for,
    cpu_s,
    describe_machine,
    free_port,
    ms_percentile,
    out_argument,
    result_for,
    rss_bytes,
    save,
    serve,
    stop_process,
    tool_call,
    tool_result,
    wait_ready,
)

EVENTS_PATH = "/v1/agent-breaker/events"
CHAT_PATH = "/v1/chat/completions"
CONFIG_ID = "agent_breaker"

OVERSIZE_BYTES = 10 * 1024 * 1024  # a body ten times the request limit
CHUNK_BYTES = 64 * 1024  # chunk size of the chunked upload
DEEP_LEVELS = 900
MANY_EVENTS = 5_000
NEAR_LIMIT_MARGIN = 16 * 1024  # the ~1 MB event's request stays this far under the request limit

RSS_INTERVAL_S = 1.0
RSS_SERIES_EVERY_S = 10.0

# attack kind -> the status the server must answer
ATTACKS = {
    "oversize_declared": 413,
    "oversize_chunked": 413,
    "deep_nesting": 400,
    "many_events": 413,
    "near_limit_event": 413,
    "lone_surrogate": 400,
    "no_token": 401,
    "chat_random_model": 200,
}
JSON_HEADERS = {"content-type": "application/json"}
PLACEHOLDER = "<placeholder>"


# ----------------------------------------------------------------------------- figures


def outcome(response: httpx.Response | None, exc: BaseException | None) -> str:
    """A status code, or what went wrong instead."""
    if response is not None:
        return str(response.status_code)
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    return f"error:{type(exc).__name__}"


@dataclass
class Phase:
    name: str
    small_latencies: list[float] = field(default_factory=list)
    small_status: Counter = field(default_factory=Counter)
    small_refused: Counter = field(default_factory=Counter)  # heuristic -> count
    attack_latencies: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in ATTACKS})
    attack_status: dict[str, Counter] = field(default_factory=lambda: {k: Counter() for k in ATTACKS})
    chat_refused: int = 0
    elapsed: float = 0.0
    server_cpu_s: float = 0.0
    bench_cpu_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        small = len(self.small_latencies)
        hostile = sum(len(v) for v in self.attack_latencies.values())
        statuses = Counter(self.small_status)
        for counter in self.attack_status.values():
            statuses.update(counter)
        attacks = {}
        for kind, expected in ATTACKS.items():
            seen = self.attack_status[kind]
            if not seen:
                continue
            attacks[kind] = {
                "count": sum(seen.values()),
                "expected": expected,
                "statuses": dict(seen),
                "unexpected": sum(n for s, n in seen.items() if s != str(expected)),
                "p50_ms": ms_percentile(self.attack_latencies[kind], 50),
                "p99_ms": ms_percentile(self.attack_latencies[kind], 99),
            }
        return {
            "phase": self.name,
            "seconds": round(self.elapsed, 1),
            "requests": small + hostile,
            "requests_per_s": round((small + hostile) / self.elapsed, 1) if self.elapsed else None,
            "small_requests": small,
            "small_per_s": round(small / self.elapsed, 1) if self.elapsed else None,
            "small_p50_ms": ms_percentile(self.small_latencies, 50),
            "small_p95_ms": ms_percentile(self.small_latencies, 95),
            "small_p99_ms": ms_percentile(self.small_latencies, 99),
            "small_max_ms": ms_percentile(self.small_latencies, 100),
            "small_statuses": dict(self.small_status),
            "small_refused": sum(self.small_refused.values()),
            "small_refused_by": dict(self.small_refused),
            "server_5xx": sum(n for s, n in statuses.items() if s.startswith("5")),
            "errors_by_status": {s: n for s, n in statuses.items() if s not in ("200",) and not s.startswith("4")},
            "attacks": attacks,
            "hostile_accepted": sum(
                n for k, a in attacks.items() if ATTACKS[k] != 200 for s, n in a["statuses"].items() if s.startswith("2")
            ),
            "chat_refused_verdicts": self.chat_refused,
            "server_cpu_pct": round(100 * self.server_cpu_s / self.elapsed) if self.elapsed else None,
            "bench_cpu_pct": round(100 * self.bench_cpu_s / self.elapsed) if self.elapsed else None,
        }


# ----------------------------------------------------------------------------- the server


def rss_mb(pid: int) -> float | None:
    """The process's RSS in MB, None when it is gone."""
    rss = rss_bytes([pid])
    return rss / 1024 / 1024 if rss else None


class RssSampler(threading.Thread):
    """The server's RSS every RSS_INTERVAL_S, as (seconds since start, MB)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, float]] = []
        self.t0 = time.monotonic()
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            mb = rss_mb(self.pid)
            if mb is not None:
                self.samples.append((time.monotonic() - self.t0, mb))
            self._halt.wait(RSS_INTERVAL_S)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def slope_mb_per_min(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of RSS over time."""
    if len(samples) < 2:
        return None
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mm = sum(m for _, m in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    if var == 0:
        return None
    return sum((t - mt) * (m - mm) for t, m in samples) / var * 60


def memory_figures(
    samples: list[tuple[float, float]], load_start: float, phases: list[tuple[str, float, float]]
) -> dict[str, Any]:
    load = [s for s in samples if s[0] >= load_start]
    half = load_start + (load[-1][0] - load_start) / 2 if load else load_start
    out: dict[str, Any] = {
        "rss_start_mb": round(load[0][1], 1) if load else None,
        "rss_max_mb": round(max(m for _, m in load), 1) if load else None,
        "rss_end_mb": round(load[-1][1], 1) if load else None,
        "slope_second_half_mb_per_min": _round(slope_mb_per_min([s for s in load if s[0] >= half])),
        "samples": len(load),
        # the curve, for the eye: one sample every RSS_SERIES_EVERY_S
        "rss_series_mb": [round(m, 1) for t, m in load[:: max(1, round(RSS_SERIES_EVERY_S / RSS_INTERVAL_S))]],
    }
    for name, start, end in phases:
        window = [m for t, m in samples if start <= t <= end]
        if window:
            out[name] = {"start_mb": round(window[0], 1), "max_mb": round(max(window), 1), "end_mb": round(window[-1], 1)}
    return out


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


# ----------------------------------------------------------------------------- request bodies


def events_body(session: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    return {"config_id": CONFIG_ID, "session_id": session, "events": events}


@dataclass(frozen=True)
class HostileBodies:
    """The large bodies, built once (the clients share the machine with the server)."""

    oversize: bytes
    deep: bytes
    many_events: bytes
    near_limit: bytes

    @classmethod
    def build(cls) -> HostileBodies:
        # one event whose args hold PLACEHOLDER, replaced by a long string or a deep array
        template = json.dumps(events_body("hostile", [tool_call(0, {"q": PLACEHOLDER})]))

        def with_q(value: str) -> bytes:
            return template.replace(json.dumps(PLACEHOLDER), value).encode()

        def sized(total: int, letter: str) -> bytes:
            return with_q('"' + letter * (total - len(with_q('""'))) + '"')

        many = [tool_call(i, {"q": f"query {i}"}) for i in range(MANY_EVENTS)]
        return cls(
            oversize=sized(OVERSIZE_BYTES, "x"),
            deep=with_q("[" * DEEP_LEVELS + "]" * DEEP_LEVELS),
            many_events=json.dumps(events_body("hostile-many", many)).encode(),
            near_limit=sized(MAX_REQUEST_BYTES - NEAR_LIMIT_MARGIN, "y"),
        )


def lone_surrogate_body(session: str) -> bytes:
    # the raw JSON escape \ud800 (a lone high surrogate), which json.dumps would never write
    return (
        '{"config_id": "agent_breaker", "session_id": "' + session + '", "events": [{"type": "ToolCallRequested", '
        '"call_id": "c1", "tool_name": "search", "tool_args": {"q": "abc\\ud800def"}}]}'
    ).encode()


async def chunks(body: bytes) -> AsyncIterator[bytes]:
    for i in range(0, len(body), CHUNK_BYTES):
        yield body[i : i + CHUNK_BYTES]


# ----------------------------------------------------------------------------- clients


def refusal(response: httpx.Response, verdict_type: str, flag: str) -> str | None:
    """None when the verdict let the event through; else why not."""
    try:
        verdicts = [v for v in response.json()["events"] if v.get("type") == verdict_type]
    except (ValueError, KeyError, TypeError):
        return "unreadable_reply"
    if not verdicts:
        return "no_verdict"
    if verdicts[-1].get(flag) is True:
        return None
    return str(verdicts[-1].get("heuristic"))


async def small_client(base: str, token: str, name: str, deadline: float, phase: Phase, think_s: float) -> None:
    """Legitimate traffic: a call, then its result, one event per request."""
    rng = random.Random(name)
    async with httpx.AsyncClient(
        base_url=base, headers={"authorization": f"Bearer {token}"}, timeout=REQUEST_TIMEOUT_S
    ) as client:

        async def send(session: str, event: dict[str, Any], verdict_type: str, flag: str) -> bool:
            response = exc = None
            t = time.perf_counter()
            try:
                response = await client.post(EVENTS_PATH, json=events_body(session, [event]))
            except httpx.HTTPError as e:
                exc = e
            phase.small_latencies.append(time.perf_counter() - t)
            phase.small_status[outcome(response, exc)] += 1
            if response is None or response.status_code != 200:
                return False
            why = refusal(response, verdict_type, flag)
            if why is not None:
                phase.small_refused[why] += 1
            return why is None

        n = 0
        await pause(rng, think_s)  # the clients start spread out, not in one burst
        while time.monotonic() < deadline:
            n += 1
            session = f"{name}-s{n // CALLS_PER_SESSION}"
            allowed = await send(session, tool_call(n, args_for(rng, n)), "ToolCallVerdict", "allowed")
            await pause(rng, think_s)
            if allowed and time.monotonic() < deadline:
                # a refused call gets no result (the guard records results only for calls it allowed)
                await send(session, tool_result(n, result_for(rng, n)), "ToolResultVerdict", "accepted")
                await pause(rng, think_s)


async def pause(rng: random.Random, mean_s: float) -> None:
    """A pause of 0.5-1.5 times the mean, so clients do not fall into step."""
    if mean_s:
        await asyncio.sleep(mean_s * rng.uniform(0.5, 1.5))


async def attacker(
    base: str,
    token: str,
    name: str,
    start: int,
    deadline: float,
    phase: Phase,
    bodies: HostileBodies,
    kinds: list[str],
    interval_s: float,
) -> None:
    """Cycles through `kinds` from `start`, back to back (or `interval_s` apart on average)."""
    rng = random.Random(name)
    async with httpx.AsyncClient(
        base_url=base, headers={"authorization": f"Bearer {token}"}, timeout=REQUEST_TIMEOUT_S
    ) as client:
        n = start
        while time.monotonic() < deadline:
            kind = kinds[n % len(kinds)]
            n += 1
            session = f"{name}-s{n // CALLS_PER_SESSION}"
            response = exc = None
            t = time.perf_counter()
            try:
                response = await attack(client, kind, n, session, bodies, rng)
            except httpx.HTTPError as e:
                exc = e
            phase.attack_latencies[kind].append(time.perf_counter() - t)
            phase.attack_status[kind][outcome(response, exc)] += 1
            await pause(rng, interval_s)
            if kind == "chat_random_model" and response is not None and response.status_code == 200:
                try:
                    verdicts = json.loads(response.json()["choices"][0]["message"]["content"])["events"]
                    if not all(v.get("allowed", v.get("accepted")) is True for v in verdicts) or len(verdicts) != 2:
                        phase.chat_refused += 1
                except (ValueError, KeyError, IndexError, TypeError):
                    phase.chat_refused += 1


async def attack(
    client: httpx.AsyncClient, kind: str, n: int, session: str, bodies: HostileBodies, rng: random.Random
) -> httpx.Response:
    if kind == "oversize_declared":
        return await client.post(EVENTS_PATH, content=bodies.oversize, headers=JSON_HEADERS)
    if kind == "oversize_chunked":
        return await client.post(EVENTS_PATH, content=chunks(bodies.oversize), headers=JSON_HEADERS)
    if kind == "deep_nesting":
        return await client.post(EVENTS_PATH, content=bodies.deep, headers=JSON_HEADERS)
    if kind == "many_events":
        return await client.post(EVENTS_PATH, content=bodies.many_events, headers=JSON_HEADERS)
    if kind == "near_limit_event":
        return await client.post(EVENTS_PATH, content=bodies.near_limit, headers=JSON_HEADERS)
    if kind == "lone_surrogate":
        return await client.post(EVENTS_PATH, content=lone_surrogate_body(session), headers=JSON_HEADERS)
    if kind == "no_token":
        request = client.build_request("POST", EVENTS_PATH, json=events_body(session, [tool_call(n, args_for(rng, n))]))
        del request.headers["authorization"]
        return await client.send(request)
    if kind == "chat_random_model":
        evs = [
            {**tool_call(n, args_for(rng, n)), "session_id": session},
            {**tool_result(n, result_for(rng, n)), "session_id": session},
        ]
        body = {
            "model": f"m{secrets.token_hex(8)}",
            "guardrails": {"config_id": CONFIG_ID},
            "messages": [{"role": "context", "content": {"agent_breaker_events": evs}}],
        }
        return await client.post(CHAT_PATH, json=body)
    raise ValueError(kind)


async def run_phase(
    phase: Phase,
    seconds: float,
    base: str,
    token: str,
    small: int,
    hostile: int,
    bodies: HostileBodies,
    kinds: list[str],
    think_s: float,
    interval_s: float,
    pid: int,
) -> None:
    deadline = time.monotonic() + seconds
    cpu0, bench0 = cpu_s(pid), sum(os.times()[:2])
    t0 = time.monotonic()
    tasks = [small_client(base, token, f"{phase.name}-small-{i}", deadline, phase, think_s) for i in range(small)]
    tasks += [
        attacker(base, token, f"{phase.name}-hostile-{i}", i, deadline, phase, bodies, kinds, interval_s) for i in range(hostile)
    ]
    await asyncio.gather(*tasks)
    phase.elapsed = time.monotonic() - t0
    phase.server_cpu_s = cpu_s(pid) - cpu0
    phase.bench_cpu_s = sum(os.times()[:2]) - bench0


# ----------------------------------------------------------------------------- report


def fmt(value: Any) -> str:
    return "-" if value is None else str(value)


def print_table(result: dict[str, Any]) -> None:
    cfg, machine = result["setup"], result["machine"]
    print(
        f"\nLoad: {cfg['clients']} clients ({cfg['small_clients']} small, {cfg['hostile_clients']} hostile), "
        f"baseline {cfg['baseline_s']:g}s + mixed {cfg['duration_s']:g}s, think {cfg['think_ms']:g} ms, "
        f"attack interval {cfg['attack_interval_ms']:g} ms, "
        f"{len(cfg['attacks'])} attack kinds | "
        f"python {machine['python']} | cpus {machine['cpu_count']} | load avg {machine['load_average_at_start'][0]} before, "
        f"{machine['load_average_at_end'][0]} after | {machine['date_utc']}"
    )
    print(
        f"  {'phase':9} {'req/s':>7} {'small/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8} "
        f"{'refused':>8} {'5xx':>4} {'srv cpu':>8} {'bench cpu':>9}  small statuses / errors"
    )
    for p in result["phases"]:
        print(
            f"  {p['phase']:9} {fmt(p['requests_per_s']):>7} {fmt(p['small_per_s']):>8} {fmt(p['small_p50_ms']):>8} "
            f"{fmt(p['small_p95_ms']):>8} {fmt(p['small_p99_ms']):>8} {fmt(p['small_max_ms']):>8} "
            f"{p['small_refused']:>8} {p['server_5xx']:>4} {fmt(p['server_cpu_pct']):>7}% {fmt(p['bench_cpu_pct']):>8}%  "
            f"{p['small_statuses']} {p['errors_by_status'] or ''}"
        )
    mixed = result["phases"][-1]
    if mixed["attacks"]:
        print(
            f"\n  attacks ({mixed['phase']} phase)  {'count':>6} {'expect':>6} {'p50 ms':>8} {'p99 ms':>8} {'wrong':>6}  statuses"
        )
        for kind, a in mixed["attacks"].items():
            print(
                f"  {kind:22} {a['count']:>6} {a['expected']:>6} {fmt(a['p50_ms']):>8} {fmt(a['p99_ms']):>8} "
                f"{a['unexpected']:>6}  {a['statuses']}"
            )
        print(f"  chat verdicts refused: {mixed['chat_refused_verdicts']}")
    m = result["memory"]
    print(
        f"\n  server RSS: start {fmt(m['rss_start_mb'])} MB, max {fmt(m['rss_max_mb'])} MB, end {fmt(m['rss_end_mb'])} MB; "
        f"slope over the second half {fmt(m['slope_second_half_mb_per_min'])} MB/min ({m['samples']} samples)"
    )
    print(f"    every {RSS_SERIES_EVERY_S:g}s: {' '.join(str(v) for v in m['rss_series_mb'])}")
    for name in ("baseline", "mixed"):
        if name in m:
            print(f"    {name:9} start {m[name]['start_mb']} MB, max {m[name]['max_mb']} MB, end {m[name]['end_mb']} MB")
    print("\n  findings:")
    for line in result["findings"] or ["no 5xx, every hostile request answered as expected, no small request refused"]:
        print(f"    - {line}")


def findings(phases: list[dict[str, Any]], server_exit: int | None) -> list[str]:
    out = []
    for p in phases:
        if p["server_5xx"]:
            out.append(f"{p['phase']}: {p['server_5xx']} answers with a 5xx status")
        if p["small_refused"]:
            out.append(f"{p['phase']}: {p['small_refused']} small requests refused {p['small_refused_by']}")
        if p["errors_by_status"]:
            out.append(f"{p['phase']}: small or hostile requests without a 2xx/4xx answer {p['errors_by_status']}")
        for kind, a in p["attacks"].items():
            if a["unexpected"]:
                wrong = {s: n for s, n in a["statuses"].items() if s != str(a["expected"])}
                out.append(f"{p['phase']}: {kind}: {a['unexpected']} of {a['count']} not answered {a['expected']}: {wrong}")
        if p["chat_refused_verdicts"]:
            out.append(f"{p['phase']}: {p['chat_refused_verdicts']} chat-completions requests with a refused verdict")
    if len(phases) == 2 and phases[0]["small_p99_ms"] and phases[1]["small_p99_ms"]:
        base, mixed = phases
        out.append(
            f"small requests, mixed / baseline: p99 {mixed['small_p99_ms'] / base['small_p99_ms']:.2f}x, "
            f"p50 {mixed['small_p50_ms'] / base['small_p50_ms']:.2f}x, "
            f"throughput {mixed['small_per_s'] / base['small_per_s']:.2f}x"
        )
    if server_exit is not None:
        out.append(f"the server exited during the run (status {server_exit})")
    return out


async def load(args: argparse.Namespace) -> dict[str, Any]:
    hostile = round(args.clients * args.hostile_share)
    small = args.clients - hostile
    bodies = HostileBodies.build()
    token = secrets.token_urlsafe(32)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        proc = serve(port, token, log)
        sampler = None
        try:
            wait_ready(proc, base, token, log)  # nothing else runs yet: blocking is fine
            sampler = RssSampler(proc.pid)
            sampler.start()
            phases = []
            windows = []
            plan = [("baseline", args.baseline_s, 0), ("mixed", args.duration_s, hostile)]
            load_start = time.monotonic() - sampler.t0
            for name, seconds, attackers in plan:
                if seconds <= 0:
                    continue
                phase = Phase(name)
                start = time.monotonic() - sampler.t0
                print(
                    f"bench_load: {name}: {small} small + {attackers} hostile clients for {seconds:g}s ...",
                    file=sys.stderr,
                    flush=True,
                )
                await run_phase(
                    phase,
                    seconds,
                    base,
                    token,
                    small,
                    attackers,
                    bodies,
                    args.attacks,
                    args.think_ms / 1000,
                    args.attack_interval_ms / 1000,
                    proc.pid,
                )
                windows.append((name, start, time.monotonic() - sampler.t0))
                phases.append(phase.summary())
            sampler.stop()
            server_exit = proc.poll()
        finally:
            if sampler is not None and sampler.is_alive():
                sampler.stop()
            stop_process(proc)
    return {
        "setup": {
            "clients": args.clients,
            "small_clients": small,
            "hostile_clients": hostile,
            "hostile_share": args.hostile_share,
            "baseline_s": args.baseline_s,
            "duration_s": args.duration_s,
            "think_ms": args.think_ms,
            "attack_interval_ms": args.attack_interval_ms,
            "attacks": args.attacks,
            "limits": {
                "max_request_bytes": MAX_REQUEST_BYTES,
                "max_event_bytes": MAX_EVENT_BYTES,
                "max_events_per_request": MAX_EVENTS_PER_REQUEST,
                "max_json_depth": MAX_JSON_DEPTH,
            },
        },
        "phases": phases,
        "memory": memory_figures(sampler.samples, load_start, windows),
        "findings": findings(phases, server_exit),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=200, help="concurrent clients in the mixed phase (default 200)")
    ap.add_argument("--duration-s", type=float, default=120.0, help="length of the mixed phase (default 120)")
    ap.add_argument("--baseline-s", type=float, default=20.0, help="length of the small-only phase first (default 20; 0: none)")
    ap.add_argument("--hostile-share", type=float, default=0.1, help="share of the clients that attack (default 0.1)")
    ap.add_argument(
        "--think-ms",
        type=float,
        default=0.0,
        help="mean pause of a small client after each request, 0.5-1.5x at random (default 0)",
    )
    ap.add_argument(
        "--attack-interval-ms",
        type=float,
        default=0.0,
        help="mean pause of an attacker between requests, 0.5-1.5x at random (default 0: back to back)",
    )
    ap.add_argument(
        "--attacks",
        default=",".join(ATTACKS),
        help=f"comma-separated attack kinds the attackers cycle through (default all: {','.join(ATTACKS)})",
    )
    out_argument(ap, "load")
    args = ap.parse_args()
    if not 0 <= args.hostile_share <= 1 or args.clients < 1:
        ap.error("--clients must be at least 1 and --hostile-share between 0 and 1")
    args.attacks = [k.strip() for k in args.attacks.split(",") if k.strip()]
    if not args.attacks or not set(args.attacks) <= set(ATTACKS):
        ap.error(f"--attacks takes kinds among {', '.join(ATTACKS)}")
    # SIGTERM stops the run like Ctrl-C: the server is stopped on the way out
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    run = Run("bench_load", args)
    print(describe_machine(run.machine), file=sys.stderr, flush=True)
    try:
        result = asyncio.run(load(args))
    except KeyboardInterrupt:
        print("bench_load: interrupted; the server was stopped", file=sys.stderr)
        sys.exit(130)
    doc = run.document(result)
    print_table(doc)
    save(doc, args.out)


if __name__ == "__main__":
    main()
