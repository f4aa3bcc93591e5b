"""One policy for a hook input on every transport: the hook command (in its own process's guard,
through its daemon, or forwarding to a server) and the hook endpoint give the same decision for
each input of one table: ordinary, asking nothing, malformed, oversized, nested deep, with a bad
id or text that is not Unicode; under `--fail open` and `--fail closed` (`?fail=closed`)."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from test_hooks import CLAUDE_CODE, GEMINI_CLI, post, pre

from agent_breaker.hooks import BLOCK_EXIT, MAX_INPUT_BYTES, refusal

httpx = pytest.importorskip("httpx")

REDIS_DB = 7


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


def _input(agent: str, session: str, **fields: Any) -> bytes:
    return json.dumps({**pre(agent, session, 1, "ls"), **fields}).encode()


#: name -> (agent, the input given a session id); each expected to be decided alike everywhere
CASES: dict[str, tuple[str, Callable[[str], bytes]]] = {
    "ordinary": (CLAUDE_CODE, lambda s: _input(CLAUDE_CODE, s)),
    "ordinary gemini": (GEMINI_CLI, lambda s: _input(GEMINI_CLI, s)),
    "asks nothing": (CLAUDE_CODE, lambda s: json.dumps({"session_id": s, "hook_event_name": "Stop"}).encode()),
    "a failed result": (CLAUDE_CODE, lambda s: json.dumps(post(CLAUDE_CODE, s, 1, "ls", "no such file", 2)).encode()),
    "not json": (CLAUDE_CODE, lambda s: b"{not json"),
    "not an object": (CLAUDE_CODE, lambda s: b"[1, 2]"),
    "no session": (CLAUDE_CODE, lambda s: json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash"}).encode()),
    "arguments not an object": (CLAUDE_CODE, lambda s: _input(CLAUDE_CODE, s, tool_input=["ls"])),
    "not utf-8": (CLAUDE_CODE, lambda s: _input(CLAUDE_CODE, s).replace(b'"ls"', b'"l\xffs"')),
    "a lone surrogate": (CLAUDE_CODE, lambda s: _input(CLAUDE_CODE, s).replace(b'"ls"', b'"l\\ud800s"')),
    "a session id of 300 characters": (CLAUDE_CODE, lambda s: _input(CLAUDE_CODE, s, session_id=s + "x" * 300)),
    "a large write": (
        CLAUDE_CODE,
        lambda s: _input(CLAUDE_CODE, s, tool_name="Write", tool_input={"file_path": "/r/a.txt", "content": "y" * 300_000}),
    ),
    "oversized": (
        CLAUDE_CODE,
        lambda s: _input(
            CLAUDE_CODE, s, tool_name="Write", tool_input={"file_path": "/r/a.txt", "content": "y" * MAX_INPUT_BYTES}
        ),
    ),
    "arguments 40 deep": (CLAUDE_CODE, lambda s: _input(CLAUDE_CODE, s, tool_input=_nested(40))),
    "nested 100,000 deep": (CLAUDE_CODE, lambda s: _input(CLAUDE_CODE, s).replace(b'"ls"', b"[" * 100_000 + b"]" * 100_000)),
}
#: what each case comes to: decided by the engine, let through or refused by the fail policy, or refused
EXPECTED = {
    "ordinary": "allowed",
    "ordinary gemini": "allowed",
    "asks nothing": "allowed",
    "a failed result": "allowed",
    "not json": "policy",
    "not an object": "policy",
    "no session": "policy",
    "arguments not an object": "policy",
    "not utf-8": "policy",
    "a lone surrogate": "invalid_event",
    "a session id of 300 characters": "invalid_event",
    "a large write": "allowed",
    "oversized": "oversized",
    "arguments 40 deep": "invalid_event",
    "nested 100,000 deep": "refused",
}


def decision(denied: bool, output: dict[str, Any], reason: str) -> tuple[str, Any]:
    """What the agent does: ("deny", the reason the model reads) or ("allow", the JSON it reads)."""
    return ("deny", reason) if denied else ("allow", output)


def by_command(
    agent: str, raw: bytes, fail: str, state: str, server: str | None = None, *, daemon: bool = False
) -> tuple[str, Any]:
    from agent_breaker.hooks.command import run

    out, err = io.StringIO(), io.StringIO()
    code = run(
        agent, io.BytesIO(raw), out, err, config=None, state=state, server=server, fail_closed=fail == "closed", daemon=daemon
    )
    assert code in (0, BLOCK_EXIT)
    if code == BLOCK_EXIT:
        return decision(True, {}, err.getvalue().strip())
    output = json.loads(out.getvalue())
    reason = refusal(output)  # Gemini CLI reads a refusal from the JSON of an exit 0
    return decision(reason is not None, output, reason or "")


def by_endpoint(client: Any, agent: str, raw: bytes, fail: str) -> tuple[str, Any]:
    r = client.post(f"/v1/hooks/{agent}", content=raw, params={"fail": fail}, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    reason = refusal(r.json())
    return decision(reason is not None, r.json(), reason or "")


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Any]:
    pytest.importorskip("nemoguardrails")
    from _server import served_for_hooks

    with served_for_hooks(tmp_path_factory.mktemp("tokens"), REDIS_DB) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server) -> Iterator[Any]:
    from _server import client_of

    with client_of(server) as c:
        yield c


@pytest.fixture(scope="module")
def daemon_state() -> Iterator[str]:
    """A hook daemon of the module's own, serving on its state file (stopped by its PID)."""
    import contextlib
    import os
    import shutil
    import signal
    import tempfile
    from pathlib import Path

    from test_hook_daemon import wait_serving

    from agent_breaker.hooks import daemon as hook_daemon

    base = tempfile.mkdtemp(prefix="ab-")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_RUNTIME_DIR", base)
        mp.delenv(hook_daemon.DAEMON_ENV, raising=False)
        state = f"sqlite:///{base}/hooks.db"
        path = hook_daemon.socket_path(None, state)
        assert path is not None
        hook_daemon.start(path, None, state)
        wait_serving(path)
        try:
            yield state
        finally:
            for lock in path.parent.glob("hookd-*.lock"):
                pid = lock.read_text().strip()
                if pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGTERM)
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(int(pid), 0)
            shutil.rmtree(base)
            assert not Path(base).exists()


