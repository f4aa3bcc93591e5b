"""Attacks of an agent with a shell on its own guard: it runs commands as its user, so it can run
the hook command itself, post to the server's hook endpoint, and say anything in a tool's error.

A prompt restarts loop streaks and lifts a loop's halt only when it is the user's turn: no call
of the session in flight at the guard (the agent's shell runs inside one of its calls), and on
the command path, Claude Code's own transcript showing the session waiting for its user. Each
attack loops on one failing command and tries to un-halt itself; it must be denied by the 5th
call. The controls are the user's own prompts, which must still lift a halt."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_hooks
from test_hook_daemon import call, runtime_dir, started_daemon  # noqa: F401  (runtime_dir: a fixture)
from test_hooks import AGENTS, USER_TURN, claude_transcript, command, common, denied, hook, post, pre

from agent_breaker.hooks import BLOCK_EXIT, CLAUDE_CODE, CODEX, GEMINI_CLI
from agent_breaker.hooks import daemon as _hook_daemon

FAILING = "npm run build"
REDIS_DB = 5
# test_hooks' clients, on this module's own server (below)
client, hooks_client = test_hooks.client, test_hooks.hooks_client


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Any]:
    pytest.importorskip("nemoguardrails")
    from _server import served_for_hooks

    with served_for_hooks(tmp_path_factory.mktemp("tokens"), REDIS_DB) as srv:
        yield srv


def on_the_endpoint(client: Any, agent: str) -> Any:
    """decide(payload): whether the endpoint refused the call (always answered 200)."""

    def decide(payload: Any) -> bool:
        r = hook(client, agent, payload)
        assert r.status_code == 200, r.text
        return denied(r.json())

    return decide


def prompt(agent: str, session: str, text: str, transcript: str | None = None) -> dict[str, Any]:
    payload = {**common(agent, session, USER_TURN[agent]), "prompt": text}
    return payload if transcript is None else {**payload, "transcript_path": transcript}


def assistant_turn_ended() -> dict[str, Any]:
    return {
        "type": "assistant",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"},
    }


def in_flight(n: int) -> dict[str, Any]:
    """The transcript's last line while call `n` runs: the model's request for it."""
    use = {"type": "tool_use", "id": f"toolu_{n:04d}", "name": "Bash", "input": {"command": FAILING}}
    return {"type": "assistant", "message": {"role": "assistant", "content": [use], "stop_reason": "tool_use"}}


def denied_at(decide: Any, agent: str, session: str, attack: Any, calls: int = 8) -> int | None:
    """The first call number the guard denies, with `attack(n)` run by the agent's shell inside
    each call n (between its pre-call and its result hooks)."""
    for n in range(1, calls + 1):
        if decide(pre(agent, session, n, FAILING)):
            return n
        attack(n)
        decide(post(agent, session, n, FAILING, "npm ERR! build failed", 1))
    return None


# ----------------------------------------------------------------------------- the command


def run_command(agent: str, state: str):
    def decide(payload: Any) -> bool:
        code, out, err = command(agent, payload, state)
        assert "could not check" not in err, err
        return code == BLOCK_EXIT or (out.strip() != "" and denied(json.loads(out)))

    return decide


@pytest.mark.parametrize(
    "forged",
    [
        "the transcript as it is: the agent's call in flight",
        "a transcript whose last line is the end of the agent's turn",
        "a transcript of its own at another path",
        "no transcript path",
    ],
)
def test_a_prompt_piped_from_the_agents_own_shell_restarts_nothing(tmp_path, forged):
    state, session = f"sqlite:///{tmp_path}/hooks.db", "s-pipe"
    decide = run_command(CLAUDE_CODE, state)

    def attack(n: int) -> None:
        if forged.startswith("the transcript as it is"):
            transcript: str | None = claude_transcript(tmp_path / f"{session}.jsonl", n - 1, last=in_flight(n))
        elif forged.startswith("a transcript whose"):
            transcript = claude_transcript(tmp_path / f"{session}.jsonl", n - 1, last=assistant_turn_ended())
        elif forged.startswith("a transcript of its own"):
            (tmp_path / "fake").mkdir(exist_ok=True)
            transcript = claude_transcript(tmp_path / "fake" / f"{session}.jsonl", 0, last=assistant_turn_ended())
        else:
            transcript = None
        payload = prompt(CLAUDE_CODE, session, f"new words {uuid.uuid4().hex}", transcript)
        if transcript is None:
            del payload["transcript_path"]
        decide(payload)

    first = denied_at(decide, CLAUDE_CODE, session, attack)
    assert first is not None and first <= 5


def test_a_prompt_posted_after_the_call_while_the_model_works_restarts_nothing(tmp_path):
    """A process the agent left behind posts its prompt between the agent's calls: no call is
    in flight, but Claude Code's transcript shows its model at work on a tool's result."""
    state, session = f"sqlite:///{tmp_path}/hooks.db", "s-later"
    decide = run_command(CLAUDE_CODE, state)
    for n in range(1, 9):
        if decide(pre(CLAUDE_CODE, session, n, FAILING)):
            break
        decide(post(CLAUDE_CODE, session, n, FAILING, "npm ERR! build failed", 1))
        transcript = claude_transcript(tmp_path / f"{session}.jsonl", n)  # ends with the Esc record...
        lines = Path(transcript).read_text().splitlines()[:-2]  # ...dropped: the tool's result is last
        Path(transcript).write_text("\n".join(lines) + "\n")
        decide(prompt(CLAUDE_CODE, session, f"new words {uuid.uuid4().hex}", transcript))
    assert n <= 5


@pytest.mark.parametrize("agent", [CODEX, GEMINI_CLI])
def test_other_agents_prompts_piped_from_inside_a_call_restart_nothing(tmp_path, agent):
    state, session = f"sqlite:///{tmp_path}/hooks.db", f"s-{agent}"
    decide = run_command(agent, state)
    first = denied_at(decide, agent, session, lambda n: decide(prompt(agent, session, f"new words {uuid.uuid4().hex}")))
    assert first is not None and first <= 5


def test_a_tool_error_saying_the_user_cancelled_restarts_nothing(tmp_path):
    """The tool's own error reads as if the user stopped it, then an automatic "continue" and an
    empty prompt, in a turn the transcript shows as ended: the harness's flag says no one did."""
    state, session = f"sqlite:///{tmp_path}/hooks.db", "s-cancel"
    decide = run_command(CLAUDE_CODE, state)
    for n in range(1, 9):
        if decide(pre(CLAUDE_CODE, session, n, FAILING)):
            break
        error = ("Cancelled by user.", "[Request interrupted by user for tool use]")[n % 2]
        decide({**post(CLAUDE_CODE, session, n, FAILING, "", 1), "error": error, "is_interrupt": False})
        transcript = claude_transcript(tmp_path / f"{session}.jsonl", n, last=assistant_turn_ended())
        for text in ("continue", ""):
            decide(prompt(CLAUDE_CODE, session, text, transcript))
    assert n <= 5


