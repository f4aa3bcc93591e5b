"""The benchmarks' harness: its one percentile definition (nearest rank), its clients, the results
file every benchmark writes through it, and the performance page rendered from those files."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import math
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str) -> ModuleType:
    """A module of benchmarks/ by its path: `pytest` (unlike `python -m pytest`) does not put the
    repository root on sys.path, and neither module imports anything else from benchmarks/."""
    spec = importlib.util.spec_from_file_location(f"bench_harness_test_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


harness = _load("_harness")
render_performance = _load("render_performance")
RESERVED_KEYS, Run = harness.RESERVED_KEYS, harness.Run
ms_percentile, percentile, percentiles = harness.ms_percentile, harness.percentile, harness.percentiles


def test_percentile_is_the_value_of_rank_ceil_p_n():
    values = list(range(1, 11))  # 1..10
    assert percentile(values, 50) == 5  # rank ceil(5) = 5
    assert percentile(values, 90) == 9
    assert percentile(values, 91) == 10  # rank ceil(9.1) = 10
    assert percentile(values, 99) == 10
    assert percentile(values, 100) == 10
    assert percentile(values, 0) == 1  # rank at least 1


def test_percentile_never_interpolates():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0  # the lower middle value, not 2.5
    assert percentile([7.0], 99.9) == 7.0


def test_percentile_sorts_its_input():
    assert percentile([9, 1, 5, 3, 7], 50) == 5
    assert percentiles([9, 1, 5, 3, 7], (0, 50, 100)) == [1, 5, 9]


def test_percentile_ranks_are_exact_for_decimal_percentages():
    # 0.07 * 100 is 7.000000000000001 in floats: a float ceiling would give rank 8
    values = list(range(1, 101))
    assert percentile(values, 7) == 7
    assert percentile(values, 29) == 29
    assert percentile(list(range(1, 1001)), 99.9) == 999


def test_percentile_refuses_no_values_and_bad_percentages():
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="between 0 and 100, but was 101"):
        percentile([1], 101)


def test_ms_percentile_is_in_ms_to_a_tenth_and_none_for_no_values():
    assert ms_percentile([0.0101, 0.0202, 0.0303], 50) == 20.2
    assert ms_percentile([], 99) is None


def test_run_writes_figures_with_machine_facts_settings_and_load(tmp_path: Path):
    args = argparse.Namespace(events=10, url="redis://user:secret@host:6379/0", trace=Path("/elsewhere/t.jsonl"), out=None)
    run = Run("bench_example", args, argv=["--events", "10"])
    out = tmp_path / "results" / "example.json"
    run.write({"latency_us": {"p50": 1.5, "p99": math.nan}, "rows": [{"name": "a", "n": 1}]}, out)

    doc = json.loads(out.read_text(encoding="utf-8"))
    assert list(doc)[: len(RESERVED_KEYS)] == list(RESERVED_KEYS)
    assert doc["benchmark"] == "bench_example"
    assert doc["command"] == "python -m benchmarks.bench_example --events 10"
    machine = doc["machine"]
    for key in ("platform", "cpu_count", "python", "agent_breaker_version", "git_commit", "date_utc"):
        assert key in machine
    assert len(machine["load_average_at_start"]) == 3
    assert len(machine["load_average_at_end"]) == 3
    assert doc["settings"] == {"events": 10, "url": "redis://user:***@host:6379/0", "trace": "/elsewhere/t.jsonl"}
    assert doc["latency_us"] == {"p50": 1.5, "p99": None}  # JSON has no NaN
    assert doc["rows"] == [{"name": "a", "n": 1}]
    assert not list(out.parent.glob(".*.tmp"))


def test_run_refuses_figures_named_like_the_harness_keys(tmp_path: Path):
    run = Run("bench_example", {"events": 1}, argv=[])
    with pytest.raises(ValueError, match="machine"):
        run.write({"machine": "mine"}, tmp_path / "x.json")


def test_the_page_has_a_section_per_results_file_with_its_machine_and_load(tmp_path: Path):
    run = Run("bench_engine", {"events": 10}, argv=["--events", "10"])
    run.write({"throughput": {"replay_lines": {"events_per_s": 12345}}}, tmp_path / "engine_light.json")
    sinks = Run("bench_sinks", {"sessions": 3}, argv=[])
    sinks.write(
        {
            "check_tool_call": [{"receiver": "healthy", "p50_us": 7.5}, {"receiver": "down", "p50_us": 8.0}],
            "phases": [{"phase": "quiet", "counts": {"ok": 3}}],
        },
        tmp_path / "sinks.json",
    )

    page = render_performance.render(tmp_path)

    assert "## Engine, light payloads (`benchmarks/bench_engine.py`)" in page
    assert "## Incident sinks that are slow or down (`benchmarks/bench_sinks.py`)" in page
    assert page.index("## Engine, light") < page.index("## Incident sinks")
    assert "| throughput.replay_lines.events_per_s | 12,345 |" in page
    # a list of plain records is a table of its own; records holding a dict are rows, named by their label
    assert "check_tool_call:\n\n| receiver | p50_us |\n| --- | --- |\n| healthy | 7.5 |\n| down | 8 |" in page
    assert "| phases[quiet].counts.ok | 3 |" in page
    assert page.count("at the start,") == 2  # each section shows its run's load average
    assert "`python -m benchmarks.bench_engine --events 10`" in page


class Server:
    """An HTTP/1.1 server of a few lines: each request's connection, head and body noted; POST
    /busy answered 503, POST /drop with the connection closed, any other request 200 with its
    body echoed as JSON."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[tuple[int, bytes, bytes]] = []  # (connection, head, body)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lengths = [int(line[15:]) for line in head.split(b"\r\n") if line[:15].lower() == b"content-length:"]
                body = await reader.readexactly(lengths[0]) if lengths else b""
                self.requests.append((number, head, body))
                if head.startswith(b"POST /drop "):
                    break
                status = 503 if head.startswith(b"POST /busy ") else 200
                answer = json.dumps({"echo": json.loads(body) if body else None}).encode()
                writer.write(
                    f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(answer)}\r\n\r\n".encode()
                    + answer
                )
        writer.close()


