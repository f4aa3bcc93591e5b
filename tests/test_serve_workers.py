"""`agent-breaker serve --workers N` (issue: scale out): a real server with two worker processes
on one port, on the Redis config (a database of this file's own). The test finds which worker
holds a connection's socket in /proc, and so steers each request of a run, on a fresh
connection, to one worker or the other. A loop whose calls alternate between the workers is cut
at the same call as in one process, and a tool failing on both opens one breaker; a burst of
pooled connections is spread over both. In-memory configs and an unauthenticated public bind
are refused, a worker that cannot start stops them all, and the workers end with their
supervisor, stopped by PID or killed. The Redis Cluster tests are in test_redis_cluster.py."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("httpx")
pytest.importorskip("nemoguardrails")
pytest.importorskip("redis")

import httpx
from _server import Server, _flush, call, child_env, db_url, free_port, result, start
from conftest import OUTAGE, redis_or_skip

from agent_breaker import Engine, ReceiptKeys
from agent_breaker.config import load_config
from agent_breaker.store import MemoryStore

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

ROOT = Path(__file__).resolve().parents[1]
REDIS_CONFIG = ROOT / "config" / "agent_breaker_redis"
CONFIG_ID = "agent_breaker_redis"
EVENTS = "/v1/agent-breaker/events"
CHECK = "/v1/agent-breaker/check"
REDIS_DB = 10
STARTED = "Application startup complete."


# ----------------------------------------------------------------------------- processes and sockets


def children(pid: int) -> list[int]:
    """The direct children of a process (/proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry))
    return found