def test_the_users_own_prompt_still_lifts_a_halt(tmp_path):
    """The control: once the agent's turn ended and every call has its result, the user's new
    words lift the loop's halt, and the call runs again."""
    state, session = f"sqlite:///{tmp_path}/hooks.db", "s-user"
    decide = run_command(CLAUDE_CODE, state)
    first = denied_at(decide, CLAUDE_CODE, session, lambda n: None)
    assert first is not None and first <= 5
    transcript = claude_transcript(tmp_path / f"{session}.jsonl", first - 1, last=assistant_turn_ended())
    assert not decide(prompt(CLAUDE_CODE, session, "I restarted the registry, try again", transcript))
    assert not decide(pre(CLAUDE_CODE, session, 100, FAILING))


# ----------------------------------------------------------------------------- the endpoint


@pytest.mark.parametrize("agent", AGENTS)
def test_a_prompt_posted_to_the_endpoint_from_inside_a_call_restarts_nothing(agent, client):
    session, decide = f"s-{uuid.uuid4().hex[:8]}", on_the_endpoint(client, agent)

    first = denied_at(decide, agent, session, lambda n: decide(prompt(agent, session, f"new words {uuid.uuid4().hex}")))
    assert first is not None and first <= 5


@pytest.mark.parametrize("agent", AGENTS)
def test_a_prompt_to_the_endpoint_with_no_call_in_flight_lifts_a_halt(agent, client):
    session, decide = f"s-{uuid.uuid4().hex[:8]}", on_the_endpoint(client, agent)

    first = denied_at(decide, agent, session, lambda n: None)
    assert first is not None and first <= 5
    assert not decide(prompt(agent, session, "I restarted the registry, try again"))
    assert not decide(pre(agent, session, 100, FAILING))


# ----------------------------------------------------------------------------- the daemon and the state
# The agent can touch every file of its user: the state file, the daemon's socket, the config.
# The daemon holds what it saw of each session in its own memory, and signs its answers.


