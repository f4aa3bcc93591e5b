"""The benchmarks' one harness: percentiles, ports and processes, a served agent-breaker, its
clients (raw, httpx, aiohttp), the tests' helpers, and the JSON each run writes with the facts of
the machine it ran on.

    from benchmarks._harness import Run, percentile, free_port, ...

Percentiles here are nearest-rank, the one definition every benchmark uses: the p-th percentile
of n values is the value of rank ceil(p / 100 * n) in ascending order (1-based; at least rank 1).
It is always one of the measured values, never interpolated: p50 of an even count is the lower
middle value, p100 the maximum.

`Run` opens a run (machine facts and the load average at the start); `Run.write` writes the
run's figures to benchmarks/results/<name>.json with the load average at the end, so that a run
on a busy machine shows it. benchmarks/render_performance.py renders docs/performance.md from
those files.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import importlib
import importlib.util
import json
import math
import os
import platform
import random
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from fractions import Fraction
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO, Protocol

import orjson

from agent_breaker._extras import DISTRIBUTION

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
TESTS = ROOT / "tests"
#: the checkout's folders the installed package is made of (pyproject.toml maps actions/, config/
#: and rails/ to agent_breaker.actions, .configs and .rails)
PACKAGE_FOLDERS = ("agent_breaker", "actions", "config", "rails")
#: keys of a results file the harness writes; a benchmark's own figures go beside them
RESERVED_KEYS = ("benchmark", "command", "machine", "settings", "total_seconds")


# ----------------------------------------------------------------------------- percentiles


def percentiles(values: Iterable[float], qs: Sequence[float]) -> list[float]:
    """Nearest-rank percentiles (see the module's docstring) of `values`, one per q in `qs`
    (each 0..100), sorting once. ValueError when there are no values or a q is out of range."""
    ordered = sorted(values)
    n = len(ordered)
    if not n:
        raise ValueError("percentile of no values")
    out = []
    for q in qs:
        if not 0 <= q <= 100:
            raise ValueError(f"percentile must be between 0 and 100, but was {q}")
        # exact arithmetic: 0.07 * 100 in floats is 7.000000000000001, whose ceiling is 8
        rank = max(1, math.ceil(Fraction(repr(q)) * n / 100))
        out.append(ordered[rank - 1])
    return out


def percentile(values: Iterable[float], q: float) -> float:
    """The nearest-rank q-th percentile (0..100) of `values`."""
    return percentiles(values, (q,))[0]


def ms_percentile(seconds: Sequence[float], q: float) -> float | None:
    """The nearest-rank q-th percentile of durations in seconds, in ms to 0.1 ms; None when there are none."""
    return round(percentile(seconds, q) * 1000, 1) if seconds else None


# ----------------------------------------------------------------------------- ports and processes


def free_port() -> int:
    """A loopback TCP port free at the time of the call."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid: int) -> list[int]:
    """The direct children of a process (/proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            found.append(int(entry))
    return found


def process_tree(pid: int) -> list[int]:
    """The process and its descendants (serve's worker processes, if it forked any)."""
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children(p))
    return tree


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pids: Iterable[int]) -> int:
    """VmRSS of these processes together, in bytes (0 for those gone)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
    return total


def stop_process(proc: subprocess.Popen, timeout_s: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after `timeout_s`; by PID, nothing else."""
    if proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


# ----------------------------------------------------------------------------- a served agent-breaker

READY_PATH = "/v1/agent-breaker/configs"
STARTUP_TIMEOUT_S = 120.0
# the server's documented limits (agent_breaker/server.py); servers started here get them explicitly
MAX_REQUEST_BYTES = 1_048_576
MAX_EVENT_BYTES = 262_144
MAX_EVENTS_PER_REQUEST = 100
MAX_JSON_DEPTH = 64


def server_env(token: str) -> dict[str, str]:
    """The environment of a benchmark's `agent-breaker serve`: this one, plus a token, keys and the limits."""
    return {
        **os.environ,
        # the shipped agent_breaker_redis config (shared store) refuses to load without it,
        # and `serve` builds every shipped config at start-up
        "AGENT_BREAKER_FINGERPRINT_SECRET": os.environ.get("AGENT_BREAKER_FINGERPRINT_SECRET") or secrets.token_hex(32),
        "AGENT_BREAKER_API_TOKEN": token,
        "AGENT_BREAKER_RECEIPT_KEYS": "k1:" + secrets.token_hex(32),
        "NEMO_GUARDRAILS_NO_USAGE_STATS": "1",
        "AGENT_BREAKER_MAX_REQUEST_BYTES": str(MAX_REQUEST_BYTES),
        "AGENT_BREAKER_MAX_EVENT_BYTES": str(MAX_EVENT_BYTES),
        "AGENT_BREAKER_MAX_EVENTS_PER_REQUEST": str(MAX_EVENTS_PER_REQUEST),
        "AGENT_BREAKER_MAX_JSON_DEPTH": str(MAX_JSON_DEPTH),
    }