@contextlib.asynccontextmanager
async def local_server() -> AsyncIterator[tuple[Server, str]]:
    server = Server()
    listener = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    async with listener:
        yield server, f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"


@pytest.mark.parametrize("client", list(harness.CLIENTS))
def test_every_client_posts_json_with_the_token_on_connections_it_keeps(client: str):
    async def scenario() -> tuple[Server, list[Any]]:
        async with local_server() as (server, base), harness.connections(client, base, "t0k", 3) as conns:
            opened = server.connections
            answers = [await conns[i % 3].post("/v1/agent-breaker/check", {"n": i}) for i in range(6)]
            answers.append(await conns[0].post("/busy", {}))
            return server, [opened, *answers]

    server, (opened, *answers) = asyncio.run(scenario())

    assert answers == [(200, {"echo": {"n": i}}) for i in range(6)] + [(503, {"echo": {}})]
    assert 1 <= opened <= 3  # opened before the clock: a connection a session, or a pool warmed
    assert server.connections == opened  # every request after on a connection kept alive
    for _, head, _ in server.requests[-7:]:
        assert b"authorization: bearer t0k" in head.lower()
        assert b"content-type: application/json" in head.lower()


@pytest.mark.parametrize("client", list(harness.CLIENTS))
def test_a_connection_lost_raises_one_of_the_clients_errors(client: str):
    async def scenario() -> None:
        async with local_server() as (_, base), harness.connections(client, base, "t0k", 1) as (conn,):
            with pytest.raises(conn.errors):
                await conn.post("/drop", {})
            assert await conn.post("/v1/agent-breaker/check", {}) == (200, {"echo": {}})  # and the next one works

    asyncio.run(scenario())