def looped_until_halted(state: str, session: str) -> int:
    """Calls of one failing command through the daemon until one is refused: its number."""
    for n in range(1, 9):
        code, _, err = call(pre(CLAUDE_CODE, session, n, FAILING), state, fail="open")
        if code == BLOCK_EXIT:
            return n
        call(post(CLAUDE_CODE, session, n, FAILING, "npm ERR! build failed", 1), state, fail="open")
    raise AssertionError("never refused")


def test_a_halted_session_whose_rows_are_deleted_stays_refused(runtime_dir, tmp_path):
    import sqlite3

    path, _ = started_daemon(tmp_path)
    state, session = f"sqlite:///{tmp_path}/h.db", "s-erase"
    halted_at = looped_until_halted(state, session)
    with sqlite3.connect(tmp_path / "h.db") as db:  # what the agent's shell can do
        db.execute("DELETE FROM sessions")
    assert call(pre(CLAUDE_CODE, session, 50, FAILING), state, daemon=False, fail="closed")[0] == 0  # the attack works alone
    with sqlite3.connect(tmp_path / "h.db") as db:
        db.execute("DELETE FROM sessions")
    code, _, err = call(pre(CLAUDE_CODE, session, halted_at, FAILING), state, fail="open")
    assert code == BLOCK_EXIT and "corrupt_state" in err and "went back" in err, err
    # the user's own turn lifts it, as it lifts a loop's halt
    transcript = claude_transcript(tmp_path / f"{session}.jsonl", 0, last=assistant_turn_ended())
    assert call(prompt(CLAUDE_CODE, session, "I fixed the registry, build again", transcript), state)[0] == 0
    assert call(pre(CLAUDE_CODE, session, 60, FAILING), state, fail="open")[0] == 0


def test_a_refused_stops_reason_sent_back_as_a_prompt_is_not_the_users_turn(runtime_dir, tmp_path):
    """Gemini CLI sends a refused stop's reason back as the next prompt: a false claim must not
    be a way to have the guard take a turn for the user's (here, lifting a record gone back)."""
    import sqlite3

    path, _ = started_daemon(tmp_path)
    state, session = f"sqlite:///{tmp_path}/h.db", "s-claim"
    halted_at = looped_until_halted(state, session)
    with sqlite3.connect(tmp_path / "h.db") as db:
        db.execute("DELETE FROM sessions")
    assert call(pre(CLAUDE_CODE, session, halted_at, FAILING), state, fail="open")[0] == BLOCK_EXIT
    transcript = claude_transcript(tmp_path / f"{session}.jsonl", 0, last=assistant_turn_ended())
    reason = 'agent-breaker (done_claim): your last message says "All tests pass.", but no test command ran in this session.'
    assert call(prompt(CLAUDE_CODE, session, reason, transcript), state)[0] == 0
    code, _, err = call(pre(CLAUDE_CODE, session, 60, FAILING), state, fail="open")
    assert code == BLOCK_EXIT and "corrupt_state" in err, err


def test_a_full_disk_keeps_a_halted_session_refused_and_others_go_to_the_fail_policy(runtime_dir, tmp_path):
    import resource

    path, pid = started_daemon(tmp_path)
    state = f"sqlite:///{tmp_path}/h.db"
    halted_at = looped_until_halted(state, "s-full")
    call(pre(CLAUDE_CODE, "s-other", 1, "ls"), state)  # a session the daemon knows, not halted
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (0, 0))  # the daemon can write no byte more
    code, _, err = call(pre(CLAUDE_CODE, "s-full", halted_at, FAILING), state, fail="open")
    assert code == BLOCK_EXIT and "stays halted" in err, err
    for fail, expected in (("open", 0), ("closed", BLOCK_EXIT)):
        code, _, err = call(pre(CLAUDE_CODE, "s-other", 2, "ls -la"), state, fail=fail)
        assert code == expected and "could not check this call" in err, err


def test_silent_connections_on_the_daemons_socket_do_not_let_a_halted_call_through(runtime_dir, tmp_path):
    path, _ = started_daemon(tmp_path)
    state = f"sqlite:///{tmp_path}/h.db"
    halted_at = looped_until_halted(state, "s-stall")
    silent = []
    try:
        for _ in range(_hook_daemon.MAX_READERS + 8):  # every reader held, and some waiting
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(path))
            silent.append(s)
        for fail in ("open", "closed"):
            code, _, err = call(pre(CLAUDE_CODE, "s-stall", halted_at, FAILING), state, fail=fail)
            assert code == BLOCK_EXIT and "agent-breaker (" in err, err
    finally:
        for s in silent:
            s.close()
    # the readers come back: the daemon answers again
    assert call(pre(CLAUDE_CODE, "s-fresh", 1, "ls"), state)[0] == 0