def serve(port: int, token: str, log: BinaryIO, *args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """`agent-breaker serve` on 127.0.0.1:`port` (this Python's agent_breaker), stderr to `log`.
    A session of its own: Ctrl-C reaches the benchmark, which stops the server by PID."""
    return subprocess.Popen(
        [sys.executable, "-m", "agent_breaker.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
        + ["--log-level", "warning", *args],
        env={**server_env(token), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=log,
        start_new_session=True,
    )


def wait_ready(proc: subprocess.Popen, base: str, token: str, log: BinaryIO) -> None:
    """Until the server answers its configs route; SystemExit with its log's tail if it dies or takes too long."""
    import httpx

    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        try:
            if httpx.get(base + READY_PATH, headers={"authorization": f"Bearer {token}"}, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            log.seek(0)
            tail = log.read().decode(errors="replace")[-2000:]
            raise SystemExit(f"the server did not start (exit {proc.poll()}):\n{tail}")
        time.sleep(0.3)


# ----------------------------------------------------------------------------- legitimate traffic

CALLS_PER_SESSION = 200  # a legitimate client starts a new session after this many calls (max_steps is 500)
REQUEST_TIMEOUT_S = 120.0
WORDS = (
    "invoice",
    "orders",
    "refund",
    "shipping",
    "weather",
    "python",
    "kernel",
    "garden",
    "museum",
    "harbor",
    "violin",
    "glacier",
    "copper",
    "meadow",
    "lantern",
    "saffron",
    "quartz",
    "falcon",
    "tundra",
    "velvet",
)


def tool_call(n: int, args: dict[str, Any]) -> dict[str, Any]:
    """Call n of a client, to `search`, as the events endpoint takes it."""
    return {"type": "ToolCallRequested", "call_id": f"c{n}", "tool_name": "search", "tool_args": args}


def tool_result(n: int, result: dict[str, Any]) -> dict[str, Any]:
    """The result of call n."""
    return {"type": "ToolResultReceived", "call_id": f"c{n}", "tool_name": "search", "ok": True, "result": result}


def args_for(rng: random.Random, n: int) -> dict[str, Any]:
    """New words every call: legitimate work, no loop detector trips."""
    return {"q": f"{rng.choice(WORDS)} {rng.choice(WORDS)} {rng.choice(WORDS)} {n}", "limit": rng.randint(5, 50)}


def result_for(rng: random.Random, n: int) -> dict[str, Any]:
    return {"hits": [n, n + rng.randint(1, 1000)], "title": f"{rng.choice(WORDS)} {n}"}


# ----------------------------------------------------------------------------- the tests' helpers


def tests_module(name: str) -> ModuleType:
    """A helper module of tests/ (`_server`, `_receiver`, `_proxy`, `conftest`, `test_serve_concurrency`,
    `security.test_transport`), for the benchmarks that start servers the way the tests do.

    Those modules import one another as top-level modules (`from _ports import free_port`), as
    pytest puts tests/ on sys.path; so tests/ goes on sys.path here, the one place in benchmarks/
    that edits it (appended: the checkout's own packages still come first)."""
    if str(TESTS) not in sys.path:
        sys.path.append(str(TESTS))
    return importlib.import_module(name)


# ----------------------------------------------------------------------------- machine facts


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform knows."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def version(dist: str) -> str:
    """An installed distribution's version, "?" when it is not installed."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def load_average() -> list[float]:
    """os.getloadavg(): runnable processes averaged over 1, 5 and 15 minutes (above the CPU count: a busy machine)."""
    return [round(x, 2) for x in os.getloadavg()]


def checkout() -> dict[str, Any]:
    """The checkout's commit, its package's tree and the package files modified in the working tree (git, read only)."""

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.rstrip("\n") if done.returncode == 0 else ""

    # the package's folders: agent_breaker/, and the NeMo glue the install maps into it
    changed = git("status", "--porcelain", "--", *PACKAGE_FOLDERS).split("\n")  # "XY path" lines
    return {
        "git_commit": git("rev-parse", "HEAD") or None,
        "package_tree": git("rev-parse", "HEAD:agent_breaker") or None,
        "modified_package_files": sorted(line[3:] for line in changed if line.strip()),
    }


def machine_facts() -> dict[str, Any]:
    """What a figure depends on besides the code: the machine, the Python, the package and the checkout, the
    UTC time, and the load average now (other work on the machine inflates every figure)."""
    spec = importlib.util.find_spec("agent_breaker")  # where it would import from, without importing it
    return {
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "agent_breaker_version": version(DISTRIBUTION),
        "agent_breaker": str(Path(spec.origin).resolve().parent) if spec and spec.origin else None,
        **checkout(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "load_average_at_start": load_average(),
    }


def modules_elsewhere() -> dict[str, str]:
    """agent_breaker modules this process imported from outside the package folder it imports first
    (an editable install's finder fills what a worktree or another checkout lacks from its own
    checkout, actions/, config/ and rails/ always): the code a figure measured besides the commit's."""
    spec = importlib.util.find_spec("agent_breaker")
    if spec is None or spec.origin is None:
        return {}
    home = Path(spec.origin).resolve().parent
    out = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if (
            (name == "agent_breaker" or name.startswith("agent_breaker."))
            and path
            and not Path(path).resolve().is_relative_to(home)
        ):
            out[name] = str(Path(path).resolve())
    return dict(sorted(out.items()))


def describe_machine(facts: Mapping[str, Any]) -> str:
    """One line for a benchmark's printed header."""
    load = " ".join(str(x) for x in facts["load_average_at_start"])
    return (
        f"{facts['date_utc']} | {facts['platform']} | {facts['cpu']} x {facts['cpu_count']} | Python {facts['python']} | "
        f"agent-breaker {facts['agent_breaker_version']} at {str(facts['git_commit'] or '?')[:12]} | load average {load}"
    )


# ----------------------------------------------------------------------------- the results file


def result_path(name: str) -> Path:
    """benchmarks/results/<name>.json: where a run of that name writes by default."""
    return RESULTS / f"{name}.json"


def shown(path: Path) -> str:
    """A path inside the checkout relative to it."""
    resolved = path.resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(resolved)


def _plain(value: Any) -> Any:
    """A setting as the results file shows it: paths relative to the checkout, URLs without their password."""
    if isinstance(value, Path):
        return shown(value)
    if isinstance(value, str):
        return re.sub(r"(://[^/:@]*:)[^/@]+@", r"\1***@", value)
    return value


def _finite(value: Any) -> Any:
    """The value with NaN and infinities as None (JSON has neither), in nested dicts and lists too."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


class Run:
    """One run of one benchmark: its facts taken when it starts, its figures written when it ends.

    run = Run("bench_engine", args)      # args: the parsed command line (its `out` is not a setting)
    ...
    run.write(figures, args.out)         # args.out: benchmarks/results/<name>.json by default (out_argument)
    """

    def __init__(self, script: str, settings: argparse.Namespace | Mapping[str, Any], argv: Sequence[str] | None = None) -> None:
        self.script = script
        items = vars(settings).items() if isinstance(settings, argparse.Namespace) else settings.items()
        self.settings = {k: _plain(v) for k, v in items if k != "out"}
        self.command = " ".join(["python", "-m", f"benchmarks.{script}", *(sys.argv[1:] if argv is None else argv)])
        self.started = time.monotonic()
        self.machine = machine_facts()

    def document(self, figures: Mapping[str, Any]) -> dict[str, Any]:
        clash = sorted(set(figures) & set(RESERVED_KEYS))
        if clash:
            raise ValueError(f"figures may not use the harness's keys {clash}")
        machine = {**self.machine, "load_average_at_end": load_average(), "modules_elsewhere": modules_elsewhere()}
        return _finite(
            {
                "benchmark": self.script,
                "command": self.command,
                "machine": machine,
                "settings": self.settings,
                "total_seconds": round(time.monotonic() - self.started, 1),
                **figures,
            }
        )

    def write(self, figures: Mapping[str, Any], out: Path) -> dict[str, Any]:
        """The run's figures, with its machine facts (load average at the end added), its settings
        and its length, as indented JSON in `out`; the document written."""
        doc = self.document(figures)
        save(doc, out)
        return doc


def save(doc: Mapping[str, Any], out: Path) -> None:
    """A run's document (Run.document) as indented JSON in `out`, written whole: a temporary file renamed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    tmp.replace(out)
    print(f"figures written to {shown(out)}")


def out_argument(ap: argparse.ArgumentParser, name: str) -> None:
    """The --out option every benchmark has: where its JSON goes, benchmarks/results/<name>.json by default."""
    default = result_path(name)
    ap.add_argument("--out", type=Path, default=default, help=f"write the figures here as JSON (default {shown(default)})")


# ----------------------------------------------------------------------------- clients and Redis


class Connection(Protocol):
    """One session's way to the server, whichever the client: `open` before the clock starts (a
    warm pool: connecting is not deciding), `post` a JSON body for the status and the decoded
    answer, `close`. A request that fails raises one of `errors`. A client that pools its
    connections is `shared`: one for all the sessions."""

    shared: bool
    errors: tuple[type[BaseException], ...]

    def __init__(self, base: str, token: str) -> None: ...

    async def open(self) -> None: ...

    async def post(self, path: str, obj: dict[str, Any]) -> tuple[int, Any]: ...

    async def close(self) -> None: ...


class RawConnection:
    """One keep-alive HTTP/1.1 connection, requests written and answers read by hand (JSON by
    orjson): a client that costs a tenth of httpx's CPU, which on a small machine is CPU the
    server gets."""

    shared = False
    errors: tuple[type[BaseException], ...] = (OSError, asyncio.IncompleteReadError, ValueError)

    def __init__(self, base: str, token: str) -> None:
        host_port = base.split("://", 1)[1]
        self.host, port = host_port.rsplit(":", 1)
        self.port = int(port)
        self.head = f"Host: {host_port}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        """Connect now (a pool warmed before the clock starts); `post` reconnects as needed."""
        if self.reader is not None and self.reader.at_eof():
            await self.close()  # the server closed it while idle (keep-alive timeout): as any client, open another
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def post(self, path: str, obj: dict[str, Any]) -> tuple[int, Any]:
        await self.open()
        assert self.reader is not None and self.writer is not None
        data = orjson.dumps(obj)
        try:
            self.writer.write(f"POST {path} HTTP/1.1\r\n{self.head}Content-Length: {len(data)}\r\n\r\n".encode() + data)
            head = await self.reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            return status, orjson.loads(await self.reader.readexactly(length)) if length else None
        except self.errors:
            await self.close()  # the next request opens a new connection
            raise

    async def close(self) -> None:
        if self.writer is not None:
            writer, self.reader, self.writer = self.writer, None, None
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


class HttpxConnection:
    """The sessions' requests through one httpx.AsyncClient, shared by them all as a gateway shares
    it: its default pool (at most 100 connections, 20 kept alive), HTTP/1.1, keep-alive."""

    shared = True

    def __init__(self, base: str, token: str) -> None:
        import httpx

        self.client = httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=REQUEST_TIMEOUT_S)
        self.errors: tuple[type[BaseException], ...] = (httpx.HTTPError, ValueError)  # ValueError: an answer not JSON

    async def open(self) -> None:
        """One request: the sessions opening together make the pool open a connection each, up to its limits."""
        await self.client.get(READY_PATH)

    async def post(self, path: str, obj: dict[str, Any]) -> tuple[int, Any]:
        response = await self.client.post(path, json=obj)
        return response.status_code, response.json()

    async def close(self) -> None:
        await self.client.aclose()


class AiohttpConnection:
    """The sessions' requests through one aiohttp.ClientSession, shared by them all: its default
    TCPConnector (at most 100 connections, idle ones kept 15 s), HTTP/1.1, keep-alive."""

    shared = True

    def __init__(self, base: str, token: str) -> None:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        self.session = aiohttp.ClientSession(base, headers={"Authorization": f"Bearer {token}"}, timeout=timeout)
        self.errors: tuple[type[BaseException], ...] = (aiohttp.ClientError, asyncio.TimeoutError, ValueError)

    async def open(self) -> None:
        """One request: the sessions opening together make the pool open a connection each, up to its limits."""
        async with self.session.get(READY_PATH) as response:
            await response.read()

    async def post(self, path: str, obj: dict[str, Any]) -> tuple[int, Any]:
        async with self.session.post(path, json=obj) as response:
            return response.status, await response.json()

    async def close(self) -> None:
        await self.session.close()


#: the clients by name: HTTP written by hand, and the two a Python gateway uses
CLIENTS: dict[str, type[Connection]] = {"raw": RawConnection, "httpx": HttpxConnection, "aiohttp": AiohttpConnection}


@contextlib.asynccontextmanager
async def connections(client: str, base: str, token: str, sessions: int) -> AsyncIterator[list[Connection]]:
    """A Connection for each of `sessions` sessions, of one of CLIENTS: raw, one each; httpx and
    aiohttp, one shared by all (its client pools the connections). Opened together before they
    are yielded, closed on the way out."""
    kind = CLIENTS[client]
    conns: list[Connection] = [kind(base, token)] * sessions if kind.shared else [kind(base, token) for _ in range(sessions)]
    try:
        await asyncio.gather(*(c.open() for c in conns))
        yield conns
    finally:
        await asyncio.gather(*(c.close() for c in dict.fromkeys(conns)))  # a shared one once


def flush_redis(url: str, pattern: str) -> int:
    """Delete the keys matching `pattern` (a config's prefix) from the benchmark's database."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=pattern, count=1000))
        return client.delete(*keys) if keys else 0
    finally:
        client.close()