def workers_of(pid: int) -> list[int]:
    """The supervisor's worker processes (not multiprocessing's resource tracker)."""
    out = []
    for child in children(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if b"spawn_main" in f.read():
                    out.append(child)
        except OSError:
            continue
    return sorted(out)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def socket_inodes(pid: int) -> set[int]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def server_socket(port: int, client_port: int) -> int | None:
    """The inode of the server's end of the established loopback connection from `client_port`."""
    with open("/proc/net/tcp") as f:
        for line in f.read().splitlines()[1:]:
            fields = line.split()
            local, remote, state = fields[1], fields[2], fields[3]
            if int(local.split(":")[1], 16) == port and int(remote.split(":")[1], 16) == client_port and state == "01":
                return int(fields[9])
    return None


class Fleet:
    """A `serve --workers 2` server, and connections steered to one worker or the other."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.port = int(server.base.rsplit(":", 1)[1])
        self.workers = workers_of(server.proc.pid)
        self.answered: list[int] = []  # the worker of each request sent through `on`

    def owner(self, response: httpx.Response) -> int | None:
        """The worker holding the connection `response` came on (still open)."""
        client_port = response.extensions["network_stream"].get_extra_info("client_addr")[1]
        inode = server_socket(self.port, client_port)
        holders = [w for w in self.workers if inode is not None and inode in socket_inodes(w)]
        return holders[0] if len(holders) == 1 else None

    def connection(self, worker: int, attempts: int = 200) -> httpx.Client:
        """A fresh keep-alive connection the kernel handed to `worker` (each worker listens on
        a socket of its own on the port, and each new connection goes to one of them)."""
        for _ in range(attempts):
            client = httpx.Client(base_url=self.server.base, headers=self.server.headers, timeout=60)
            r = client.get("/v1/agent-breaker/configs")
            assert r.status_code == 200, r.text
            if self.owner(r) == worker:
                return client
            client.close()
        raise AssertionError(f"no connection reached worker {worker} in {attempts} attempts")

    def on(self, worker: int, path: str, body: dict[str, Any]) -> httpx.Response:
        """POST `body` on a new connection held by `worker` (checked again after the answer)."""
        client = self.connection(worker)
        try:
            r = client.post(path, json=body)
            assert self.owner(r) == worker
        finally:
            client.close()
        self.answered.append(worker)
        return r

    def event(self, worker: int, session: str, event: dict[str, Any]) -> dict[str, Any]:
        r = self.on(worker, EVENTS, {"config_id": CONFIG_ID, "session_id": session, "events": [event]})
        assert r.status_code == 200, r.text
        [verdict] = r.json()["events"]
        return verdict


def started(server: Server, workers: int, timeout_s: float = 120.0) -> None:
    """Wait until every worker finished its start-up (uvicorn logs it once per worker)."""
    deadline = time.monotonic() + timeout_s
    while server.log().count(STARTED) < workers:
        if server.proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"the workers did not start: {server.log()[-3000:]}")
        time.sleep(0.2)  # polling the server's log until it says so, not timing the code under test


def serve_workers(workers: int = 2) -> Server:
    server = start(
        {"REDIS_URL": db_url(REDIS_DB)}, log_level="info", args=("--config", str(REDIS_CONFIG), "--workers", str(workers))
    )
    started(server, workers)
    return server


def gone(pids: list[int], timeout_s: float = 30.0) -> list[int]:
    """The processes of `pids` still alive after up to `timeout_s` (polled)."""
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def kill_left(pids: list[int]) -> None:
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    redis_or_skip()
    _flush(db_url(REDIS_DB))
    server = serve_workers()
    workers = workers_of(server.proc.pid)
    try:
        yield Fleet(server)
    finally:
        server.stop()
        kill_left(gone(workers))
        _flush(db_url(REDIS_DB))


# ----------------------------------------------------------------------------- one port, two workers, one state


def test_two_worker_processes_answer_on_one_port(fleet: Fleet):
    assert len(fleet.workers) == 2
    log = fleet.server.log()
    for pid in fleet.workers:
        assert f"agent-breaker: worker {pid}: " in log
    assert "with 2 worker processes" in log
    # fresh connections land on both workers (the kernel hands each to one of them)
    seen = set()
    for _ in range(200):
        with httpx.Client(base_url=fleet.server.base, timeout=60) as client:
            seen.add(fleet.owner(client.get("/v1/agent-breaker/configs")))
        if seen >= set(fleet.workers):
            break
    assert seen >= set(fleet.workers)


def test_a_burst_of_pooled_connections_is_spread_over_the_workers(fleet: Fleet):
    """A client opening its pool of keep-alive connections at once: each worker gets some (each
    listens on a socket of its own, SO_REUSEPORT, and the kernel spreads the connections). With
    one shared socket, the worker woken first accepted the whole burst and kept it."""
    import asyncio

    async def burst(n: int) -> dict[int, int | None]:
        async with httpx.AsyncClient(base_url=fleet.server.base, limits=httpx.Limits(max_connections=n)) as client:
            answers = await asyncio.gather(*(client.get("/v1/agent-breaker/configs") for _ in range(n)))
            return {r.extensions["network_stream"].get_extra_info("client_addr")[1]: fleet.owner(r) for r in answers}

    owners = asyncio.run(burst(16))
    assert len(owners) == 16  # sixteen connections, open together
    assert set(owners.values()) == set(fleet.workers)  # all on one worker: 2 chances in 65,536


def test_the_workers_connections_set_tcp_nodelay():
    """A worker's own listening socket is made with IPPROTO_TCP, so asyncio sets TCP_NODELAY on
    each connection. Made with protocol 0, an answer written in two parts waited for the
    client's delayed ACK: 56 ms an event instead of 16, one client alone."""
    import asyncio
    import socket

    from agent_breaker.server._run import _reuse_port_socket

    async def nodelay_of_accepted() -> int:
        sock = _reuse_port_socket("127.0.0.1", 0)
        seen: list[int] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.append(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(handle, sock=sock)
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
            await reader.read()  # the server closes once it has looked
            writer.close()
        return seen[0]

    assert asyncio.run(nodelay_of_accepted()) != 0


def reference_cut(events: list[tuple[str, dict[str, Any]]]) -> list[tuple[bool, str | None]]:
    """The verdicts one process gives the same events: the config's engine on in-process state."""
    engine = Engine(
        load_config(REDIS_CONFIG / "config.yml"), store=MemoryStore(), listeners=[], receipt_keys=ReceiptKeys.ephemeral()
    )
    out = []
    for session, e in events:
        if e["type"] == "ToolCallRequested":
            v = engine.check_tool_call(
                {"session": session, "tool": e["tool_name"], "args": e["tool_args"], "call_id": e["call_id"]}
            )
            out.append((v.allowed, v.heuristic))
        else:
            r = engine.record_tool_result(
                {"session": session, "tool": e["tool_name"], "ok": e["ok"], "error": e["error"], "call_id": e["call_id"]}
            )
            out.append((r.accepted, r.heuristic))
    return out


def test_a_loop_alternating_between_workers_is_cut_at_the_same_call(fleet: Fleet):
    """The same failing call again and again, each call on one worker and its result on the
    other: the session is one (in Redis), the fourth call is warned (the warning given by one
    worker is spent for the other) and the fifth is cut, as in one process."""
    a, b = fleet.workers
    session = f"loop-{uuid.uuid4().hex[:8]}"
    plan = []
    for i in range(1, 6):
        plan.append((session, call(i)))
        plan.append((session, result(i)))
    expected = reference_cut(plan)
    cut = next(n for n, (ok, _) in enumerate(expected) if not ok)
    assert plan[cut][1] == call(5) and expected[cut][1] == "identical_failure"
    assert expected[plan.index((session, call(4)))] == (True, "identical_failure")  # the warning

    served = []
    for n, (s, e) in enumerate(plan[:cut]):
        # call i on one worker, its result on the other: call 1 on a, result 1 on b, call 2 on b, ...
        worker = fleet.workers[(n // 2 + n % 2) % 2]
        v = fleet.event(worker, s, e)
        served.append((v.get("allowed", v.get("accepted")), v.get("heuristic")))
    assert served == expected[:cut]
    # the cutting call, through the gateway's check, on each worker: 429 on both
    for worker in (a, b):
        r = fleet.on(worker, CHECK, {"config_id": CONFIG_ID, "session_id": session, "event": call(5)})
        assert r.status_code == 429, r.text
        assert r.headers["x-agent-breaker-heuristic"] == "identical_failure"
    assert set(fleet.answered) == {a, b}


def test_a_tool_failing_on_both_workers_opens_one_breaker(fleet: Fleet):
    """Calls of one tool in separate sessions (no loop), failing, on alternating workers: the
    breaker opens after as many failures as in one process, though neither worker saw them all."""
    a, b = fleet.workers
    tool = f"flaky_{uuid.uuid4().hex[:8]}"
    plan = []
    for i in range(1, 13):
        session = f"brk-{tool}-{i}"
        plan.append((session, call(i, tool, {"q": i})))
        plan.append((session, result(i, tool, error=OUTAGE)))  # an upstream failing (a caller's error opens nothing)
    expected = reference_cut(plan)
    cut = next(n for n, (ok, _) in enumerate(expected) if not ok)
    assert expected[cut][1] == "circuit_open" and plan[cut][1]["type"] == "ToolCallRequested"

    recorded = {a: 0, b: 0}
    last = a
    for n, (s, e) in enumerate(plan[:cut]):
        worker = fleet.workers[(n // 2) % 2]  # call i and its result on one worker, call i+1 on the other
        v = fleet.event(worker, s, e)
        assert (v.get("allowed", v.get("accepted")), v.get("heuristic")) == expected[n], (n, v)
        if e["type"] == "ToolResultReceived":
            recorded[worker] += 1
            last = worker
    failures = sum(recorded.values())
    assert max(recorded.values()) < failures  # neither worker saw every failure
    # the next call, on the worker that recorded the opening failure (the other learns it from
    # the broadcast, or from Redis once its near-cache entry is older than near_cache_s)
    session, e = plan[cut]
    v = fleet.event(last, session, e)
    assert (v["allowed"], v["heuristic"]) == (False, "circuit_open")


# ----------------------------------------------------------------------------- refusals and stops


def serve_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agent_breaker.cli", "serve", "--port", str(free_port()), "--log-level", "warning", *args],
        env=child_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_in_memory_configs_are_refused_with_several_workers():
    shipped = serve_cli("--workers", "2", timeout=60)
    assert shipped.returncode == 2, shipped.stderr
    in_memory = "agent_breaker, agent_breaker_observe, agent_breaker_v1, coding_agent keep their guard state in process memory"
    assert in_memory in shipped.stderr
    assert str(REDIS_CONFIG) in shipped.stderr
    one = serve_cli("--workers", "3", "--config", str(ROOT / "config" / "agent_breaker"), timeout=60)
    assert one.returncode == 2
    assert "--workers 3: config(s) agent_breaker keeps its guard state in process memory" in one.stderr
    assert "agent-breaker: serving" not in one.stderr  # refused before binding, before any worker
    public = serve_cli("--workers", "2", "--host", "0.0.0.0", "--config", str(REDIS_CONFIG), timeout=60)
    assert public.returncode == 2
    assert "refusing to bind 0.0.0.0 without authentication" in public.stderr
    assert "agent-breaker: serving" not in public.stderr  # never bound
    bad = serve_cli("--workers", "0", timeout=60)
    assert bad.returncode == 2 and "--workers: a whole number of at least 1" in bad.stderr


def test_each_worker_refuses_an_engine_on_in_memory_state_too():
    """The workers check the engines they built, not only the config.yml the CLI read."""
    code = (
        "import sys; from pathlib import Path; from agent_breaker.server import started_app; "
        "from agent_breaker.server import ServeError\n"
        "try:\n"
        f"    started_app(Path({str(ROOT / 'config' / 'agent_breaker_observe')!r}), '127.0.0.1', workers=2)\n"
        "except ServeError as exc:\n"
        "    print(exc); sys.exit(2)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "agent_breaker_observe keeps its guard state in process memory" in done.stdout


def test_a_worker_that_cannot_start_stops_them_all(tmp_path: Path):
    folder = tmp_path / "broken_redis"
    shutil.copytree(REDIS_CONFIG, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "broken.co").write_text("flow broken\n  this is not colang ((\n")
    done = serve_cli("--workers", "2", "--config", str(folder), env={"REDIS_URL": db_url(REDIS_DB)})
    assert done.returncode == 2, done.stderr
    assert re.search(r"agent-breaker: worker \d+: config broken_redis does not load: ColangParsingError", done.stderr)
    assert "a worker could not start (see above): stopped" in done.stderr


def test_a_worker_that_dies_is_replaced():
    redis_or_skip()
    server = serve_workers()
    supervisor = server.proc.pid
    first = workers_of(supervisor)
    seen = list(first)
    try:
        os.kill(first[0], signal.SIGKILL)
        started(server, 3)  # the replacement built its app and serves (uvicorn's third start-up line)
        now = workers_of(supervisor)
        seen += now
        assert len(now) == 2 and first[0] not in now and first[1] in now
        assert f"worker {first[0]} ended (status -9); starting another" in server.log()
        [new] = set(now) - {first[1]}
        assert Fleet(server).event(new, "after-crash", call(1))["allowed"] is True
    finally:
        server.stop()
        kill_left(gone(seen, timeout_s=15))
        _flush(db_url(REDIS_DB))


@pytest.mark.parametrize("how", ["stopped by PID", "killed"])
def test_the_workers_end_with_their_supervisor(how: str):
    redis_or_skip()
    server = serve_workers()
    supervisor = server.proc.pid
    workers = workers_of(supervisor)
    everything = children(supervisor)  # the workers and multiprocessing's resource tracker
    try:
        assert len(workers) == 2
        if how == "stopped by PID":
            server.stop()
            assert server.proc.returncode == 0
        else:
            os.kill(supervisor, signal.SIGKILL)  # no goodbye: the workers get SIGTERM from the kernel
            server.proc.wait(timeout=30)
        assert gone(everything) == []
    finally:
        server.stop()
        kill_left(everything)
        _flush(db_url(REDIS_DB))