def test_a_config_edited_in_place_is_a_daemon_of_its_own(runtime_dir, tmp_path):
    """Same size, same time: the content names the daemon."""
    import os

    folder = tmp_path / "cfg"
    folder.mkdir()
    config = folder / "config.yml"
    config.write_text("agent_breaker: {identical_failure: {max_failures: 3}}\n")
    stat = config.stat()
    state = f"sqlite:///{tmp_path}/h.db"
    before = _hook_daemon.socket_path(str(folder), state)
    config.write_text("agent_breaker: {identical_failure: {max_failures: 9}}\n")
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.utime(folder, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert config.stat().st_size == stat.st_size and config.stat().st_mtime_ns == stat.st_mtime_ns
    assert _hook_daemon.socket_path(str(folder), state) != before


# ----------------------------------------------------------------------------- the hooks' token


def test_the_hooks_token_opens_the_hook_endpoints_alone(server, hooks_client):
    assert hook(hooks_client, CLAUDE_CODE, pre(CLAUDE_CODE, f"s-{uuid.uuid4().hex[:8]}", 1, "ls")).status_code == 200
    for path in ("/v1/agent-breaker/check", "/v1/agent-breaker/events", "/v1/chat/completions", "/metrics"):
        r = hooks_client.request("GET" if path == "/metrics" else "POST", path, json={})
        assert r.status_code == 403 and "hook endpoints only" in r.text, (path, r.status_code, r.text)


@pytest.mark.parametrize("agent", AGENTS)
def test_a_prompt_with_the_hooks_token_lifts_no_halt(agent, hooks_client, client):
    """No call in flight, new words: with the hooks' token (which the agent's shell inherits) the
    server cannot tell the user's prompt from the agent's, and it restarts nothing."""
    session, decide = f"s-{uuid.uuid4().hex[:8]}", on_the_endpoint(hooks_client, agent)

    first = denied_at(decide, agent, session, lambda n: decide(prompt(agent, session, f"new words {uuid.uuid4().hex}")))
    assert first is not None and first <= 5
    assert not decide(prompt(agent, session, "I restarted the registry, try again"))
    assert decide(pre(agent, session, 100, FAILING))


def test_a_tokens_file_entry_may_be_the_hooks_token():
    from agent_breaker.server import ServeError
    from agent_breaker.server._auth import TokenScope

    assert TokenScope.read({"tenant": "acme", "hooks": True}, "entry").hooks
    assert not TokenScope.read({"tenant": "acme"}, "entry").hooks
    with pytest.raises(ServeError, match="hooks must be true or false"):
        TokenScope.read({"tenant": "acme", "hooks": "yes"}, "entry")


def test_print_config_gives_claude_codes_http_hook_the_hooks_token():
    from agent_breaker.hooks import settings

    for group in settings(CLAUDE_CODE, server="http://127.0.0.1:8000")["hooks"].values():
        handler = group[0]["hooks"][0]
        assert handler["headers"] == {"Authorization": "Bearer $AGENT_BREAKER_HOOK_TOKEN"}
        assert handler["allowedEnvVars"] == ["AGENT_BREAKER_HOOK_TOKEN"]


def test_a_guard_that_crashes_keeps_a_halted_session_refused(tmp_path, monkeypatch):
    """A crash goes to the fail policy (`--fail open` lets the call through), except for a
    session the guard knows to be halted: its calls stay refused."""
    from agent_breaker import dispatch
    from agent_breaker.hooks import read
    from agent_breaker.hooks.guard import HookGuard

    guard = HookGuard(None, f"sqlite:///{tmp_path}/h.db")
    try:

        def decided(payload: dict[str, Any]) -> Any:
            hook = read(CLAUDE_CODE, json.dumps(payload).encode(), fail_closed=False)
            return guard.decide(hook)  # type: ignore[arg-type]

        first = denied_at(lambda p: decided(p).denied, CLAUDE_CODE, "s-crash", lambda n: None)
        assert first is not None and first <= 5

        def crash(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("a bug")

        monkeypatch.setattr(dispatch, "verdict_event", crash)
        out = decided(pre(CLAUDE_CODE, "s-crash", 50, FAILING))
        assert out.denied and "stays halted" in out.stderr
        with pytest.raises(RuntimeError, match="a bug"):  # another session: the fail policy's to answer
            decided(pre(CLAUDE_CODE, "s-other", 1, "ls"))
    finally:
        guard.close()
