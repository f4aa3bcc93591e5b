"""`agent-breaker hook <agent>`: one coding agent's hook call, stdin to stdout, for users who run
no server. The guard's state outlives each hook process in an embedded SQLite file (or, with
`--server URL`, in a running `agent-breaker serve`).

A refused call exits 2 with the reason on stderr (every agent reads that as "blocked, tell the
model why"); anything else exits 0 with the agent's JSON on stdout. When the guard itself fails
(unreadable input, a store or server it cannot reach), `--fail open` (the default) lets the call
go ahead and says why on stderr, `--fail closed` blocks it (exit 2).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import IO

from .. import _hook_client as client
from .._hook_client import DEFAULT_STATE, STATE_ENV
from . import BLOCK_EXIT, CODEX, GEMINI_CLI, MAX_INPUT_BYTES, GuardFailure, HookAnswer, hook_of, oversized, refusal, undecided
from . import daemon as hook_daemon
from . import read as read_input

__all__ = ["DEFAULT_STATE", "STATE_ENV", "main", "run"]
SERVER_TIMEOUT_S = 5.0


def run(
    agent: str,
    stdin: IO[bytes],
    stdout: IO[str],
    stderr: IO[str],
    *,
    config: str | None,
    state: str | None,
    server: str | None,
    fail_closed: bool,
    daemon: bool = True,
) -> int:
    """Answer one hook call; the exit code."""
    raw = _with_exit_status(agent, stdin.read(MAX_INPUT_BYTES + 1))
    try:
        if len(raw) > MAX_INPUT_BYTES:  # decided here on what was read, as every transport does
            out = oversized(raw)
        elif server:  # the server reads the input, as its endpoint reads an HTTP hook's
            out = _forwarded(agent, raw, server, fail_closed)
        else:
            out = _decided(agent, raw, config, state, daemon, fail_closed)
    except ImportError:  # a broken install decides nothing; `agent_breaker.__main__` says so
        raise
    except GuardFailure as exc:
        out = undecided(str(exc), fail_closed=fail_closed, hook=hook_of(agent, raw))
    except Exception as exc:  # a guard that crashes must not decide by accident: the policy does
        out = undecided(f"{type(exc).__name__}: {exc}", fail_closed=fail_closed, hook=hook_of(agent, raw))
    exit_code, err, text = out.printed()
    if err:
        stderr.write(err + "\n")
    stdout.write(text)
    return exit_code


def _with_exit_status(agent: str, raw: bytes) -> bytes:
    """Codex's PostToolUse of a shell command, with the exit status the session's transcript
    recorded (its hook input holds the output only) as `{"output", "exit_code"}`, which every
    reader of hook inputs takes; any other input as it came."""
    if agent != CODEX or len(raw) > MAX_INPUT_BYTES or b"PostToolUse" not in raw:
        return raw
    try:
        payload = json.loads(raw)
    except (ValueError, RecursionError):
        return raw  # the reader answers it as it answers any input it cannot read
    if not (
        isinstance(payload, dict)
        and payload.get("hook_event_name") == "PostToolUse"
        and isinstance(payload.get("tool_response"), str)
        and isinstance(payload.get("transcript_path"), str)
        and isinstance(payload.get("tool_use_id"), str)
    ):
        return raw
    from .._transcripts import codex_exit_code

    code = codex_exit_code(payload["transcript_path"], payload["tool_use_id"])
    if code is None:
        return raw
    payload["tool_response"] = {"output": payload["tool_response"], "exit_code": code}
    return json.dumps(payload).encode()


def _decided(agent: str, raw: bytes, config_path: str | None, state: str | None, daemon: bool, fail_closed: bool) -> HookAnswer:
    config_path, state = client.absolute(config_path, state or os.environ.get(STATE_ENV) or DEFAULT_STATE)
    path = client.socket_path(config_path, state) if daemon else None
    note = ""
    if path is not None:
        try:
            exit_code, err, text = client.ask(path, agent, raw, fail_closed)
            return HookAnswer(json.loads(text) if text else {}, exit_code, err)
        except client.DaemonSlow as exc:  # a daemon runs: decided here, none started
            note = f"agent-breaker: {exc}; decided without it"
        except client.DaemonUnavailable:
            hook_daemon.start(Path(path), config_path, state)
        except client.DaemonFailed as exc:
            raise GuardFailure(str(exc)) from None
    read = read_input(agent, raw, fail_closed=fail_closed)
    if isinstance(read, HookAnswer):
        return read
    from .guard import HookGuard  # the engine, loaded only where the call is decided here

    guard = HookGuard(config_path, state)
    try:
        out = guard.decide(read)
    finally:
        guard.close()
    return replace(out, stderr="\n".join(filter(None, (note, out.stderr)))) if note else out


def _forwarded(agent: str, raw: bytes, server: str, fail_closed: bool) -> HookAnswer:
    """The server's answer (it applies this command's fail policy to an input it cannot read);
    a refusal in its JSON becomes the command's exit code 2."""
    import urllib.error
    import urllib.request

    headers = {"content-type": "application/json"}
    # the hooks' own token first: the server knows its prompts may be the agent's
    token = os.environ.get("AGENT_BREAKER_HOOK_TOKEN") or os.environ.get("AGENT_BREAKER_API_TOKEN")
    if token:
        headers["authorization"] = f"Bearer {token}"
    url = f"{server.rstrip('/')}/v1/hooks/{agent}" + ("?fail=closed" if fail_closed else "")
    request = urllib.request.Request(url, data=raw, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=SERVER_TIMEOUT_S) as response:
            out = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise GuardFailure(f"the server answered {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise GuardFailure(f"the server at {server} did not answer: {exc}") from None
    if not isinstance(out, Mapping):
        raise GuardFailure("the server's answer is not a JSON object")
    reason = refusal(out)
    if reason is None or agent == GEMINI_CLI:  # Gemini CLI reads a refusal from the JSON (see answer)
        return HookAnswer(dict(out))
    return HookAnswer(dict(out), BLOCK_EXIT, reason)


def main(agent: str, *, config: str | None, state: str | None, server: str | None, fail: str, daemon: bool) -> int:
    return run(
        agent,
        sys.stdin.buffer,
        sys.stdout,
        sys.stderr,
        config=config,
        state=state,
        server=server,
        fail_closed=fail == "closed",
        daemon=daemon,
    )
