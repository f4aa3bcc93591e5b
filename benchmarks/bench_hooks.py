"""Coding agents' hooks: what one `agent-breaker hook` call costs in wall time, and the hook
endpoints of `agent-breaker serve` under load.

    python -m benchmarks.bench_hooks [--calls 40] [--sessions 50] [--rates 100,250] [--duration-s 10] [--out FILE]

1. The command: --calls Claude Code tool calls (PreToolUse, then its PostToolUse), each a process
   of its own as the agent runs it (the command `hooks print-config claude-code` prints, through
   `sh -c`; its state in a SQLite file of the run's own), one after the other: p50 / p99 / max of
   the wall time, from spawning the shell to its exit, for the check and for the result; once with the per-user
   daemon (a fresh one: the first call, which starts it, is reported apart) and once with
   --no-daemon (every call imports and builds the engine).
2. The endpoint: a server on the coding_agent config (state in memory, one worker, a free
   loopback port, stopped by PID) and --sessions Claude Code sessions, each sending PreToolUse then PostToolUse to
   `/v1/hooks/claude-code` at random times (Poisson), together at each of --rates calls/s, timed
   from when each call was due (as bench_gateway's paced phases): p50 / p99 / max of the
   PreToolUse answer, denials, failed requests, the server's CPU per request.
The client shares the machine's cores with the server. Percentiles are nearest-rank. Reports
figures; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
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

from benchmarks._harness import (
    WORDS,
    RawConnection,
    Run,
    free_port,
    ms_percentile,
    out_argument,
    serve,
    stop_process,
    wait_ready,
)
from benchmarks.bench_gateway import server_cpu_s

ROOT = Path(__file__).resolve().parents[1]
HOOK_PATH = "/v1/hooks/claude-code"  # the server runs the coding_agent config, the endpoints' default
CALLS_PER_SESSION = 200


def pre(session: str, n: int) -> dict[str, Any]:
    """A Claude Code PreToolUse of a new command (legitimate work: nothing trips)."""
    rng = random.Random(f"{session}-{n}")
    return {
        "session_id": session,
        "transcript_path": "/home/dev/.claude/projects/p/t.jsonl",
        "cwd": "/home/dev/repo",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": f"pytest tests/test_{rng.choice(WORDS)}_{rng.choice(WORDS)}.py -q -k {rng.choice(WORDS)}"},
        "tool_use_id": f"toolu_{n:06d}",
    }


def post(session: str, n: int) -> dict[str, Any]:
    rng = random.Random(f"out-{session}-{n}")
    output = f"FAILED test_{rng.choice(WORDS)} - AssertionError: {rng.choice(WORDS)} != {rng.choice(WORDS)}"
    return {
        **pre(session, n),
        "hook_event_name": "PostToolUse",
        "tool_response": {"stdout": output, "stderr": "", "interrupted": False},
    }


def printed_command(fail: str = "closed") -> str:
    """The PreToolUse command `agent-breaker hooks print-config claude-code` prints: this
    install's `agent-breaker` script by absolute path, as the agent runs it."""
    out = subprocess.run(
        [sys.executable, "-m", "agent_breaker", "hooks", "print-config", "claude-code", "--fail", fail],
        capture_output=True,
        check=True,
        text=True,
    )
    return str(json.loads(out.stdout)["hooks"]["PreToolUse"][0]["hooks"][0]["command"])


def run_command(calls: int, daemon: bool) -> dict[str, Any]:
    """--calls tool calls through the command `print-config` prints, each a process of its own
    started through `sh -c` as the agents start a hook command; with the daemon, the first call
    (which finds none, decides alone and starts it) is reported apart as the cold one."""
    state = f"sqlite:///{tempfile.mkdtemp(prefix='bench-hooks-')}/hooks.db"
    runtime = tempfile.mkdtemp(prefix="ab-")  # a daemon of the run's own, stopped at its end
    env = {**os.environ, "NEMO_GUARDRAILS_NO_USAGE_STATS": "1", "XDG_RUNTIME_DIR": runtime, "AGENT_BREAKER_HOOK_STATE": state}
    command = printed_command() + ("" if daemon else " --no-daemon")
    walls: dict[str, list[float]] = {"check": [], "result": []}
    codes: Counter = Counter()
    cold = None
    try:
        for n in range(calls + daemon):
            for kind, payload in (("check", pre("bench", n)), ("result", post("bench", n))):
                t = time.perf_counter()
                proc = subprocess.run(
                    ["sh", "-c", command], input=json.dumps(payload).encode(), capture_output=True, env=env, timeout=60
                )
                wall = time.perf_counter() - t
                codes[f"{kind} exit {proc.returncode}"] += 1
                if daemon and n == 0:
                    cold = cold if cold is not None else wall
                    if kind == "check":  # let the daemon it started come up before the timed calls
                        wait_for_daemon(Path(runtime))
                    continue
                walls[kind].append(wall)
    finally:
        for lock in Path(runtime).glob("agent-breaker/hookd-*.lock"):
            with contextlib.suppress(ValueError, ProcessLookupError):
                os.kill(int(lock.read_text()), signal.SIGTERM)
    return {
        "mode": "daemon" if daemon else "in process (--no-daemon)",
        "command": command,
        "calls": calls,
        "cold_first_call_ms": round(1000 * cold, 1) if cold is not None else None,
        **{
            f"{kind}_{q}_ms": ms_percentile(walls[kind], p) for kind in walls for q, p in (("p50", 50), ("p99", 99), ("max", 100))
        },
        "exits": ", ".join(f"{k}: {v}" for k, v in sorted(codes.items())),
    }


