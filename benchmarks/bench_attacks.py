"""Hostile load against the real `agent-breaker serve`: what each attack costs the server, and
whether authorized clients are still served.

    python -m benchmarks.bench_attacks [--attacks slow_heads,stalled_bodies,...] [--configs memory,redis]
        [--slow-heads 1100] [--stalled 300] [--sessions 2000] [--budget-mib 64] [--tool-calls 10000]
        [--trips 1200] [--escalations 2000] [--junk-tools 200] [--out benchmarks/results/attacks.json]

Each attack runs against a fresh server (a subprocess on a free loopback port, started by the
security tests' helper `tests/_server.py`) serving the shipped in-memory config (`memory`) and
the Redis one (`redis`, on --redis-db, its keys removed before and after), with a tokens file of
three tenants: acme (the attacker), globex (the victim) and an all-tenant token, besides the
scraper's and the admin's. Both configs also name `payments_api` and `enrich` (fallback tier
`escalate`) under `tools:`, and keep an open breaker open 300 s (BENCH_SETTINGS). The transport
settings are the server's defaults (head timeout 10 s, body timeout 30 s, 16 bodies per token).

1. slow_heads: --slow-heads connections send half a request head and stop; meanwhile globex
   sends --legit events one after the other, each on a new connection.
2. stalled_bodies: --stalled connections of acme's token declare a 1 MiB body, send part of it
   and stall; globex's events meanwhile; then each stalled connection's answer (503 at once,
   408 at the body timeout).
3. session_memory (records session_weight and session_budget): --sessions sessions, each three
   tool calls whose results cite --ids distinct ids (ORD-12345678): the server's RSS per session
   (and Redis' memory on the Redis config), RSS after each quarter. Then a server whose
   `sessions.max_bytes` is --budget-mib (on the Redis config it bounds the in-process copies
   kept for an outage): acme floods it with sessions past the budget (--budget-factor times
   it, by the in-memory weight measured first); peak RSS against the budget, RSS after each
   quarter, and globex's session, made before the flood, answering after it.
4. huge_chat: one chat completion whose last assistant message holds --tool-calls native tool
   calls (the Colang 1.0 config), while globex sends events.
5. incident_flood: a webhook sink to a local receiver; acme makes --trips junk trips (calls its
   own open breaker refuses: half in one session, half in a session each) while globex's
   payments_api breaker opens. Was globex's breaker incident delivered; the sink's counts.
6. escalation_flood: `enrich` escalates when its breaker is open (fallback tier `escalate`);
   acme's --escalations sessions escalate, half before and half after one escalation of globex.
   Is globex's listed on the first page of GET /v1/agent-breaker/escalations?status=open (the
   default listing; with ?tenant=globex too), and how many open records acme's flood left.
7. metrics_labels: acme opens the breakers of --junk-tools made-up tools, then globex's
   payments_api (a tool of the config) opens: has /metrics a breaker-state series for it?
8. refused_bodies (besides the seven): --refused connections with no token declare a 1 MiB
   body and send part of it; each is refused (401) before its body is read. The server's RSS
   while they wait for the head timeout to close them, and globex's events meanwhile.
9. unread_answers: --unread connections of acme's token pipeline checks (--unread-s seconds,
   past the write deadline) and read none of the answers, in two forms, each on a fresh server:
   flood (100 checks a write, again as soon as the server takes them) and paced (as many as
   the server queues, MAX_PIPELINED, every --unread-every-s); meanwhile globex's checks and hooks
   (`/check` and `/v1/hooks/claude-code`, alternately, each on a new connection). The gateway
   places in flight (sampled from /metrics), the server's RSS, globex's latency and 503s.
10. pipelined_head: --heads connections of acme's token pipeline 10 event requests of 100
   events each, read none of the answers, and then send a request head that never ends, for
   up to --head-s seconds; what each sent before the server closed it, the server's RSS,
   and globex's checks and hooks meanwhile.

Figures only, nothing asserted: each attack's record says whether it "held" by its criterion.
Written to --out as JSON (with the machine's facts, the UTC date and the load average at start
and end), and a table printed. Percentiles are nearest-rank.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import math
import os
import re
import selectors
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis
import yaml
from prometheus_client.parser import text_string_to_metric_families

from agent_breaker.server._transport import MAX_PIPELINED
from benchmarks._harness import ROOT, Run, checkout, out_argument, percentile, process_tree, rss_bytes, shown, tests_module

os.environ.setdefault("NEMO_GUARDRAILS_NO_USAGE_STATS", "1")

# the security tests' server, receiver and figures (tests/_server.py, _receiver.py, conftest.py, ...)
_server = tests_module("_server")
TOKEN = _server.TOKEN
Server = _server.Server
call, result = _server.call, _server.result
db_url, start = _server.db_url, _server.start
_flush = _server._flush
receiving = tests_module("_receiver").receiving
CALL_ERROR, OUTAGE = tests_module("conftest").CALL_ERROR, tests_module("conftest").OUTAGE
served_root = tests_module("test_serve_concurrency").served_root
HALF_HEAD = tests_module("security.test_transport").HALF_HEAD

ACME = "acme-token-" + "b" * 24  # the attacker
GLOBEX = "globex-token-" + "c" * 24  # the victim
SCRAPER = "scraper-token-" + "e" * 24  # $AGENT_BREAKER_METRICS_TOKEN
ADMIN = "bench-admin-token-" + "f" * 24  # $AGENT_BREAKER_ADMIN_TOKEN: the escalation routes
CONFIGS = {"memory": "agent_breaker", "redis": "agent_breaker_redis"}
NATIVE_CONFIG = "agent_breaker_v1"  # native tool calls: the Colang 1.0 config (in memory)
EVENTS = "/v1/agent-breaker/events"
CHAT = "/v1/chat/completions"
ESCALATIONS = "/v1/agent-breaker/escalations"
MAX_EVENTS = 100  # the server's events per request
BODY_BYTES = 1 << 20  # the server's largest request body
LEGIT_LIMIT_S = 1.0
#: server memory an attack may add (issue 39)
RSS_LIMIT_BYTES = 100 * 2**20
CHECK = "/v1/agent-breaker/check"
HOOK = "/v1/hooks/claude-code"
#: what every served config knows besides the shipped settings: a configured tool whose breaker
#: series must survive junk labels, a tool that escalates when down (its breaker kept open for
#: the whole flood), junk tools opening in a few calls
BENCH_SETTINGS: dict[str, Any] = {
    "tools": {"payments_api": {}, "enrich": {"fallback": {"escalate": True}}},
    "breaker": {"open_s": 300.0, "max_open_s": 600.0},
}
ATTACKS = (
    "slow_heads",
    "stalled_bodies",
    "session_memory",
    "huge_chat",
    "incident_flood",
    "escalation_flood",
    "metrics_labels",
    "refused_bodies",
    "unread_answers",
    "pipelined_head",
)


# ----------------------------------------------------------------------------- servers


class Bench:
    """The run's settings, its scratch folder and its records."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.work = work
        self.records: list[dict[str, Any]] = []
        self.per_session_bytes: dict[str, float] = {}  # session_memory's first part, for the budget flood
        self.code = ""  # package_digest() when the last server started

    def record(self, name: str, config: str, criterion: str, held: bool | None, figures: dict[str, Any]) -> None:
        rec = {
            "name": name,
            "config": config,
            "criterion": criterion,
            "held": held,
            "package_digest": self.code,
            "figures": figures,
        }
        self.records.append(rec)
        mark = {True: "held", False: "NOT HELD", None: "-"}[held]
        print(f"  {name:17} {config:6} {mark:8} {short(rec)}", flush=True)


