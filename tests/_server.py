"""A real `agent-breaker serve` for the security tests: a free loopback port, its own
environment, stderr in a file (the payload test reads it), stopped by PID."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from _ports import free_port
from conftest import CALL_ERROR, REDIS_URL, redis_or_skip

RECEIPT_KEY = "k1:" + "cd" * 32
TOKEN = "admin-token-" + "a" * 24


@dataclass
class Server:
    base: str
    proc: subprocess.Popen
    log_path: Path
    headers: dict[str, str] = field(default_factory=dict)

    def post(self, path: str, body: Any = None, *, headers: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
        return httpx.post(self.base + path, json=body, headers={**self.headers, **(headers or {})}, timeout=60, **kw)

    def post_raw(self, path: str, content: Any, **headers: str) -> httpx.Response:
        """A body sent as it is (bytes, text or chunks), as JSON unless a Content-Type says otherwise."""
        return httpx.post(
            self.base + path, content=content, headers={**self.headers, "Content-Type": "application/json", **headers}, timeout=60
        )

    def events(
        self, session: str, *events: dict[str, Any], config_id: str | None = "agent_breaker", headers: dict | None = None
    ) -> httpx.Response:
        """POST events; `config_id` None: the request names no config."""
        body = {"session_id": session, "events": list(events)} | ({} if config_id is None else {"config_id": config_id})
        return self.post("/v1/agent-breaker/events", body, headers=headers)

    def verdicts(self, session: str, *events: dict[str, Any], **kw: Any) -> list[dict[str, Any]]:
        r = self.events(session, *events, **kw)
        assert r.status_code == 200, r.text
        return r.json()["events"]

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_BREAKER_")}
    env.update(
        {
            "AGENT_BREAKER_RECEIPT_KEYS": RECEIPT_KEY,
            "NEMO_GUARDRAILS_NO_USAGE_STATS": "1",
            "AGENT_BREAKER_FINGERPRINT_SECRET": "security-test-secret",
            # each server's escalations, and the token it generates without one, in files of its own
            "AGENT_BREAKER_ESCALATIONS_DB": os.path.join(tempfile.mkdtemp(prefix="agent-breaker-serve-"), "escalations.db"),
            "AGENT_BREAKER_TOKEN_FILE": os.path.join(tempfile.mkdtemp(prefix="agent-breaker-token-"), "api-token"),
        }
    )
    env.update(extra or {})
    return env


def start(
    extra_env: dict[str, str] | None = None,
    *,
    host: str = "127.0.0.1",
    log_level: str = "warning",
    args: tuple[str, ...] = (),
    token: str | None = None,
    command: tuple[str, ...] = (sys.executable, "-m", "agent_breaker.cli"),
    env: dict[str, str] | None = None,
) -> Server:
    """`command serve` on a free port; its environment `env` as given, else the tests' own with
    `extra_env`."""
    port = free_port()
    log_path = Path(tempfile.mkstemp(prefix="agent-breaker-serve-", suffix=".log")[1])
    env = child_env(extra_env) if env is None else env
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [
                *command,
                "serve",
                "--host",
                host,
                "--port",
                str(port),
                "--log-level",
                log_level,
                *args,
            ],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    server = Server(f"http://127.0.0.1:{port}", proc, log_path, {"Authorization": f"Bearer {token}"} if token else {})
    deadline = time.monotonic() + 90
    generated = Path(env["AGENT_BREAKER_TOKEN_FILE"]) if "AGENT_BREAKER_TOKEN_FILE" in env else None
    while True:
        if not server.headers and generated is not None and generated.exists():
            # no token given: the one the server generated at start (linked in whole)
            server.headers = {"Authorization": f"Bearer {generated.read_text().strip()}"}
        try:
            if httpx.get(server.base + "/v1/agent-breaker/configs", headers=server.headers, timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"server did not start: {server.log()[-3000:]}")
        time.sleep(0.2)


def call(i: int | str, tool: str = "run_sql", args: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    return {
        "type": "ToolCallRequested",
        "call_id": f"c{i}",
        "tool_name": tool,
        "tool_args": {"q": "SELECT 1"} if args is None else args,
        **kw,
    }


def result(i: int | str, tool: str = "run_sql", ok: bool = False, payload: Any = None, **kw: Any) -> dict[str, Any]:
    return {
        "type": "ToolResultReceived",
        "call_id": f"c{i}",
        "tool_name": tool,
        "ok": ok,
        "result": payload,
        "error": None if ok else CALL_ERROR,
        **kw,
    }


@contextlib.contextmanager
def served_with_tenants(
    tokens: dict[str, str], folder: Path, redis_db: int, env: dict[str, str] | None = None
) -> Iterator[Server]:
    """A server whose tokens file maps these tokens to tenants ("*": any), the Redis config's keys
    in a database of the caller's own (emptied before and after), and `env` besides."""
    redis_or_skip()
    tokens_file = folder / "tokens.json"
    tokens_file.write_text(json.dumps(tokens))
    url = db_url(redis_db)
    _flush(url)
    srv = start({"AGENT_BREAKER_API_TOKENS_FILE": str(tokens_file), "REDIS_URL": url, **(env or {})}, token=TOKEN)
    try:
        yield srv
    finally:
        srv.stop()
        _flush(url)


#: the hooks' own token of `served_for_hooks` ($AGENT_BREAKER_HOOK_TOKEN)
HOOK_TOKEN = "hook-token-of-the-agents-hooks-0123"


@contextlib.contextmanager
def served_for_hooks(folder: Path, redis_db: int) -> Iterator[Server]:
    """A server for coding agents' hooks: TOKEN for every tenant (an agent runtime's), and the
    hooks' own token, HOOK_TOKEN (whose prompts restart nothing)."""
    with served_with_tenants({TOKEN: "*"}, folder, redis_db, {"AGENT_BREAKER_HOOK_TOKEN": HOOK_TOKEN}) as srv:
        yield srv


@contextlib.contextmanager
def client_of(server: Server, token: str | None = None) -> Iterator[httpx.Client]:
    """Keep-alive connections to `server`, as an agent's HTTP hooks keep them: with the server's
    own token, or `token`."""
    headers = server.headers if token is None else {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.base, headers=headers, timeout=60) as client:
        yield client


def db_url(db: int) -> str:
    """The test Redis, database `db`."""
    return REDIS_URL.rsplit("/", 1)[0] + f"/{db}"


def _flush(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(match="ab:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()