def wait_for_daemon(runtime: Path, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not list(runtime.glob("agent-breaker/hookd-*.sock")):
        time.sleep(0.05)


async def session_client(conn: RawConnection, name: str, deadline: float, mean_gap_s: float, out: dict[str, Any]) -> None:
    rng = random.Random(name)
    due = time.perf_counter() + rng.expovariate(1 / mean_gap_s)
    n = 0
    try:
        while time.perf_counter() < deadline:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            n += 1
            session = f"{name}-s{n // CALLS_PER_SESSION}"
            try:
                status, body = await conn.post(HOOK_PATH, pre(session, n))
                out["check"].append(time.perf_counter() - due)
                out["counts"][f"check {status}"] += 1
                denied = isinstance(body, dict) and (body.get("hookSpecificOutput") or {}).get("permissionDecision") == "deny"
                out["counts"]["denied"] += denied
                status, _ = await conn.post(HOOK_PATH, post(session, n))
                out["counts"][f"result {status}"] += 1
            except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                out["counts"][f"error {type(exc).__name__}"] += 1
            due += rng.expovariate(1 / mean_gap_s)
    finally:
        await conn.close()


async def drive_async(base: str, token: str, sessions: int, seconds: float, rate: float, tag: str) -> dict[str, Any]:
    out: dict[str, Any] = {"check": [], "counts": Counter()}
    conns = [RawConnection(base, token) for _ in range(sessions)]
    await asyncio.gather(*(c.open() for c in conns))
    t0 = time.perf_counter()
    await asyncio.gather(*(session_client(c, f"{tag}-{i}", t0 + seconds, sessions / rate, out) for i, c in enumerate(conns)))
    return {"check": out["check"], "counts": dict(out["counts"]), "elapsed": time.perf_counter() - t0}


def drive(base: str, token: str, sessions: int, seconds: float, rate: float, tag: str) -> dict[str, Any]:
    return asyncio.run(drive_async(base, token, sessions, seconds, rate, tag))


def run_endpoint(args: argparse.Namespace) -> list[dict[str, Any]]:
    token = secrets.token_urlsafe(32)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {"AGENT_BREAKER_ESCALATIONS_DB": os.path.join(tempfile.mkdtemp(prefix="bench-hooks-"), "escalations.db")}
    phases = []
    with tempfile.TemporaryFile() as log, concurrent.futures.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        proc = serve(port, token, log, "--config", str(ROOT / "config" / "coding_agent"), env=env)
        try:
            wait_ready(proc, base, token, log)
            pool.submit(drive, base, token, 1, args.duration_s / 5, 10.0, "warm").result()
            for rate in args.rates:
                print(f"bench_hooks: {args.sessions} sessions at {rate:g} calls/s ...", file=sys.stderr, flush=True)
                before = server_cpu_s(proc.pid)
                raw = pool.submit(drive, base, token, args.sessions, args.duration_s, rate, f"r{rate:g}").result()
                cpu = server_cpu_s(proc.pid) - before
                counts = raw["counts"]
                requests = sum(v for k, v in counts.items() if k.startswith(("check ", "result ")))
                phases.append(
                    {
                        "phase": f"paced {args.sessions} at {rate:g}/s",
                        "calls_per_s": round(counts.get("check 200", 0) / raw["elapsed"], 1),
                        "pre_p50_ms": ms_percentile(raw["check"], 50),
                        "pre_p99_ms": ms_percentile(raw["check"], 99),
                        "pre_max_ms": ms_percentile(raw["check"], 100),
                        "denied": counts.get("denied", 0),
                        "failed": sum(
                            v for k, v in counts.items() if k.startswith("error") or (k[-3:].isdigit() and k[-3:] != "200")
                        ),
                        "server_cpu_ms_per_request": round(1000 * cpu / requests, 3) if requests else None,
                    }
                )
        finally:
            stop_process(proc)
    return phases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=40, help="tool calls through the command, each check and result (default 40)")
    ap.add_argument("--sessions", type=int, default=50, help="concurrent sessions on the endpoint (default 50)")
    ap.add_argument("--rates", default="100,250", help="calls/s offered to the endpoint (default 100,250)")
    ap.add_argument("--duration-s", type=float, default=10.0, help="seconds per endpoint phase (default 10)")
    out_argument(ap, "hooks")
    args = ap.parse_args()
    args.rates = [float(r) for r in args.rates.split(",") if r.strip()]
    run = Run("bench_hooks", args)
    command = [run_command(args.calls, daemon=True), run_command(args.calls, daemon=False)]
    endpoint = run_endpoint(args)
    for c in command:
        print(
            f"agent-breaker hook, {c['mode']} (one process a call): check p50 {c['check_p50_ms']} / p99 {c['check_p99_ms']} ms, "
            f"result p50 {c['result_p50_ms']} ms, first call {c['cold_first_call_ms']} ms; {c['exits']}"
        )
    for ph in endpoint:
        print(
            f"{ph['phase']}: {ph['calls_per_s']} calls/s, PreToolUse p50 {ph['pre_p50_ms']} / p99 {ph['pre_p99_ms']} / "
            f"max {ph['pre_max_ms']} ms, {ph['denied']} denied, {ph['failed']} failed, "
            f"server {ph['server_cpu_ms_per_request']} ms CPU a request"
        )
    run.write({"hook_command": command, "endpoint": endpoint}, args.out)


if __name__ == "__main__":
    main()