def package_digest() -> str:
    """The package's and the shipped configs' files, hashed: the code a server started now runs
    (the checkout may change during a run)."""
    digest = hashlib.sha256()
    for folder in ("agent_breaker", "config"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".lua", ".yml", ".co"):
                digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def config_root(folder: Path, sessions: dict[str, Any] | None) -> Path:
    """The shipped in-memory and Redis configs (Redis decisions may wait 30 s: no fallback to
    local state under load) and the Colang 1.0 one, each with BENCH_SETTINGS (and `sessions`)."""
    root = served_root(folder)
    shutil.copytree(ROOT / "config" / NATIVE_CONFIG, root / NATIVE_CONFIG)
    for name in CONFIGS.values():
        path = root / name / "config.yml"
        tree = yaml.safe_load(path.read_text())
        tree["custom_data"]["agent_breaker"].update(BENCH_SETTINGS)
        if sessions:
            tree["custom_data"]["agent_breaker"]["sessions"] = sessions
        path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return root


@contextlib.contextmanager
def serving(bench: Bench, *, sessions: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> Iterator[Server]:
    """A fresh server on the bench's configs, with the tokens of acme, globex, an all-tenant
    one, the scraper's and the admin's; the Redis config's keys in --redis-db (emptied before
    and after)."""
    folder = bench.work / uuid.uuid4().hex[:8]
    folder.mkdir()
    root = config_root(folder, sessions)
    tokens = folder / "tokens.json"
    tokens.write_text(json.dumps({TOKEN: "*", ACME: "acme", GLOBEX: "globex"}))
    url = db_url(bench.args.redis_db)
    _flush(url)
    server_env = {
        "AGENT_BREAKER_API_TOKENS_FILE": str(tokens),
        "AGENT_BREAKER_METRICS_TOKEN": SCRAPER,
        "AGENT_BREAKER_ADMIN_TOKEN": ADMIN,
        "REDIS_URL": url,
        **(env or {}),
    }
    bench.code = package_digest()
    srv = start(server_env, args=("--config", str(root)), token=TOKEN)
    try:
        for config_id in CONFIGS.values():  # each engine's first decision (imports, caches) before any figure
            legit_requests(srv, config_id, 3, "warm")
        yield srv
    finally:
        srv.stop()
        _flush(url)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def address(server: Server) -> tuple[str, int]:
    host, port = server.base.removeprefix("http://").split(":")
    return host, int(port)


# ----------------------------------------------------------------------------- measuring


class PeakRss:
    """The server's RSS sampled every `every_s` on a thread of its own while in the block."""

    def __init__(self, server: Server, every_s: float = 0.05) -> None:
        self.pids = process_tree(server.proc.pid)
        self.every_s = every_s
        self.start = self.peak = rss_bytes(self.pids)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.peak = max(self.peak, rss_bytes(self.pids))

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes(self.pids))


