"""What the agent-breaker flows cost inside NeMo Guardrails, and events/s over HTTP.

    python -m benchmarks.bench_nemo [--events 2000] [--http-events 600] [--out FILE]

1. Colang path: per-event wall time of the shipped `agent_breaker` config against a no-op
   config in the same runtime (a flow that matches the same event and sends a constant
   verdict, no action), one event per `process_events_async` step, one session.
2. HTTP: `agent-breaker serve` on a free loopback port; events/s through
   POST /v1/agent-breaker/events, one event per request, sequential and with 8 concurrent
   sessions.
Percentiles are nearest-rank. Every figure goes to --out as JSON (default
benchmarks/results/nemo.json), with the machine's facts. Reports figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks._harness import (
    Run,
    describe_machine,
    free_port,
    out_argument,
    percentile,
    serve,
    stop_process,
    version,
    wait_ready,
)

os.environ.setdefault("NEMO_GUARDRAILS_NO_USAGE_STATS", "1")
os.environ.setdefault("AGENT_BREAKER_RECEIPT_KEYS", "bench:" + secrets.token_hex(32))

_NOOP_MAIN = """import core

flow main
  start noop check tool calls
  wait indefinitely

flow noop check tool calls
  while True
    match ToolCallRequested() as $request
"""
_SEND = (
    '    send ToolCallVerdict(session_id=$request.arguments.get("session_id"), '
    'call_id=$request.arguments.get("call_id"), allowed={allowed}, heuristic=None)\n'
)
NOOP_FLOWS = _NOOP_MAIN + _SEND.format(allowed="True")
NOOP_ACTION_FLOWS = (
    _NOOP_MAIN + "    $verdict = await NoopCheckAction(event=$request)\n" + _SEND.format(allowed='$verdict["allowed"]')
)

NOOP_ACTION = """from nemoguardrails.actions import action


@action(name="noop_check")
async def noop_check(event=None):
    return {"allowed": True}
"""


def events(n: int) -> list[dict]:
    # distinct calls whose results change: legitimate work, nothing halts the session early
    return [
        {
            "type": "ToolCallRequested",
            "session_id": "bench",
            "call_id": f"c{i}",
            "tool_name": f"tool{i % 5}",
            "tool_args": {"q": f"query {i}", "limit": 10},
            "input_tokens": 900,
            "output_tokens": 60,
        }
        for i in range(n)
    ]


def per_event_ms(rails, evs) -> list[float]:
    async def run():
        state = None
        out, state = await rails.process_events_async([], state)
        times = []
        for ev in evs:
            t = time.perf_counter()
            out, state = await rails.process_events_async([ev], state)
            times.append((time.perf_counter() - t) * 1000)
            assert any(e["type"] == "ToolCallVerdict" for e in out)
        return times

    return asyncio.run(run())


def colang_path(n: int) -> dict[str, Any]:
    from agent_breaker.configs import config_path
    from nemoguardrails import LLMRails, RailsConfig

    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as tmp2:
        Path(tmp, "config.yml").write_text('colang_version: "2.x"\nmodels: []\n')
        Path(tmp, "main.co").write_text(NOOP_FLOWS)
        Path(tmp2, "config.yml").write_text('colang_version: "2.x"\nmodels: []\n')
        Path(tmp2, "main.co").write_text(NOOP_ACTION_FLOWS)
        Path(tmp2, "actions.py").write_text(NOOP_ACTION)
        noop = LLMRails(RailsConfig.from_path(tmp))
        noop_action = LLMRails(RailsConfig.from_path(tmp2))
        ours = LLMRails(RailsConfig.from_path(str(config_path("agent_breaker"))))
        evs = events(n)
        for rails in (noop, noop_action, ours):  # warm up
            per_event_ms(rails, evs[:100])
        rows = []
        for label, rails in (("no-op flow", noop), ("no-op action flow", noop_action), ("agent-breaker flows", ours)):
            t = per_event_ms(rails, evs)
            first, last = percentile(t[:200], 50), percentile(t[-200:], 50)
            rows.append((label, percentile(t, 50), percentile(t, 99), first, last))
    print(f"Colang path, {n} events in one session, one event per step (ms per event)")
    print(f"  {'config':22} {'p50':>7} {'p99':>7} {'first 200':>10} {'last 200':>9}")
    for label, p50, p99, first, last in rows:
        print(f"  {label:22} {p50:7.2f} {p99:7.2f} {first:10.2f} {last:9.2f}")
    ratio = rows[2][1] / rows[0][1]
    print(f"  ratio agent-breaker / no-op flow (p50): {ratio:.2f}  -> adds {100 * (ratio - 1):.0f}% to NeMo's own per-event cost")
    ratio_action = rows[2][1] / rows[1][1]
    print(
        f"  ratio agent-breaker / no-op action flow (p50): {ratio_action:.2f}  -> the guards themselves add "
        f"{100 * (ratio_action - 1):.0f}% over NeMo's cost of any flow that awaits an action"
    )
    return {
        "events": n,
        "ms_per_event": {
            label: {"p50": round(p50, 3), "p99": round(p99, 3), "first_200_p50": round(first, 3), "last_200_p50": round(last, 3)}
            for label, p50, p99, first, last in rows
        },
        "ratio_p50_vs_noop_flow": round(ratio, 3),
        "ratio_p50_vs_noop_action_flow": round(ratio_action, 3),
    }


def http_path(n: int) -> dict[str, Any]:
    import httpx

    port = free_port()
    token = secrets.token_urlsafe(24)
    headers = {"Authorization": f"Bearer {token}"}
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        proc = serve(port, token, log)
        try:
            wait_ready(proc, base, token, log)
            url = f"{base}/v1/agent-breaker/events"

            def session(sid: str, count: int) -> None:
                with httpx.Client(timeout=30, headers=headers) as client:
                    for ev in events(count):
                        r = client.post(url, json={"session_id": sid, "events": [ev]})
                        r.raise_for_status()

            session("warmup", 50)
            t = time.perf_counter()
            session("seq", n)
            seq = n / (time.perf_counter() - t)
            workers = 8
            t = time.perf_counter()
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(lambda i: session(f"par{i}", n // workers), range(workers)))
            par = (n // workers * workers) / (time.perf_counter() - t)
        finally:
            stop_process(proc)
    print("HTTP, POST /v1/agent-breaker/events, one event per request, loopback")
    print(f"  sequential, 1 session:      {seq:7.1f} events/s")
    print(f"  {workers} concurrent sessions:     {par:7.1f} events/s")
    return {
        "events": n,
        "sequential_events_per_s": round(seq, 1),
        "concurrent_sessions": workers,
        "concurrent_events_per_s": round(par, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--http-events", type=int, default=600)
    out_argument(ap, "nemo")
    args = ap.parse_args()
    run = Run("bench_nemo", args)
    print(f"{describe_machine(run.machine)} | nemoguardrails {version('nemoguardrails')}")
    figures = {
        "versions": {"nemoguardrails": version("nemoguardrails")},
        "colang": colang_path(args.events),
        "http": http_path(args.http_events),
    }
    run.write(figures, args.out)


if __name__ == "__main__":
    main()