def _comparable(case: str, got: tuple[str, Any]) -> tuple[str, Any]:
    # the fail policy's note names the transport's own words for why; the decision is the same
    kind, what = got
    return (kind, "could not check this call" in what) if EXPECTED[case] == "policy" and kind == "deny" else got


@pytest.mark.parametrize("fail", ["open", "closed"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_command_and_the_endpoint_decide_each_input_alike(case, fail, client, server, daemon_state, tmp_path, monkeypatch):
    from _server import TOKEN

    from agent_breaker import _hook_client as hook_client

    agent, make = CASES[case]
    state = f"sqlite:///{tmp_path}/hooks.db"
    asked = []
    real_ask = hook_client.ask
    monkeypatch.setattr(hook_client, "ask", lambda *a: asked.append(1) or real_ask(*a))
    answers = {
        "command": by_command(agent, make(f"cmd-{uuid.uuid4().hex}"), fail, state),
        "daemon": by_command(agent, make(f"dmn-{uuid.uuid4().hex}"), fail, daemon_state, daemon=True),
    }
    # the daemon's socket is named for the AGENT_BREAKER_* environment: the token comes after it
    monkeypatch.setenv("AGENT_BREAKER_API_TOKEN", TOKEN)
    answers["forwarded"] = by_command(agent, make(f"fwd-{uuid.uuid4().hex}"), fail, state, server=server.base)
    answers["endpoint"] = by_endpoint(client, agent, make(f"end-{uuid.uuid4().hex}"), fail)
    expected = EXPECTED[case]
    # the daemon read it, as the command reads what it decides alone (an oversized input is
    # answered before: the daemon could read no more of it)
    assert asked or expected == "oversized"
    kinds = {how: got[0] for how, got in answers.items()}
    if expected == "allowed" or (expected == "policy" and fail == "open"):
        assert set(kinds.values()) == {"allow"}, answers
        assert len({json.dumps(got[1], sort_keys=True) for got in answers.values()}) == 1, answers
    else:
        assert set(kinds.values()) == {"deny"}, answers
        reasons = {how: got[1] for how, got in answers.items()}
        if expected == "invalid_event":
            assert all("invalid_event" in r for r in reasons.values()), reasons
        elif expected == "refused":
            assert all("nested too deep" in r for r in reasons.values()), reasons
        elif expected == "oversized":  # refused under either policy: a call the guard cannot read
            assert all("more than the guard reads" in r for r in reasons.values()), reasons
        else:
            assert all("could not check this call" in r and "--fail closed" in r for r in reasons.values()), reasons
        # the same words, whichever way the input came (the session ids in them aside)
        assert len({_comparable(case, got)[1] if expected == "policy" else got[1].split(":")[0] for got in answers.values()}) == 1


def test_a_loop_is_cut_at_the_same_call_on_every_transport(client, server, tmp_path, monkeypatch):
    """The same runaway (one failing command again and again) through each transport."""
    from _server import TOKEN

    monkeypatch.setenv("AGENT_BREAKER_API_TOKEN", TOKEN)
    state = f"sqlite:///{tmp_path}/hooks.db"
    cut_at = {}
    for how in ("command", "forwarded", "endpoint"):
        session = f"{how}-{uuid.uuid4().hex}"
        for n in range(1, 12):
            raw = json.dumps(pre(CLAUDE_CODE, session, n, "npm run build")).encode()
            if how == "endpoint":
                got = by_endpoint(client, CLAUDE_CODE, raw, "open")
            else:
                got = by_command(CLAUDE_CODE, raw, "open", state, server=server.base if how == "forwarded" else None)
            if got[0] == "deny":
                cut_at[how] = (n, got[1])
                break
            done = json.dumps(post(CLAUDE_CODE, session, n, "npm run build", "error TS2304", 1)).encode()
            if how == "endpoint":
                by_endpoint(client, CLAUDE_CODE, done, "open")
            else:
                by_command(CLAUDE_CODE, done, "open", state, server=server.base if how == "forwarded" else None)
    assert len(cut_at) == 3 and len(set(cut_at.values())) == 1, cut_at


def test_a_false_claim_at_the_end_of_a_turn_is_refused_alike_on_every_transport(
    client, server, daemon_state, tmp_path, monkeypatch
):
    """A failing test run, then a Stop that says the tests pass: refused with the same reason by
    the command (alone and through its daemon), the command forwarding to a server, and the
    endpoint; the truth, after it, stops."""
    from _server import TOKEN

    monkeypatch.setenv("AGENT_BREAKER_API_TOKEN", TOKEN)
    state = f"sqlite:///{tmp_path}/hooks.db"
    said = {}
    for how in ("command", "daemon", "forwarded", "endpoint"):
        session = f"{how}-{uuid.uuid4().hex}"

        def send(event: dict[str, Any], how: str = how) -> tuple[str, Any]:
            raw = json.dumps(event).encode()
            if how == "endpoint":
                return by_endpoint(client, CLAUDE_CODE, raw, "open")
            where = daemon_state if how == "daemon" else state
            return by_command(
                CLAUDE_CODE, raw, "open", where, server=server.base if how == "forwarded" else None, daemon=how == "daemon"
            )

        send(pre(CLAUDE_CODE, session, 1, "pytest -q"))
        send(post(CLAUDE_CODE, session, 1, "pytest -q", "F.\n1 failed, 1 passed in 0.1s", 1))
        stop = {"session_id": session, "hook_event_name": "Stop", "stop_hook_active": False}
        said[how] = send({**stop, "last_assistant_message": "All tests pass now."})
        truth = send({**stop, "stop_hook_active": True, "last_assistant_message": "One test still fails: 1 failed, 1 passed."})
        assert truth == ("allow", {}), (how, truth)
    assert {kind for kind, _ in said.values()} == {"deny"}, said
    assert len({reason for _, reason in said.values()}) == 1, said
    assert (
        next(iter(said.values()))[1].startswith("agent-breaker (done_claim): ")
        and "exited 1: 1 failed, 1 passed" in said["command"][1]
    )