def summary(seconds: list[float]) -> dict[str, Any]:
    """p50 / p99 / max in ms (nearest rank)."""
    if not seconds:
        return {"n": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    return {
        "n": len(seconds),
        "p50_ms": round(percentile(seconds, 50) * 1000, 1),
        "p99_ms": round(percentile(seconds, 99) * 1000, 1),
        "max_ms": round(max(seconds) * 1000, 1),
    }


def legit_client(server: Server) -> httpx.Client:
    """globex's client: a new connection for each request (none kept alive), as a client
    arriving while the attack holds the server would open."""
    return httpx.Client(
        base_url=server.base, headers=bearer(GLOBEX), timeout=10, limits=httpx.Limits(max_keepalive_connections=0)
    )


def legit_request(http: httpx.Client, config_id: str, tag: str) -> tuple[float, bool]:
    """One authorized event (a fresh session, one tool call): its latency, and whether it was
    answered 200 with the call allowed."""
    body = {"config_id": config_id, "session_id": f"legit-{tag}", "events": [call(1, "search", {"q": f"legit {tag}"})]}
    started = time.perf_counter()
    try:
        r = http.post(EVENTS, json=body)
        ok = r.status_code == 200 and r.json()["events"][0]["allowed"] is True
    except (httpx.HTTPError, ValueError, KeyError):
        ok = False
    return time.perf_counter() - started, ok


def legit_requests(server: Server, config_id: str, n: int, tag: str) -> dict[str, Any]:
    """`n` legitimate requests one after the other: latency figures and failures."""
    latencies, failed = [], 0
    with legit_client(server) as http:
        for i in range(n):
            seconds, ok = legit_request(http, config_id, f"{tag}-{i}")
            latencies.append(seconds)
            failed += not ok
    return {**summary(latencies), "failed": failed}


def legit_held(legit: dict[str, Any]) -> bool:
    return legit["n"] > 0 and legit["failed"] == 0 and legit["max_ms"] < LEGIT_LIMIT_S * 1000


class LegitLoop:
    """Legitimate requests back to back on a thread while in the block (at least `minimum`):
    globex's events, each on a new connection (`request` says which)."""

    def __init__(self, server: Server, config_id: str, tag: str, minimum: int = 5) -> None:
        self.server, self.config_id, self.tag, self.minimum = server, config_id, tag, minimum
        self.latencies: list[float] = []
        self.statuses: Counter = Counter()
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def request(self, http: httpx.Client, i: int) -> tuple[int | str, bool]:
        """One request: its status, and whether it was answered as a good call is."""
        _, ok = legit_request(http, self.config_id, f"{self.tag}-{i}")
        return ("ok" if ok else "failed"), ok

    def _run(self) -> None:
        with legit_client(self.server) as http:
            for i in itertools.count():
                if self._stop.is_set() and i >= self.minimum:
                    return
                started = time.perf_counter()
                try:
                    status, ok = self.request(http, i)
                except (httpx.HTTPError, ValueError) as exc:
                    status, ok = type(exc).__name__, False
                self.latencies.append(time.perf_counter() - started)
                self.statuses[str(status)] += 1
                self.failed += not ok

    def __enter__(self) -> LegitLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def figures(self) -> dict[str, Any]:
        return {**summary(self.latencies), "failed": self.failed}


def chat(server: Server, config_id: str, events: list[dict[str, Any]], token: str) -> list[dict[str, Any]]:
    """Context events through /v1/chat/completions, at most MAX_EVENTS per request (each event
    names its session): every verdict, in order."""
    verdicts: list[dict[str, Any]] = []
    with httpx.Client(base_url=server.base, headers=bearer(token), timeout=300) as http:
        for i in range(0, len(events), MAX_EVENTS):
            body = {
                "model": "m",
                "guardrails": {"config_id": config_id},
                "messages": [{"role": "context", "content": {"agent_breaker_events": events[i : i + MAX_EVENTS]}}],
            }
            r = http.post(CHAT, json=body)
            if r.status_code != 200:
                raise RuntimeError(f"chat request answered {r.status_code}: {r.text[:300]}")
            verdicts.extend(json.loads(r.json()["choices"][0]["message"]["content"])["events"])
    return verdicts


def failing_pairs(tool: str, sessions: list[str], error: str = OUTAGE) -> list[dict[str, Any]]:
    """A failing call of `tool` in each session (a dependency's outage: it counts for the breaker)."""
    events: list[dict[str, Any]] = []
    for i, s in enumerate(sessions):
        events.append({**call(i, tool, {"n": i}), "session_id": s})
        events.append({**result(i, tool, error=error), "session_id": s})
    return events


def metric_samples(server: Server, token: str = SCRAPER) -> list[tuple[str, dict[str, str], float]]:
    r = httpx.get(server.base + "/metrics", headers=bearer(token), timeout=30)
    r.raise_for_status()
    return [(s.name, s.labels, s.value) for family in text_string_to_metric_families(r.text) for s in family.samples]


def sid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# ----------------------------------------------------------------------------- 1. slow heads


def open_connections(server: Server, n: int, first_bytes: bytes) -> tuple[list[socket.socket], int]:
    """`n` connections that each send `first_bytes` and nothing more; and how many could not be opened."""
    socks, failed = [], 0
    for _ in range(n):
        try:
            s = socket.create_connection(address(server), timeout=5)
            s.sendall(first_bytes)
            socks.append(s)
        except OSError:
            failed += 1
    return socks, failed


@dataclass
class Reply:
    """What the server sent on a connection, and when it closed it (seconds since the watch began)."""

    data: bytes = b""
    answered_after_s: float | None = None
    closed_after_s: float | None = None

    @property
    def status(self) -> str:
        parts = self.data.split(b" ", 2)
        if not self.data:
            return "none"
        return parts[1].decode("ascii", "replace") if len(parts) > 1 and self.data.startswith(b"HTTP/") else "other"


def watch(socks: list[socket.socket], wait_s: float, *, until_closed: bool = False) -> dict[socket.socket, Reply]:
    """Every connection waited on at once, for at most `wait_s`: until each has been answered (or
    closed), or with `until_closed` until each is closed. A reply per connection."""
    replies = {s: Reply() for s in socks}
    started = time.monotonic()

    def done(r: Reply) -> bool:
        return r.closed_after_s is not None or (not until_closed and r.answered_after_s is not None)

    with selectors.DefaultSelector() as sel:
        for s in socks:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        pending = len(socks)
        while pending:
            left = started + wait_s - time.monotonic()
            if left <= 0:
                break
            for key, _ in sel.select(timeout=left):
                s = key.fileobj
                assert isinstance(s, socket.socket)
                r = replies[s]
                try:
                    chunk = s.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:  # reset
                    chunk = b""
                now = time.monotonic() - started
                if chunk:
                    r.data += chunk
                    r.answered_after_s = r.answered_after_s if r.answered_after_s is not None else now
                else:
                    r.closed_after_s = now
                    sel.unregister(s)
                if done(r):
                    pending -= 1
                    if r.closed_after_s is None:
                        sel.unregister(s)
    return replies


def closes(replies: dict[socket.socket, Reply]) -> dict[str, Any]:
    """How many the server closed, and after how long (s)."""
    times = sorted(r.closed_after_s for r in replies.values() if r.closed_after_s is not None)
    return {
        "closed": len(times),
        "still_open": len(replies) - len(times),
        "first_closed_after_s": round(times[0], 1) if times else None,
        "last_closed_after_s": round(times[-1], 1) if times else None,
    }


def slow_heads(bench: Bench, config: str) -> None:
    args = bench.args
    with serving(bench) as srv:
        started = time.monotonic()
        with PeakRss(srv) as memory:
            attackers, not_opened = open_connections(srv, args.slow_heads, HALF_HEAD)
            opened_s = time.monotonic() - started
            legit = legit_requests(srv, CONFIGS[config], args.legit, "heads")
            fds = len(os.listdir(f"/proc/{srv.proc.pid}/fd"))
            at_end = watch(attackers, 0.5)
            elapsed = time.monotonic() - started
            # then the head timeout (10 s by default) closes them
            later = watch(attackers, args.head_timeout_s + 5 - (time.monotonic() - started), until_closed=True)
            reclaimed = time.monotonic() - started
        for s in attackers:
            s.close()
        cap = re.search(r"at most \d+ connections \(\d+ file descriptors\)", srv.log())
    closed_at_end = sum(1 for r in at_end.values() if r.closed_after_s is not None)
    figures = {
        "attack_connections": args.slow_heads,
        "not_opened": not_opened,
        "opened_in_s": round(opened_s, 2),
        "legit": legit,
        "held_open_at_end": len(attackers) - closed_at_end,
        "closed_by_server_at_end": closed_at_end,
        "seconds_since_attack_began": round(elapsed, 2),
        "server_fds_while_held": fds,
        "server_limits": cap.group(0) if cap else None,
        "after_head_timeout": {**closes(later), "waited_s_since_attack_began": round(reclaimed, 1)},
        "answers_sent": dict(Counter(r.status for r in later.values())),
        "rss_bytes": {"start": memory.start, "peak": memory.peak},
    }
    bench.record("slow_heads", config, f"every legit request answered 200 within {LEGIT_LIMIT_S:g} s", legit_held(legit), figures)


# ----------------------------------------------------------------------------- 2. stalled bodies


def stalled_body(server: Server, config_id: str, partial_bytes: int, token: str | None = ACME) -> socket.socket | None:
    """A connection declaring a 1 MiB body (with `token`, or none) and sending `partial_bytes` of it."""
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    head = (
        f"POST {EVENTS} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}"
        f"Content-Type: application/json\r\nContent-Length: {BODY_BYTES}\r\n\r\n"
    ).encode()
    body = f'{{"config_id": "{config_id}", "session_id": "'.encode() + b"x" * partial_bytes
    try:
        s = socket.create_connection(address(server), timeout=5)
    except OSError:
        return None
    with contextlib.suppress(OSError):  # refused at once: the server may stop reading before the body is sent
        s.sendall(head + body)
    return s


def stalled_bodies(bench: Bench, config: str) -> None:
    args = bench.args
    partial = min(args.stalled_partial_kib * 1024, BODY_BYTES - 1024)
    with serving(bench) as srv:
        with PeakRss(srv) as memory:
            started = time.monotonic()
            opened = [stalled_body(srv, CONFIGS[config], partial) for _ in range(args.stalled)]
            stalled = [s for s in opened if s is not None]
            sent_s = time.monotonic() - started
            at_once = watch(stalled, 1.0)  # what the server answered at once (503: past the token's slots)
            held = [s for s in stalled if at_once[s].answered_after_s is None and at_once[s].closed_after_s is None]
            legit = legit_requests(srv, CONFIGS[config], args.legit, "bodies")
            peak_while_held = memory.peak
            # the held ones are answered at the body timeout (30 s by default); every one is closed some time
            later = watch(stalled, args.body_timeout_s + 10 - (time.monotonic() - started), until_closed=True)
            waited_s = time.monotonic() - started
            rss_after = rss_bytes(memory.pids)
        for s in stalled:
            s.close()
    refused = [s for s in stalled if s not in held]
    figures = {
        "stalled_connections": args.stalled,
        "not_opened": args.stalled - len(stalled),
        "declared_bytes": BODY_BYTES,
        "sent_bytes_each": partial,
        "sent_in_s": round(sent_s, 2),
        "accepted": len(held),
        "refused_503": sum(1 for s in refused if at_once[s].status == "503"),
        "answered_at_once": dict(Counter(at_once[s].status for s in refused)),
        "timed_out_408": sum(1 for s in held if later[s].status == "408"),
        "held_answered_later": dict(Counter(later[s].status for s in held)),
        "held_closed": closes({s: later[s] for s in held}),
        "refused_closed": closes({s: later[s] for s in refused}),
        "watched_for_s": round(waited_s, 1),
        "legit": legit,
        "rss_bytes": {"start": memory.start, "peak_while_held": peak_while_held, "peak": memory.peak, "after": rss_after},
    }
    bench.record(
        "stalled_bodies", config, f"every legit request answered 200 within {LEGIT_LIMIT_S:g} s", legit_held(legit), figures
    )


def refused_bodies(bench: Bench, config: str) -> None:
    """Not one of the seven: connections with no token that declare a 1 MiB body and send part
    of it. Each is refused (401) before its body is read; what does the server hold meanwhile?"""
    args = bench.args
    partial = min(args.stalled_partial_kib * 1024, BODY_BYTES - 1024)
    with serving(bench) as srv:
        with PeakRss(srv) as memory:
            started = time.monotonic()
            opened = [stalled_body(srv, CONFIGS[config], partial, token=None) for _ in range(args.refused)]
            conns = [s for s in opened if s is not None]
            sent_s = time.monotonic() - started
            at_once = watch(conns, 1.0)
            fds = len(os.listdir(f"/proc/{srv.proc.pid}/fd"))
            rss_held = rss_bytes(memory.pids)
            legit = legit_requests(srv, CONFIGS[config], args.legit, "refused")
            later = watch(conns, args.head_timeout_s + 5 - (time.monotonic() - started), until_closed=True)
            rss_after = rss_bytes(memory.pids)
        for s in conns:
            s.close()
    growth = memory.peak - memory.start
    figures = {
        "connections": args.refused,
        "not_opened": args.refused - len(conns),
        "declared_bytes": BODY_BYTES,
        "sent_bytes_each": partial,
        "sent_in_s": round(sent_s, 2),
        "answered_at_once": dict(Counter(r.status for r in at_once.values())),
        "server_fds_while_held": fds,
        "closed": closes(later),
        "legit": legit,
        "rss_bytes": {"start": memory.start, "while_held": rss_held, "peak": memory.peak, "after_closed": rss_after},
        "rss_growth_per_connection": round(growth / max(len(conns), 1)),
    }
    limit = 16 + args.slack_mib
    held = legit_held(legit) and growth <= limit << 20
    criterion = (
        f"every legit request answered 200 within {LEGIT_LIMIT_S:g} s, and peak RSS growth <= {limit} MiB (the 16 MiB the"
        f" README bounds one token's stalled bodies to, + {args.slack_mib} MiB; these connections have no token at all)"
    )
    bench.record("refused_bodies", config, criterion, held, figures)


# ----------------------------------------------------------------------------- 3. session memory


class Ids:
    """Distinct order ids across the whole run."""

    def __init__(self) -> None:
        self._next = itertools.count(10_000_000)

    def text(self, n: int) -> str:
        return "Orders found: " + " ".join(f"ORD-{next(self._next)}" for _ in range(n))


def heavy_sessions(prefix: str, n: int, ids: Ids, ids_per_result: int, calls: int = 3) -> Iterator[list[dict[str, Any]]]:
    """Batches of context events: `n` sessions, each `calls` tool calls whose results cite
    `ids_per_result` distinct ids; whole sessions per batch, at most MAX_EVENTS events and
    about 900 KB per request."""
    per_result = 14 * ids_per_result + 200
    per_batch = max(1, min(MAX_EVENTS // (2 * calls), 900_000 // (calls * per_result)))
    for first in range(0, n, per_batch):
        batch: list[dict[str, Any]] = []
        for j in range(first, min(n, first + per_batch)):
            s = f"{prefix}-{j}"
            for k in range(calls):
                batch.append({**call(k, "get_orders", {"page": k}), "session_id": s})
                batch.append({**result(k, "get_orders", ok=True, payload={"text": ids.text(ids_per_result)}), "session_id": s})
        yield batch


def flood_sessions(srv: Server, config_id: str, prefix: str, n: int, ids: Ids, ids_per_result: int) -> tuple[float, int]:
    """acme's sessions: seconds taken, and results not accepted."""
    started, refused = time.perf_counter(), 0
    for batch in heavy_sessions(prefix, n, ids, ids_per_result):
        refused += sum(1 for v in chat(srv, config_id, batch, ACME) if v.get("accepted") is False)
    return time.perf_counter() - started, refused


def flood_in_parts(
    srv: Server, config_id: str, prefix: str, n: int, ids: Ids, ids_per_result: int, parts: int = 4
) -> tuple[float, int, list[list[int]]]:
    """flood_sessions in `parts` parts: seconds, results not accepted, and [sessions so far,
    RSS] after each part (does the RSS level off?)."""
    pids = process_tree(srv.proc.pid)
    seconds, refused, done, checkpoints = 0.0, 0, 0, []
    for part in range(parts):
        size = n * (part + 1) // parts - done
        took, not_accepted = flood_sessions(srv, config_id, f"{prefix}{part}", size, ids, ids_per_result)
        seconds, refused, done = seconds + took, refused + not_accepted, done + size
        checkpoints.append([done, rss_bytes(pids)])
    return seconds, refused, checkpoints


def redis_key_bytes(bench: Bench) -> int:
    """What the run's own keys (ab:* in --redis-db) take in Redis (MEMORY USAGE, summed): the
    server-wide used_memory moves with whatever else uses that Redis."""
    client = redis.Redis.from_url(db_url(bench.args.redis_db))
    try:
        return sum(client.memory_usage(key) or 0 for key in client.scan_iter(match="ab:*", count=1000))
    finally:
        client.close()


def session_weight(bench: Bench, config: str) -> None:
    """The first part: RSS (and Redis memory) per heavy session."""
    args = bench.args
    ids = Ids()
    with serving(bench) as srv:
        config_id = CONFIGS[config]
        flood_sessions(srv, config_id, "warm", 16, ids, args.ids)  # first use: imports, caches
        pids = process_tree(srv.proc.pid)
        before, redis_before = rss_bytes(pids), redis_key_bytes(bench)
        with PeakRss(srv) as memory:
            seconds, refused, checkpoints = flood_in_parts(srv, config_id, "heavy", args.sessions, ids, args.ids)
        after, redis_after = rss_bytes(pids), redis_key_bytes(bench)
        sessions = {name: value for name, _, value in metric_samples(srv) if name.startswith("agent_breaker_sessions")}
    per_session = (after - before) / args.sessions
    first_part = (checkpoints[0][1] - before) / max(checkpoints[0][0], 1)
    bench.per_session_bytes[config] = per_session
    figures = {
        "sessions": args.sessions,
        "tool_calls_per_session": 3,
        "ids_per_result": args.ids,
        "seconds": round(seconds, 1),
        "sessions_per_s": round(args.sessions / seconds, 1),
        "results_refused": refused,
        "rss_bytes": {"before": before, "after": after, "peak": memory.peak},
        "rss_bytes_per_session": round(per_session),
        "rss_bytes_per_session_first_quarter": round(first_part),
        "rss_checkpoints": [[0, before], *checkpoints],
        "redis_key_bytes_per_session": round((redis_after - redis_before) / args.sessions),
        "sessions_metrics": sessions,
    }
    bench.record("session_weight", config, "figures only", None, figures)


def session_budget(bench: Bench, config: str) -> None:
    """The second part: a flood past a small `sessions.max_bytes`."""
    args = bench.args
    budget = args.budget_mib << 20
    weight = bench.per_session_bytes.get("memory") or 500_000.0
    n = max(100, min(args.budget_max_sessions, math.ceil(args.budget_factor * budget / max(weight, 1.0))))
    slack = budget // 4 + (args.slack_mib << 20)
    config_id = CONFIGS[config]
    ids = Ids()
    with serving(bench, sessions={"max_bytes": budget}) as srv:
        flood_sessions(srv, config_id, "warm", 16, ids, args.ids)
        victim = sid("victim")
        for i in range(3):  # three identical failures: the fourth is warned of, if the session is kept
            srv.verdicts(
                victim, call(i, "run_sql"), result(i, "run_sql", error=CALL_ERROR), config_id=config_id, headers=bearer(GLOBEX)
            )
        with PeakRss(srv) as memory:
            seconds, refused, checkpoints = flood_in_parts(srv, config_id, "flood", n, ids, args.ids)
        started = time.perf_counter()
        r = srv.events(victim, call(3, "run_sql"), config_id=config_id, headers=bearer(GLOBEX))
        victim_s = time.perf_counter() - started
        verdict = r.json()["events"][0] if r.status_code == 200 else {}
        with legit_client(srv) as http:
            fresh_s, fresh_ok = legit_request(http, config_id, "after-flood")
        sessions = {name: value for name, _, value in metric_samples(srv) if name.startswith("agent_breaker_sessions")}
    growth = memory.peak - memory.start
    kept = verdict.get("heuristic") == "identical_failure"
    figures = {
        "budget_bytes": budget,
        "slack_bytes": slack,
        "flood_sessions": n,
        "flood_bytes_estimated": round(n * weight),
        "flood_seconds": round(seconds, 1),
        "results_refused": refused,
        "rss_bytes": {"baseline": memory.start, "peak": memory.peak, "peak_growth": growth},
        "rss_growth_over_budget": round(growth / budget, 2),
        "rss_checkpoints": [[0, memory.start], *checkpoints],
        "rss_growth_in_last_quarter": checkpoints[-1][1] - checkpoints[-2][1] if len(checkpoints) > 1 else None,
        "victim_status": r.status_code,
        "victim_ms": round(victim_s * 1000, 1),
        "victim_state_kept": kept,
        "victim_verdict": {k: verdict.get(k) for k in ("allowed", "heuristic", "severity")},
        "fresh_session_ms": round(fresh_s * 1000, 1),
        "fresh_session_ok": fresh_ok,
        "sessions_metrics": sessions,
    }
    held = growth <= budget + slack and r.status_code == 200 and victim_s < LEGIT_LIMIT_S and fresh_ok and fresh_s < LEGIT_LIMIT_S
    criterion = (
        f"peak RSS growth <= budget + slack (25% of the budget: the size estimate's stated accuracy, + {args.slack_mib} MiB)"
        f" and globex's session made before the flood, and a new one, answer 200 within {LEGIT_LIMIT_S:g} s"
    )
    bench.record("session_budget", config, criterion, held, figures)


# ----------------------------------------------------------------------------- 4. huge chat


def huge_chat(bench: Bench, config: str) -> None:
    args = bench.args
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": "search", "arguments": f'{{"q": {i}}}'}}
        for i in range(args.tool_calls)
    ]
    body = {
        "model": "m",
        "guardrails": {"config_id": NATIVE_CONFIG},
        "messages": [
            {"role": "context", "content": {"session_id": sid("huge")}},
            {"role": "user", "content": "look everything up"},
            {"role": "assistant", "content": "", "tool_calls": calls},
        ],
    }
    raw = json.dumps(body).encode()
    with serving(bench) as srv, PeakRss(srv) as memory, LegitLoop(srv, CONFIGS[config], "huge") as other:
        started = time.perf_counter()
        r = httpx.post(srv.base + CHAT, content=raw, headers={**bearer(ACME), "Content-Type": "application/json"}, timeout=120)
        huge_s = time.perf_counter() - started
    legit = other.figures()
    figures = {
        "tool_calls": args.tool_calls,
        "body_bytes": len(raw),
        "target_config": NATIVE_CONFIG,
        "status": r.status_code,
        "answer": r.text[:200],
        "ms": round(huge_s * 1000, 1),
        "legit_meanwhile": legit,
        "rss_bytes": {"start": memory.start, "peak": memory.peak},
    }
    held = r.status_code == 413 and huge_s < LEGIT_LIMIT_S and legit_held(legit)
    criterion = f"refused 413 within {LEGIT_LIMIT_S:g} s, and globex's requests meanwhile answered 200 within {LEGIT_LIMIT_S:g} s"
    bench.record("huge_chat", config, criterion, held, figures)


# ----------------------------------------------------------------------------- 5. incident flood


def incident_outcomes(srv: Server) -> dict[str, float]:
    return {
        labels["outcome"]: value
        for name, labels, value in metric_samples(srv)
        if name == "agent_breaker_incidents_total" and labels.get("sink") == "webhook"
    }


def incident_flood(bench: Bench, config: str) -> None:
    args = bench.args
    config_id = CONFIGS[config]
    with receiving() as receiver, serving(bench, env={"AGENT_BREAKER_INCIDENT_WEBHOOK": receiver.url}) as srv:
        # acme opens its own breaker of a junk tool; each call it then makes is refused: a trip
        chat(srv, config_id, failing_pairs("junk_api", [sid("down") for _ in range(5)]), ACME)
        repeated = sid("repeat")
        junk = [{**call(i, "junk_api", {"n": i}), "session_id": repeated if i % 2 else sid("junk")} for i in range(args.trips)]
        started = time.perf_counter()
        first = chat(srv, config_id, junk[: len(junk) // 2], ACME)
        # meanwhile globex's payments_api breaker opens (five outages in a row)
        opened_at = time.monotonic()
        victim = chat(srv, config_id, failing_pairs("payments_api", [sid("pay") for _ in range(5)]), GLOBEX)
        second = chat(srv, config_id, junk[len(junk) // 2 :], ACME)
        flood_s = time.perf_counter() - started

        delivered = receiver.wait_for(lambda: victim_incident_of(receiver.json_bodies()) is not None, args.incident_wait_s)
        delivered_s = time.monotonic() - opened_at
        time.sleep(1.0)  # the sink's last deliveries, for the counts
        outcomes = incident_outcomes(srv)
        bodies = receiver.json_bodies()
    trips = Counter(v.get("heuristic") for v in first + second)
    kinds = Counter(f"{d.get('kind')}:{d.get('tenant')}" for d in bodies)
    incident = victim_incident_of(bodies)
    figures = {
        "junk_trips_sent": args.trips,
        "junk_verdicts": dict(trips),
        "flood_seconds": round(flood_s, 2),
        "victim_breaker_opened": bool(victim) and victim[-1].get("accepted") is True,
        "victim_incident_delivered": delivered,
        "victim_incident_event": incident.get("event") if incident else None,
        "victim_delivered_after_s": round(delivered_s, 2) if delivered else None,
        "received_by_kind_and_tenant": dict(kinds),
        "sink_outcomes": outcomes,
    }
    criterion = f"globex's payments_api breaker incident delivered to the webhook within {args.incident_wait_s:g} s"
    bench.record("incident_flood", config, criterion, delivered, figures)


def victim_incident_of(bodies: list[dict[str, Any]]) -> dict[str, Any] | None:
    for d in bodies:
        if d.get("kind") == "breaker" and d.get("tool") == "payments_api" and d.get("tenant") == "globex":
            return d
    return None


# ----------------------------------------------------------------------------- 6. escalation flood


def escalations(srv: Server, config_id: str, **params: str) -> httpx.Response:
    return httpx.get(srv.base + ESCALATIONS, params={"config_id": config_id, **params}, headers=bearer(ADMIN), timeout=60)


def escalation_flood(bench: Bench, config: str) -> None:
    args = bench.args
    config_id = CONFIGS[config]
    with serving(bench) as srv:
        # each tenant's enrich breaker opens: its calls then escalate (fallback tier `escalate`)
        for token in (ACME, GLOBEX):
            chat(srv, config_id, failing_pairs("enrich", [sid("down") for _ in range(5)]), token)
        flood = [{**call(1, "enrich", {"lead": i}), "session_id": sid("lead")} for i in range(args.escalations)]
        started = time.perf_counter()
        verdicts = chat(srv, config_id, flood[: len(flood) // 2], ACME)
        [victim] = chat(srv, config_id, [{**call(1, "enrich", {"lead": "vip"}), "session_id": sid("victim")}], GLOBEX)
        verdicts += chat(srv, config_id, flood[len(flood) // 2 :], ACME)
        flood_s = time.perf_counter() - started
        victim_id = (victim.get("route") or {}).get("escalation_id")
        t = time.perf_counter()
        page = escalations(srv, config_id, status="open")
        page_ms = (time.perf_counter() - t) * 1000
        widest = escalations(srv, config_id, status="open", limit="1000")
        filtered = escalations(srv, config_id, status="open", tenant="globex")
    escalated = sum(1 for v in verdicts if (v.get("route") or {}).get("tier") == "escalate")

    def ids(r: httpx.Response) -> list[str]:
        return [e["id"] for e in r.json().get("escalations", [])] if r.status_code == 200 else []

    first_page, wide = ids(page), ids(widest)
    if filtered.status_code != 200:
        tenant_filter = "unsupported"
    elif all(e.get("tenant") == "globex" for e in filtered.json()["escalations"]):
        tenant_filter = "supported"
    else:
        tenant_filter = "ignored"
    in_filtered = victim_id in ids(filtered) and tenant_filter == "supported"
    figures = {
        "flood_escalations_sent": args.escalations,
        "flood_escalated": escalated,
        "flood_seconds": round(flood_s, 2),
        "escalations_per_s": round(escalated / flood_s, 1) if flood_s else None,
        "victim_escalated": victim_id is not None,
        "first_page_size": len(first_page),
        "first_page_ms": round(page_ms, 1),
        "victim_in_first_page": victim_id in first_page,
        "victim_position_in_newest_1000": wide.index(victim_id) + 1 if victim_id in wide else None,
        "tenant_filter": tenant_filter,
        "tenant_filter_status": filtered.status_code,
        "tenant_filter_rows": len(ids(filtered)),
        "victim_in_tenant_filter": in_filtered,
        "open_records_of_acme": sum(1 for e in widest.json().get("escalations", []) if e.get("tenant") == "acme")
        if widest.status_code == 200
        else None,
        "collapsed_onto_acmes": sum(int(e.get("collapsed") or 0) for e in widest.json().get("escalations", []))
        if widest.status_code == 200
        else None,
    }
    held = victim_id is not None and victim_id in first_page
    criterion = "globex's escalation (made mid-flood) is listed on the default first page of ?status=open"
    bench.record("escalation_flood", config, criterion, held, figures)


# ----------------------------------------------------------------------------- 7. metrics labels


def metrics_labels(bench: Bench, config: str) -> None:
    args = bench.args
    config_id = CONFIGS[config]
    with serving(bench) as srv:
        junk = [f"junk_{i:03d}_{uuid.uuid4().hex[:6]}" for i in range(args.junk_tools)]
        events: list[dict[str, Any]] = []
        for tool in junk:
            events += failing_pairs(tool, [sid("j") for _ in range(args.junk_failures)])
        started = time.perf_counter()
        chat(srv, config_id, events, ACME)
        junk_s = time.perf_counter() - started
        chat(srv, config_id, failing_pairs("payments_api", [sid("pay") for _ in range(5)]), GLOBEX)
        samples = metric_samples(srv)
    states = [
        (labels["tool"], labels["state"], value) for name, labels, value in samples if name == "agent_breaker_breaker_state"
    ]
    tools_with_series = {tool for tool, _, _ in states}
    payments = {state: value for tool, state, value in states if tool == "payments_api"}
    opened = sum(
        value
        for name, labels, value in samples
        if name == "agent_breaker_breaker_transitions_total" and labels.get("to_state") == "open"
    )
    figures = {
        "junk_tools": args.junk_tools,
        "junk_failures_each": args.junk_failures,
        "junk_seconds": round(junk_s, 1),
        "breakers_opened_total": opened,
        "breaker_state_series": len(states),
        "tools_with_series": len(tools_with_series),
        "junk_tools_with_series": sum(1 for t in tools_with_series if t.startswith("junk_")),
        "other_label": "_other" in tools_with_series,
        "payments_api_series": payments,
    }
    held = payments.get("open") == 1.0
    bench.record("metrics_labels", config, "/metrics has payments_api's breaker-state series, open = 1", held, figures)


# ----------------------------------------------------------------------------- the run


# ----------------------------------------------------------------------------- 9. unread answers


class GatewayLegit(LegitLoop):
    """globex's checks and coding-agent hooks, alternately: the answers by status too (a 503 is
    a busy worker: the gateway would retry, and a hook error lets the call run)."""

    def request(self, http: httpx.Client, i: int) -> tuple[int | str, bool]:
        session = f"legit-{self.tag}-{i}"
        if i % 2:
            hook = {
                "session_id": session,
                "hook_event_name": "PreToolUse",
                "tool_name": "Bash",
                "tool_input": {"command": f"ls legit-{i}"},
            }
            r = http.post(HOOK, params={"config_id": self.config_id}, json=hook)
            return r.status_code, r.status_code == 200 and "deny" not in r.text
        body = {"config_id": self.config_id, "session_id": session, "event": call(1, "search", {"q": session})}
        r = http.post(CHECK, json=body)
        return r.status_code, r.status_code == 200 and r.json().get("allowed") is True

    def figures(self) -> dict[str, Any]:
        return {**summary(self.latencies), "failed": self.failed, "statuses": dict(self.statuses)}


def gateway_held(legit: dict[str, Any], memory: PeakRss) -> bool:
    """Issue 39's criterion: every check and hook of the other tenant answered (200, the call
    allowed) within LEGIT_LIMIT_S, none 503; the server's RSS within RSS_LIMIT_BYTES of its start."""
    return legit_held(legit) and "503" not in legit["statuses"] and memory.peak - memory.start <= RSS_LIMIT_BYTES


def in_flight(srv: Server) -> float:
    return sum(v for name, _, v in metric_samples(srv) if name == "agent_breaker_gateway_in_flight")


def pipelined(path: str, bodies: list[dict[str, Any]], token: str) -> bytes:
    """Requests written back to back, as a pipelining client sends them."""
    out = []
    for body in bodies:
        data = json.dumps(body).encode()
        out.append(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
    return b"".join(out)


def unread_connection(server: Server) -> socket.socket | None:
    """A connection that takes in as little as it can (a small receive buffer) and reads nothing."""
    try:
        s = socket.create_connection(address(server), timeout=5)
    except OSError:
        return None
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.setblocking(False)
    return s


def send_while(
    socks: dict[socket.socket, bytes], seconds: float, *, repeat: bool, every_s: float = 0.0
) -> dict[socket.socket, dict[str, Any]]:
    """Each connection's bytes written as fast as the server takes them in, for `seconds` (with
    `repeat`, again, at most once every `every_s`): per connection, the bytes sent and when the
    server closed it."""
    sent = {s: {"bytes": 0, "closed_after_s": None} for s in socks}
    offset = dict.fromkeys(socks, 0)
    due: dict[socket.socket, float] = {}  # connections waiting to send their bytes again
    started = time.monotonic()
    with selectors.DefaultSelector() as sel:
        for s in socks:
            sel.register(s, selectors.EVENT_WRITE)
        while (sel.get_map() or due) and time.monotonic() - started < seconds:
            now = time.monotonic()
            for s in [s for s, at in due.items() if at <= now]:
                del due[s]
                sel.register(s, selectors.EVENT_WRITE)
            for key, _ in sel.select(timeout=0.05) if sel.get_map() else ():
                s = key.fileobj
                assert isinstance(s, socket.socket)
                data = socks[s]
                if offset[s] == 0:
                    sent[s]["last_start"] = time.monotonic()
                try:
                    n = s.send(data[offset[s] : offset[s] + 65_536])
                except BlockingIOError:
                    continue
                except OSError:
                    sent[s]["closed_after_s"] = round(time.monotonic() - started, 2)
                    sel.unregister(s)
                    continue
                sent[s]["bytes"] += n
                offset[s] += n
                if offset[s] >= len(data):
                    offset[s] = 0
                    sel.unregister(s)
                    if repeat:
                        due[s] = sent[s]["last_start"] + every_s
            if not sel.get_map() and due:
                time.sleep(max(0.0, min(due.values()) - time.monotonic()))
    for v in sent.values():
        v.pop("last_start", None)
    return sent


def unread_answers(bench: Bench, config: str) -> None:
    args = bench.args
    config_id = CONFIGS[config]
    phases = {}
    for form, per_write, every_s in (("flood", 100, 0.0), ("paced", MAX_PIPELINED, args.unread_every_s)):
        with serving(bench) as srv:
            conns = [c for c in (unread_connection(srv) for _ in range(args.unread)) if c is not None]
            # each connection's checks: distinct sessions, sent again and again (then refused as loops)
            streams = {
                c: pipelined(
                    CHECK,
                    [
                        {"config_id": config_id, "session_id": f"unread-{i}-{k}", "event": call(k, "search", {"q": k})}
                        for k in range(per_write)
                    ],
                    ACME,
                )
                for i, c in enumerate(conns)
            }
            places: list[float] = []
            sampling = threading.Event()

            def sample(srv: Server = srv, places: list[float] = places, sampling: threading.Event = sampling) -> None:
                while not sampling.wait(0.5):
                    with contextlib.suppress(httpx.HTTPError):
                        places.append(in_flight(srv))

            sampler = threading.Thread(target=sample, daemon=True)
            with PeakRss(srv) as memory, GatewayLegit(srv, config_id, f"unread-{form}", minimum=10) as legit:
                sampler.start()
                sent = send_while(streams, args.unread_s, repeat=True, every_s=every_s)
            sampling.set()
            sampler.join()
            for c in conns:
                c.close()
        phases[form] = {
            "checks_per_write": per_write,
            "write_every_s": every_s,
            "attack_connections": args.unread,
            "opened": len(conns),
            "attack_seconds": args.unread_s,
            "attack_bytes_sent": sum(v["bytes"] for v in sent.values()),
            "closed_by_server": sum(1 for v in sent.values() if v["closed_after_s"] is not None),
            "gateway_places_in_flight_max": max(places, default=None),
            "legit": legit.figures(),
            "rss_bytes": {"start": memory.start, "peak": memory.peak},
            "held": gateway_held(legit.figures(), memory),
        }
    criterion = (
        f"in both forms, globex's checks and hooks answered (allowed) within {LEGIT_LIMIT_S:g} s, none 503; "
        f"RSS within {RSS_LIMIT_BYTES >> 20} MiB"
    )
    bench.record("unread_answers", config, criterion, all(ph["held"] for ph in phases.values()), phases)


# ----------------------------------------------------------------------------- 10. pipelined head


def pipelined_head(bench: Bench, config: str) -> None:
    args = bench.args
    config_id = CONFIGS[config]
    events = [call(k, "search", {"q": k}) for k in range(MAX_EVENTS)]
    with serving(bench) as srv:
        conns = [c for c in (unread_connection(srv) for _ in range(args.heads)) if c is not None]
        lead = {
            c: pipelined(
                EVENTS, [{"config_id": config_id, "session_id": f"head-{i}-{k}", "events": events} for k in range(50)], ACME
            )
            + f"POST {CHECK} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ".encode()
            for i, c in enumerate(conns)
        }
        with PeakRss(srv) as memory, GatewayLegit(srv, config_id, "head", minimum=10) as legit:
            send_while(lead, args.head_s, repeat=False)
            # then the head that never ends, on every connection at once
            sent = send_while(dict.fromkeys(conns, b"v" * 65_536), args.head_s, repeat=True)
        for c in conns:
            c.close()
    figures = {
        "attack_connections": args.heads,
        "opened": len(conns),
        "head_bytes_sent_max": max((v["bytes"] for v in sent.values()), default=0),
        "closed_by_server": sum(1 for v in sent.values() if v["closed_after_s"] is not None),
        "closed_after_s_max": max((v["closed_after_s"] or 0 for v in sent.values()), default=None),
        "legit": legit.figures(),
        "rss_bytes": {"start": memory.start, "peak": memory.peak},
    }
    criterion = (
        f"every head closed; globex's checks and hooks answered (allowed) within {LEGIT_LIMIT_S:g} s, none 503; "
        f"RSS within {RSS_LIMIT_BYTES >> 20} MiB"
    )
    held = figures["closed_by_server"] == len(conns) and gateway_held(figures["legit"], memory)
    bench.record("pipelined_head", config, criterion, held, figures)


RUNNERS: dict[str, Callable[[Bench, str], None]] = {
    "slow_heads": slow_heads,
    "stalled_bodies": stalled_bodies,
    "session_memory": session_weight,  # then session_budget, once every config's weight is known
    "huge_chat": huge_chat,
    "incident_flood": incident_flood,
    "escalation_flood": escalation_flood,
    "metrics_labels": metrics_labels,
    "refused_bodies": refused_bodies,
    "unread_answers": unread_answers,
    "pipelined_head": pipelined_head,
}


def short(rec: dict[str, Any]) -> str:
    """One line of the key figures of a record."""
    f = rec["figures"]

    def lat(d: dict[str, Any]) -> str:
        return f"legit p50/p99/max {d['p50_ms']}/{d['p99_ms']}/{d['max_ms']} ms, {d['failed']} failed"

    def mib(n: float) -> str:
        return f"{n / (1 << 20):.0f} MiB"

    name = rec["name"]
    if name == "slow_heads":
        held = f"{f['held_open_at_end']} of {f['attack_connections']} held open"
        return f"{lat(f['legit'])}; {held}; RSS peak {mib(f['rss_bytes']['peak'])}"
    if name == "stalled_bodies":
        return (
            f"{lat(f['legit'])}; accepted {f['accepted']}, 503 {f['refused_503']}, 408 {f['timed_out_408']}; "
            f"RSS {mib(f['rss_bytes']['start'])} -> peak {mib(f['rss_bytes']['peak'])}"
        )
    if name == "session_weight":
        return (
            f"{f['sessions']} sessions in {f['seconds']} s; RSS {f['rss_bytes_per_session'] / 1024:.0f} KiB/session "
            f"({f['rss_bytes_per_session_first_quarter'] / 1024:.0f} in the first quarter), "
            f"Redis {f['redis_key_bytes_per_session'] / 1024:.0f} KiB/session"
        )
    if name == "session_budget":
        r = f["rss_bytes"]
        return (
            f"{f['flood_sessions']} sessions (~{mib(f['flood_bytes_estimated'])}) into {mib(f['budget_bytes'])}: RSS growth "
            f"{mib(r['peak_growth'])} ({f['rss_growth_over_budget']}x; limit {mib(f['budget_bytes'] + f['slack_bytes'])}); "
            f"victim {f['victim_ms']} ms, "
            f"state kept {f['victim_state_kept']}"
        )
    if name == "huge_chat":
        return f"{f['tool_calls']} tool calls: {f['status']} in {f['ms']} ms; {lat(f['legit_meanwhile'])}"
    if name == "incident_flood":
        return (
            f"victim incident delivered {f['victim_incident_delivered']} ({f['victim_delivered_after_s']} s); "
            f"sink {json.dumps(f['sink_outcomes'])}"
        )
    if name == "escalation_flood":
        return (
            f"{f['flood_escalated']} escalated; victim on first page {f['victim_in_first_page']} "
            f"(position {f['victim_position_in_newest_1000']}); tenant filter {f['tenant_filter']}, victim listed "
            f"{f['victim_in_tenant_filter']}; acme's open records {f['open_records_of_acme']}, "
            f"collapsed {f['collapsed_onto_acmes']}"
        )
    if name == "refused_bodies":
        return (
            f"{lat(f['legit'])}; {json.dumps(f['answered_at_once'])} at once, closed after "
            f"{f['closed']['last_closed_after_s']} s; RSS +{mib(f['rss_bytes']['peak'] - f['rss_bytes']['start'])} "
            f"({f['rss_growth_per_connection'] / 1024:.0f} KiB/connection)"
        )
    if name == "unread_answers":
        return " | ".join(
            f"{form}: {lat(ph['legit'])}, 503 {ph['legit']['statuses'].get('503', 0)}; places max "
            f"{ph['gateway_places_in_flight_max']}, closed {ph['closed_by_server']} of {ph['opened']}; "
            f"RSS {mib(ph['rss_bytes']['start'])} -> peak {mib(ph['rss_bytes']['peak'])}"
            for form, ph in f.items()
        )
    if name == "pipelined_head":
        g = f["legit"]
        return (
            f"{lat(g)}, 503 {g['statuses'].get('503', 0)}; head sent max {mib(f['head_bytes_sent_max'])}, "
            f"closed {f['closed_by_server']} of {f['opened']}; "
            f"RSS {mib(f['rss_bytes']['start'])} -> peak {mib(f['rss_bytes']['peak'])}"
        )
    if name == "metrics_labels":
        return (
            f"{f['breakers_opened_total']:.0f} breakers opened; {f['tools_with_series']} tools with series; "
            f"payments_api {f['payments_api_series']}"
        )
    return ""


def main(argv: list[str] | None = None) -> int:
    assert __doc__
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attacks", default=",".join(ATTACKS), help="comma-separated, of: " + ", ".join(ATTACKS))
    ap.add_argument("--configs", default="memory,redis", help="comma-separated, of: memory, redis")
    ap.add_argument("--legit", type=int, default=50, help="legitimate requests measured during an attack")
    ap.add_argument("--slow-heads", type=int, default=1100, help="connections holding half a request head")
    ap.add_argument("--stalled", type=int, default=300, help="connections stalling a declared 1 MiB body")
    ap.add_argument("--refused", type=int, default=1000, help="connections without a token that declare a 1 MiB body")
    ap.add_argument(
        "--head-timeout-s", type=float, default=10.0, help="the server's head timeout (its default): how long to wait"
    )
    ap.add_argument("--stalled-partial-kib", type=int, default=512, help="what each stalled body sends of its 1 MiB")
    ap.add_argument(
        "--body-timeout-s", type=float, default=30.0, help="the server's body timeout (its default): how long to wait"
    )
    ap.add_argument("--sessions", type=int, default=2000, help="heavy sessions for the RSS per session")
    ap.add_argument("--ids", type=int, default=1000, help="distinct ids each tool result cites")
    ap.add_argument("--budget-mib", type=int, default=64, help="sessions.max_bytes of the budget flood, MiB")
    ap.add_argument("--budget-factor", type=float, default=3.0, help="the flood's sessions weigh this many budgets")
    ap.add_argument("--budget-max-sessions", type=int, default=3000, help="at most this many flood sessions")
    ap.add_argument("--slack-mib", type=int, default=32, help="RSS slack over the budget besides its 25%%, MiB")
    ap.add_argument("--tool-calls", type=int, default=10_000, help="native tool calls in the huge chat request")
    ap.add_argument("--trips", type=int, default=1200, help="junk trips of the incident flood")
    ap.add_argument("--incident-wait-s", type=float, default=10.0, help="how long the victim's incident may take")
    ap.add_argument("--escalations", type=int, default=2000, help="escalations of the flood")
    ap.add_argument("--junk-tools", type=int, default=200, help="made-up tools whose breakers open")
    ap.add_argument("--junk-failures", type=int, default=5, help="failures of each junk tool (5 open its breaker)")
    ap.add_argument("--unread", type=int, default=270, help="connections that read none of their answers")
    ap.add_argument("--unread-s", type=float, default=15.0, help="how long they send checks (past the write deadline)")
    ap.add_argument(
        "--unread-every-s", type=float, default=4.0, help="the paced form: a connection's next checks after this long"
    )
    ap.add_argument("--heads", type=int, default=8, help="connections sending a pipelined head that never ends")
    ap.add_argument("--head-s", type=float, default=15.0, help="how long each head may be sent")
    ap.add_argument("--redis-db", type=int, default=10, help="the Redis database of the Redis config (its ab:* keys are removed)")
    out_argument(ap, "attacks")
    args = ap.parse_args(argv)
    attacks = [a for a in args.attacks.split(",") if a]
    configs = [c for c in args.configs.split(",") if c]
    unknown = sorted(set(attacks) - set(ATTACKS)) + sorted(set(configs) - set(CONFIGS))
    if unknown:
        ap.error(f"unknown attacks or configs: {unknown}")
    redis.Redis.from_url(db_url(args.redis_db), socket_timeout=2).ping()
    run = Run("bench_attacks", args, argv)
    facts = run.machine
    facts["package_digest_at_start"] = package_digest()
    print(f"agent-breaker serve under attack ({facts['date_utc']}, {facts['cpu_count']} CPUs, Python {facts['python']})")
    print(f"  {'attack':17} {'config':6} {'held':8} figures")
    with tempfile.TemporaryDirectory(prefix="bench-attacks-") as work:
        bench = Bench(args, Path(work))
        for attack in attacks:
            for config in configs:
                RUNNERS[attack](bench, config)
            if attack == "session_memory":  # after the weights: the flood's size comes from the in-memory one
                for config in configs:
                    session_budget(bench, config)
    facts["checkout_at_end"] = checkout()
    digests = sorted({r["package_digest"] for r in bench.records})
    facts["package_digests"] = digests
    if len(digests) > 1:
        # the checkout changed under the run: each record names the code its server ran
        print(f"warning: the package changed during the run: its servers ran {len(digests)} versions ({', '.join(digests)})")
    doc = run.write({"attacks": bench.records}, args.out)
    not_held = [f"{r['name']}/{r['config']}" for r in bench.records if r["held"] is False]
    print(f"\n{len(bench.records)} records in {doc['total_seconds']:.0f} s -> {shown(args.out)}")
    print("did not hold: " + (", ".join(not_held) if not_held else "none"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
