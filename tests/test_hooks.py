"""Coding agents' hooks: each agent's documented hook input read as the guard's events (fields
it does not use ignored), and verdicts answered in the agent's own format; then the hook
endpoints of a real server, a runaway session and a healthy one through each."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_breaker.hooks import (
    AGENTS,
    BLOCK_EXIT,
    CLAUDE_CODE,
    CODEX,
    GEMINI_CLI,
    HookInputError,
    answer,
    failure,
    read_hook,
)
from agent_breaker.protocol import TOOL_CALL_EVENT, TOOL_RESULT_EVENT

# unknown fields, as newer agent versions add them: they must be ignored
EXTRA = {"prompt_id": "p-1", "some_future_field": {"nested": [1, 2]}, "effort": {"level": "high"}}
PRE = {CLAUDE_CODE: "PreToolUse", CODEX: "PreToolUse", GEMINI_CLI: "BeforeTool"}
POST = {CLAUDE_CODE: "PostToolUse", CODEX: "PostToolUse", GEMINI_CLI: "AfterTool"}
USER_TURN = {CLAUDE_CODE: "UserPromptSubmit", CODEX: "UserPromptSubmit", GEMINI_CLI: "BeforeAgent"}
SHELL = {CLAUDE_CODE: "Bash", CODEX: "Bash", GEMINI_CLI: "run_shell_command"}


def common(agent: str, session: str, name: str) -> dict[str, Any]:
    """The fields every hook input of `agent` carries (Claude Code, Codex, Gemini CLI docs)."""
    base = {
        "session_id": session,
        "transcript_path": "/home/dev/.agent/t.jsonl",
        "cwd": "/home/dev/repo",
        "hook_event_name": name,
    }
    if agent == CLAUDE_CODE:
        return {**base, "permission_mode": "default", **EXTRA}
    if agent == CODEX:
        return {**base, "model": "gpt-5-codex", "permission_mode": "default", "turn_id": "t-1", **EXTRA}
    return {**base, "timestamp": "2026-12-01T10:00:00Z", **EXTRA}


def pre(agent: str, session: str, n: int, command: str) -> dict[str, Any]:
    event = {**common(agent, session, PRE[agent]), "tool_name": SHELL[agent], "tool_input": {"command": command}}
    if agent == GEMINI_CLI:
        return {**event, "mcp_context": None, "original_request_name": SHELL[agent]}  # and no call id
    return {**event, "tool_use_id": f"toolu_{n:04d}"}


def shell_response(agent: str, output: str, status: int) -> Any:
    """A shell command's tool_response as each agent reports it."""
    if agent == CLAUDE_CODE:
        return {"stdout": output, "stderr": "" if status == 0 else "error: see above", "interrupted": False, "isImage": False}
    if agent == CODEX:
        return {"output": output, "exit_code": status}
    return {"llmContent": f"Command: x\nOutput: {output}\nExit Code: {status}", "returnDisplay": output, "error": None}


def post(agent: str, session: str, n: int, command: str, output: str, status: int) -> dict[str, Any]:
    event = {**pre(agent, session, n, command), "hook_event_name": POST[agent]}
    if agent == CLAUDE_CODE and status != 0:
        # Claude Code reports a failed tool in PostToolUseFailure, with the error
        return {**event, "hook_event_name": "PostToolUseFailure", "error": f"Exit code {status}\n{output}", "is_interrupt": False}
    return {**event, "tool_response": shell_response(agent, output, status)}


@pytest.mark.parametrize("agent", AGENTS)
def test_each_agents_tool_hooks_read_as_a_call_and_its_result(agent):
    call = read_hook(agent, pre(agent, "s-1", 7, "pytest -x"))
    assert call.event is not None and call.event["type"] == TOOL_CALL_EVENT
    assert call.event["session_id"] == "s-1" and call.event["tool_name"] == SHELL[agent]
    assert call.event["tool_args"] == {"command": "pytest -x"}
    assert call.event.get("call_id") == (None if agent == GEMINI_CLI else "toolu_0007")
    done = read_hook(agent, post(agent, "s-1", 7, "pytest -x", "3 passed", 0))
    assert done.event is not None and done.event["type"] == TOOL_RESULT_EVENT and done.event["ok"] is True
    broken = read_hook(agent, post(agent, "s-1", 8, "pytest -x", "1 failed", 1))
    assert broken.event is not None and broken.event["ok"] is False and broken.event["error"]


@pytest.mark.parametrize(
    ("response", "failed"),
    [
        ({"stdout": "ok", "stderr": "", "interrupted": False}, False),
        ({"stdout": "", "interrupted": True}, True),
        ({"output": "x", "exit_code": 0}, False),
        ({"output": "x", "exit_code": 2}, True),
        ({"llmContent": "Output: boom\nExit Code: 1", "error": None}, True),
        ({"llmContent": "Output: fine\nExit Code: 0"}, False),
        ({"error": "file not found"}, True),
        ({"is_error": True, "content": "denied"}, True),
        ({"success": False}, True),
        ("Exit code: 127\nWall time: 0.1 s\nOutput:\nnot found", True),
        ("Exit code: 0\nOutput:\nfine", False),
        ("a file's content that says: Exit code: 3 deep inside" + "x" * 3000, False),
        # Gemini CLI: its status line after the whole output, however long (its real report)
        (
            {
                "llmContent": "<untrusted_context>\nOutput: " + "line\n" * 2000 + "Exit Code: 2\nProcess Group PGID: 4242\n"
                "</untrusted_context>",
                "returnDisplay": "",
            },
            True,
        ),
        (
            {"llmContent": "<untrusted_context>\nOutput: " + "ok\n" * 2000 + "Process Group PGID: 4242\n</untrusted_context>"},
            False,
        ),
        ({"llmContent": "Output: Exit Code: 2\n" + "x" * 3000 + "\nfine"}, False),
        ({"filePath": "/a.py", "content": "print(1)"}, False),
        (None, False),
        ([1, 2], False),
    ],
)
def test_a_tools_failure_is_read_from_its_response(response, failed):
    assert (failure(response) is not None) is failed


@pytest.mark.parametrize("agent", AGENTS)
def test_hooks_that_ask_nothing_are_allowed_silently(agent):
    for name in ("Stop", "SessionStart", "SessionEnd", "Notification", "AfterAgent", "PreCompact"):
        hook = read_hook(agent, common(agent, "s-1", name))
        assert hook.event is None and answer(hook, None).output == {} and answer(hook, None).exit_code == 0


@pytest.mark.parametrize(
    "payload",
    [
        [],
        "text",
        {"session_id": "s"},
        {"hook_event_name": "PreToolUse", "tool_name": "Bash"},
        {**pre(CODEX, "s", 1, "ls"), "tool_input": "ls"},
    ],
    ids=["array", "string", "no_event_name", "no_session", "input_not_an_object"],
)
def test_an_unreadable_hook_input_is_an_error_naming_the_field(payload):
    with pytest.raises(HookInputError):
        read_hook(CODEX, payload)


def test_a_subagents_calls_are_a_session_of_their_own():
    event = {**pre(CLAUDE_CODE, "s-1", 1, "ls"), "agent_id": "a-9", "agent_type": "Explore"}
    hook = read_hook(CLAUDE_CODE, event)
    assert hook.event is not None and hook.event["session_id"] == "s-1/a-9"
    # ... whose failing calls' streaks are the family's: it names its parent
    assert hook.event["parent_session_id"] == "s-1"
    assert "parent_session_id" not in (read_hook(CLAUDE_CODE, pre(CLAUDE_CODE, "s-1", 2, "ls")).event or {})


BLOCK = {
    "allowed": False,
    "heuristic": "identical_failure",
    "severity": "block",
    "reason": "Bash failed 4 times in a row with the same arguments",
    "observation": {"error": "IDENTICAL_FAILURE", "actionable_instruction": "Stop retrying; change the command."},
}
WARN = {**BLOCK, "allowed": True, "severity": "warn"}


@pytest.mark.parametrize("agent", AGENTS)
def test_a_refusal_blocks_in_the_agents_own_format_with_the_reason_for_the_model(agent):
    hook = read_hook(agent, pre(agent, "s", 1, "make"))
    out = answer(hook, BLOCK)
    assert out.denied
    if agent == GEMINI_CLI:
        # read from the JSON; exit 0, or Gemini CLI logs the hook as failed
        assert out.exit_code == 0 and out.stderr == ""
        assert out.output["decision"] == "deny" and "identical_failure" in out.output["reason"]
    else:
        assert out.exit_code == BLOCK_EXIT
        assert "identical_failure" in out.stderr and "change the command" in out.stderr
        specific = out.output["hookSpecificOutput"]
        assert specific == {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": out.stderr}


@pytest.mark.parametrize("agent", AGENTS)
def test_a_warning_lets_the_call_run_and_reaches_the_model_as_context(agent):
    hook = read_hook(agent, pre(agent, "s", 1, "make"))
    out = answer(hook, WARN)
    assert not out.denied and out.exit_code == 0
    # never a bare "allow" (Codex rejects it): the call runs as it would have
    expected = (
        "agent-breaker (identical_failure): Bash failed 4 times in a row with the same arguments. "
        "Stop retrying; change the command."
    )
    if agent == GEMINI_CLI:  # read with the call's answer: Gemini CLI reads no context before a call
        assert out.output == {}
        after = read_hook(agent, post(agent, "s", 1, "make", "error", 2))
        out = answer(
            after,
            {
                "accepted": True,
                "heuristic": None,
                "warning": WARN["observation"] | {"warning": "IDENTICAL_FAILURE", "message": WARN["reason"]},
            },
        )
    assert out.output == {
        "hookSpecificOutput": {"hookEventName": (PRE if agent != GEMINI_CLI else POST)[agent], "additionalContext": expected}
    }
    assert answer(hook, {"allowed": True, "heuristic": None}).output == {}


# ----------------------------------------------------------------------------- the endpoints

httpx = pytest.importorskip("httpx")


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Any]:
    pytest.importorskip("nemoguardrails")
    from _server import served_for_hooks

    with served_for_hooks(tmp_path_factory.mktemp("tokens"), 14) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server) -> Iterator[Any]:
    from _server import client_of

    with client_of(server) as c:
        yield c


@pytest.fixture(scope="module")
def hooks_client(server) -> Iterator[Any]:
    """Claude Code's HTTP hooks as print-config sets them up: the hooks' token."""
    from _server import HOOK_TOKEN, client_of

    with client_of(server, HOOK_TOKEN) as c:
        yield c


def hook(client: Any, agent: str, payload: dict[str, Any], **params: str) -> httpx.Response:
    return client.post(f"/v1/hooks/{agent}", json=payload, params=params)


@pytest.mark.parametrize("agent", AGENTS)
def test_identical_failing_commands_are_denied_through_the_endpoint_by_the_fifth(agent, client):
    session = f"h-{uuid.uuid4().hex[:8]}"
    denied_at = None
    for n in range(1, 8):
        r = hook(client, agent, pre(agent, session, n, "npm run build"))
        assert r.status_code == 200, r.text
        out = r.json()
        if out.get("decision") == "deny" or out.get("hookSpecificOutput", {}).get("permissionDecision") == "deny":
            denied_at = n
            break
        r = hook(client, agent, post(agent, session, n, "npm run build", "error TS2304: Cannot find name 'x'", 1))
        assert r.status_code == 200, r.text
    assert denied_at is not None and denied_at <= 5, denied_at


@pytest.mark.parametrize("agent", AGENTS)
def test_an_edit_test_fix_session_whose_tests_change_is_never_denied(agent, client):
    session = f"h-{uuid.uuid4().hex[:8]}"
    edit_tool = {CLAUDE_CODE: "Edit", CODEX: "apply_patch", GEMINI_CLI: "replace"}[agent]
    for n in range(25):
        failing = 25 - n
        edit = {
            **pre(agent, session, 2 * n, ""),
            "tool_name": edit_tool,
            "tool_input": {"file_path": "src/app.py", "patch": f"fix {n}"},
        }
        test = pre(agent, session, 2 * n + 1, "pytest -q")
        for payload, status, output in ((edit, 0, "ok"), (test, 1 if failing else 0, f"{failing} failed, {n} passed")):
            r = hook(client, agent, payload)
            assert r.status_code == 200 and r.json().get("decision") != "deny", r.text
            assert r.json().get("hookSpecificOutput", {}).get("permissionDecision") != "deny", r.text
            done = {**payload, "hook_event_name": POST[agent], "tool_response": shell_response(agent, output, status)}
            if agent == CLAUDE_CODE and status:
                done = {**payload, "hook_event_name": "PostToolUseFailure", "error": output}
            assert hook(client, agent, done).status_code == 200


def test_a_hook_endpoint_takes_post_and_the_agents_json_only(server, client):
    assert httpx.get(server.base + "/v1/hooks/codex", headers=server.headers, timeout=30).status_code == 405
    # an input it cannot read: the fail policy's answer (see test_hook_transports.py)
    r = hook(client, CODEX, {"hook_event_name": "PreToolUse"})
    assert r.status_code == 200 and r.json() == {}
    r = hook(client, CODEX, {"hook_event_name": "PreToolUse"}, fail="closed")
    assert r.status_code == 200 and r.json()["decision"] == "block" and "session_id" in r.json()["reason"]
    # a config the server does not serve: the agent would run the call on a 404, unguarded
    r = hook(client, CODEX, pre(CODEX, "s", 1, "ls"), config_id="no_such_config")
    assert r.status_code == 200 and r.json()["decision"] == "block" and "404" in r.json()["reason"]
    done = {**pre(CODEX, "s", 1, "ls"), "hook_event_name": "PostToolUse", "tool_response": "x"}
    assert hook(client, CODEX, done, config_id="no_such_config").json() == {}  # a result decides nothing
    assert httpx.post(server.base + "/v1/hooks/codex", json={}, timeout=30).status_code == 401


# ----------------------------------------------------------------------------- the command


def command(agent: str, payload: Any, state: str, *, fail: str = "open", server: str | None = None) -> tuple[int, str, str]:
    """`agent-breaker hook <agent>` in this process: (exit code, stdout, stderr)."""
    import io
    import json

    from agent_breaker.hooks.command import run

    out, err = io.StringIO(), io.StringIO()
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    code = run(
        agent, io.BytesIO(raw), out, err, config=None, state=state, server=server, fail_closed=fail == "closed", daemon=False
    )
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("agent", AGENTS)
def test_the_command_denies_identical_failing_commands_by_the_fifth(agent, tmp_path):
    """Exit 2 with the reason on stderr; Gemini CLI: exit 0 with its JSON refusal."""
    state = f"sqlite:///{tmp_path}/hooks.db"
    for n in range(1, 8):
        code, out, err = command(agent, pre(agent, "s-cmd", n, "npm run build"), state)
        if agent == GEMINI_CLI and out and json.loads(out).get("decision") == "deny":
            assert n <= 5 and code == 0 and "identical_failure" in json.loads(out)["reason"]
            break
        if code == BLOCK_EXIT:
            assert n <= 5 and "identical_failure" in err and out == ""
            break
        assert code == 0, err
        command(agent, post(agent, "s-cmd", n, "npm run build", "error TS2304", 1), state)
    else:
        pytest.fail("never denied")
    # what was warned and blocked is on record beside the state, for `agent-breaker report`
    from agent_breaker._sinks import close_all
    from agent_breaker.cli import main

    close_all()
    incidents = tmp_path / "hooks.incidents.jsonl"
    lines = [json.loads(line) for line in incidents.read_text().splitlines()]
    assert [(i["heuristic"], i["severity"]) for i in lines if i["kind"] == "trip"] == [
        ("identical_failure", "warn"),
        ("identical_failure", "block"),
    ]
    assert incidents.stat().st_mode & 0o077 == 0
    assert main(["report", str(incidents)]) == 0


@pytest.mark.parametrize("agent", AGENTS)
def test_what_the_model_reads_names_the_tool_as_the_agent_does_and_each_warning_where_it_is_read(agent, tmp_path):
    """The warned call's answer carries its warning for Gemini CLI (it reads context after a call
    only); the others read it before the call, once. A result of no call in flight is silent;
    the halt tells a coding agent to hand back to its user."""
    state = f"sqlite:///{tmp_path}/hooks.db"
    told = []
    for n in range(1, 6):
        code, out, err = command(agent, pre(agent, "s-msg", n, "npm run build"), state)
        before = json.loads(out) if out else {}
        if code == BLOCK_EXIT or before.get("decision") == "deny":
            refusal = err or before["reason"]
            break
        code, out, _ = command(agent, post(agent, "s-msg", n, "npm run build", "error TS2304", 1), state)
        after = json.loads(out) if out else {}
        told.append(
            (
                before.get("hookSpecificOutput", {}).get("additionalContext"),
                after.get("hookSpecificOutput", {}).get("additionalContext"),
            )
        )
    else:
        pytest.fail("never denied")
    warned = [(b, a) for b, a in told if b or a]
    [(before_text, after_text)] = warned
    text = after_text if agent == GEMINI_CLI else before_text
    assert (before_text is None, after_text is None) == ((agent == GEMINI_CLI), (agent != GEMINI_CLI))
    assert text.startswith(f"agent-breaker (identical_failure): {SHELL[agent]} failed 3 times") and "this call is allowed" in text
    assert f"{SHELL[agent]} failed 4 times" in refusal and SHELL[agent].lower() not in refusal.replace(SHELL[agent], "")
    # the denied call never ran: a result of it (a stray or replayed one) tells the model nothing
    code, out, err = command(agent, post(agent, "s-msg", n, "npm run build", "error TS2304", 1), state)
    assert (code, json.loads(out or "{}"), err) == (0, {}, "")
    code, out, err = command(agent, pre(agent, "s-msg", n + 1, "ls"), state)
    halted = err or json.loads(out)["reason"]
    assert "session halted earlier" in halted and "tell the user what failed" in halted and "final answer" not in halted


@pytest.mark.parametrize("agent", AGENTS)
def test_failing_closed_blocks_the_calls_only_not_the_results_or_the_prompts(agent, tmp_path):
    """With the server down, `--fail closed` blocks each tool call; a result (the tool ran) and
    a prompt (it runs nothing) go through, so the user can still talk to the agent."""
    from _ports import free_port

    down = f"http://127.0.0.1:{free_port()}"
    state = f"sqlite:///{tmp_path}/hooks.db"
    prompt = {**common(agent, "s-down", USER_TURN[agent]), "prompt": "go on"}
    for payload, blocked in [
        (pre(agent, "s-down", 1, "make"), True),
        (post(agent, "s-down", 1, "make", "ok", 0), False),
        (prompt, False),
        (b"not a hook input", True),  # not known to be anything but a call
    ]:
        code, _, err = command(agent, payload, state, fail="closed", server=down)
        assert (code == BLOCK_EXIT) is blocked, (payload, err)
        assert "could not check this call" in err


def test_the_command_keeps_a_healthy_edit_test_fix_session_going(tmp_path):
    state = f"sqlite:///{tmp_path}/hooks.db"
    for n in range(25):
        edit = {**pre(CODEX, "s-ok", 2 * n, ""), "tool_name": "apply_patch", "tool_input": {"patch": f"fix {n}"}}
        test = pre(CODEX, "s-ok", 2 * n + 1, "pytest -q")
        for payload, status, output in ((edit, 0, "ok"), (test, 1 if n < 24 else 0, f"{25 - n} failed")):
            code, _, err = command(CODEX, payload, state)
            assert code == 0, err
            done = {**payload, "hook_event_name": "PostToolUse", "tool_response": shell_response(CODEX, output, status)}
            assert command(CODEX, done, state)[0] == 0


def claude_transcript(path: Any, calls: int, *, last: dict[str, Any] | None = None) -> str:
    """A Claude Code transcript (as the binary writes it) of `calls` Bash calls, each answered
    by a tool result, then `last` (default: the record of the user's Esc)."""
    import json

    lines = [{"type": "user", "message": {"role": "user", "content": "fix the build"}}]
    for n in range(1, calls + 1):
        use = {"type": "tool_use", "id": f"toolu_{n:04d}", "name": "Bash", "input": {"command": "npm test"}}
        lines.append({"type": "assistant", "message": {"role": "assistant", "content": [use], "stop_reason": "tool_use"}})
        result = {"type": "tool_result", "tool_use_id": f"toolu_{n:04d}", "content": "Exit code 130", "is_error": True}
        lines.append({"type": "user", "message": {"role": "user", "content": [result]}})
    lines.append({"type": "system", "subtype": "stop_hook_summary"})
    stopped = {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": "[Request interrupted by user]"}]},
    }
    lines.append(last or stopped)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def test_calls_the_user_stopped_are_not_a_loop_of_the_agent(tmp_path):
    """Claude Code's PostToolUseFailure with is_interrupt: the user pressed Esc, then said "continue"."""
    state = f"sqlite:///{tmp_path}/hooks.db"
    for n in range(1, 8):  # past the 5th, where failures of its own are denied
        code, out, err = command(CLAUDE_CODE, pre(CLAUDE_CODE, "s-esc", n, "npm test"), state)
        assert code == 0 and "additionalContext" not in out, err
        stopped = {
            **post(CLAUDE_CODE, "s-esc", n, "npm test", "", 130),
            "error": "Exit code 130\n^C",  # the flag says who stopped it, not this text
            "is_interrupt": True,
        }
        assert command(CLAUDE_CODE, stopped, state)[0] == 0
        transcript = claude_transcript(tmp_path / "s-esc.jsonl", n)
        prompt = {**common(CLAUDE_CODE, "s-esc", "UserPromptSubmit"), "prompt": "continue", "transcript_path": transcript}
        assert command(CLAUDE_CODE, prompt, state)[0] == 0


@pytest.mark.parametrize(("fail", "code"), [("open", 0), ("closed", BLOCK_EXIT)])
def test_a_guard_that_cannot_decide_follows_the_fail_policy(tmp_path, fail, code):
    state = f"sqlite:///{tmp_path}/hooks.db"
    for broken in (b"not json", {"hook_event_name": "PreToolUse"}):
        got, out, err = command(CLAUDE_CODE, broken, state, fail=fail)
        assert got == code and "could not check this call" in err
        assert out == ("{}\n" if fail == "open" else "")
    # a server that does not answer
    got, _, err = command(CLAUDE_CODE, pre(CLAUDE_CODE, "s", 1, "ls"), state, fail=fail, server="http://127.0.0.1:9")
    assert got == code and "did not answer" in err


def _hook_process(args: tuple[str, int, int]) -> tuple[int, str]:
    """One hook command as its own process (what an agent runs per call); its exit code and stderr."""
    import json
    import subprocess
    import sys

    state, worker, n = args
    payload = pre(CLAUDE_CODE, "s-shared", worker * 1000 + n, f"echo {worker}-{n}")
    proc = subprocess.run(
        [sys.executable, "-m", "agent_breaker.cli", "hook", "claude-code", "--state", state, "--fail", "closed", "--no-daemon"],
        input=json.dumps(payload).encode(),
        capture_output=True,
        timeout=120,
    )
    return proc.returncode, proc.stderr.decode(errors="replace")


@pytest.mark.slow
def test_concurrent_hook_processes_on_one_file_count_every_call(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from agent_breaker.store.sqlite import SQLiteStore

    state = f"sqlite:///{tmp_path}/hooks.db"
    jobs = [(state, w, n) for w in range(4) for n in range(3)]
    with ThreadPoolExecutor(8) as pool:
        ran = list(pool.map(_hook_process, jobs))
    assert [code for code, _ in ran] == [0] * len(jobs), [err for code, err in ran if code]
    store = SQLiteStore(state)
    [key] = [k for (k,) in store._db().execute("SELECT key FROM sessions WHERE key LIKE '%s-shared%'")]
    assert store.peek_session(key).spend.steps == len(jobs)


def background_read(n: int, session: str, output: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Claude Code reading a background shell (BashOutput), and what it returned."""
    call = {**common(CLAUDE_CODE, session, "PreToolUse"), "tool_name": "BashOutput", "tool_input": {"bash_id": "bash_1"}}
    call["tool_use_id"] = f"toolu_poll_{n}"
    response = {"shellId": "bash_1", "command": "npm run dev", "status": "running", "stdout": output, "stderr": ""}
    return call, {
        **call,
        "hook_event_name": "PostToolUse",
        "tool_response": {**response, "timestamp": f"2026-12-01T10:{n:02d}:00Z"},
    }


def test_a_hung_background_shell_read_with_only_a_clock_changing_is_denied_by_the_12th_read(tmp_path):
    state = f"sqlite:///{tmp_path}/hooks.db"
    for n in range(1, 30):
        call, done = background_read(n, "s-hung", f"[10:{n:02d}:17] waiting for file changes...")
        code, _, err = command(CLAUDE_CODE, call, state)
        if code == BLOCK_EXIT:
            assert n <= 12 and "stuck_polling" in err, (n, err)
            break
        command(CLAUDE_CODE, done, state)
    else:
        pytest.fail("never denied")


@pytest.mark.parametrize("agent", AGENTS)
def test_a_hung_shell_polled_with_only_a_clock_changing_is_denied_through_the_endpoint(agent, client):
    """Claude Code reads its background shell (BashOutput); Codex and Gemini CLI poll its log."""
    session = f"h-{uuid.uuid4().hex[:8]}"
    for n in range(1, 30):
        output = f"[10:{n:02d}:17] waiting for file changes..."
        if agent == CLAUDE_CODE:
            call, done = background_read(n, session, output)
        else:
            call, done = (
                pre(agent, session, n, "tail -n 5 /tmp/dev.log"),
                post(agent, session, n, "tail -n 5 /tmp/dev.log", output, 0),
            )
        r = hook(client, agent, call)
        assert r.status_code == 200, r.text
        if denied(r.json()):
            assert n <= 12, n
            break
        assert hook(client, agent, done).status_code == 200
    else:
        pytest.fail("never denied")


def test_a_background_shell_whose_output_grows_is_never_denied(tmp_path):
    state = f"sqlite:///{tmp_path}/hooks.db"
    log = ""
    for n in range(1, 40):
        log += f"[10:{n:02d}:17] compiled module {n} of 200\n"
        call, done = background_read(n, "s-build", log)
        code, out, err = command(CLAUDE_CODE, call, state)
        assert code == 0 and "stuck_polling" not in out, (n, out, err)
        command(CLAUDE_CODE, done, state)


@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize("server", [None, "http://127.0.0.1:8000"])
@pytest.mark.parametrize("fail", ["open", "closed"])
def test_print_config_sends_every_event_the_guard_reads_to_it(agent, server, fail):
    import shlex

    from agent_breaker.cli import main
    from agent_breaker.hooks import settings

    hooks = settings(agent, server=server, fail=fail)["hooks"]
    assert {PRE[agent], POST[agent]} <= set(hooks)
    for groups in hooks.values():
        [group] = groups
        [handler] = group["hooks"]
        if handler["type"] == "http":
            # an HTTP hook that gets no answer lets the call through: it is printed to fail open only
            assert agent == CLAUDE_CODE and fail == "open" and handler["url"] == f"{server}/v1/hooks/claude-code"
        else:
            argv = shlex.split(handler["command"])
            assert argv[:3] == ["agent-breaker", "hook", agent]
            assert ("--fail" in argv) is (fail == "closed") and ("--server" in argv) is (server is not None)
    with pytest.raises(SystemExit):  # the printed command line parses
        main([*shlex.split(hooks[PRE[agent]][0]["hooks"][0].get("command", f"x hook {agent}"))[1:], "--help"])


# ----------------------------------------------------------------------------- recorded sessions

REAL_SESSIONS = Path(__file__).parent / "traces" / "real-claude-code.jsonl.gz"
CODING_CONFIG = Path(__file__).parents[1] / "config" / "coding_agent" / "config.yml"
#: the session with the most failing checks in a row: a linter failing 9 times, fixed in between
RECORDED = "claude-code:conneroisu/templar:logs__chat@caafff274dc1"
#: the session with the most calls (312)
LONGEST = "claude-code:kesslerio/attio-mcp-server:logs__chat@a8e99a7c0e2c"


def real_sessions() -> list[dict[str, Any]]:
    import gzip
    import json

    with gzip.open(REAL_SESSIONS, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_replay_of_real_claude_code_sessions_on_the_coding_config_cuts_none():
    import json

    from agent_breaker._replay import replay_engine, replay_lines
    from agent_breaker.config import load_config

    rows, invalid = replay_lines((json.dumps(e) for e in real_sessions()), replay_engine(load_config(CODING_CONFIG)))
    assert invalid == 0 and len(rows) == 41 and sum(r["allowed_calls"] for r in rows) == 3874
    assert [r["session"] for r in rows if r["tripped"] or r["blocked_calls"]] == []


def recorded_with_a_runaway() -> list[dict[str, Any]]:
    """The recorded session as an agent's hooks see it (each call, then its result; user turns),
    then a runaway: one build failing the same way, again and again."""
    events = [e for e in real_sessions() if e["session"] == RECORDED]
    results = {e["call_id"]: e for e in events if e["type"] == "tool_result"}
    seen: list[dict[str, Any]] = []
    for e in events:
        if e["type"] == "user":
            seen.append(e)
        elif e["type"] == "tool_call" and e["call_id"] in results:
            seen += [e, results[e["call_id"]]]
    for n in range(8):
        call_id = f"toolu_runaway_{n}"
        build = {"tool": "Bash", "args": {"command": "go build ./..."}, "call_id": call_id}
        seen += [{**build, "type": "tool_call"}, {**build, "type": "tool_result", "ok": False, "error": "undefined: Foo"}]
    return seen


def as_hook(agent: str, session: str, event: dict[str, Any]) -> dict[str, Any]:
    """One recorded event as `agent`'s hook input."""
    if event["type"] == "user":
        return {**common(agent, session, "UserPromptSubmit" if agent != GEMINI_CLI else "BeforeAgent"), "prompt": event["text"]}
    name = PRE[agent] if event["type"] == "tool_call" else POST[agent]
    payload = {**common(agent, session, name), "tool_name": event["tool"], "tool_input": event.get("args") or {}}
    if agent != GEMINI_CLI:
        payload["tool_use_id"] = event["call_id"]
    if event["type"] == "tool_call":
        return payload
    text = str(event.get("result") if event["ok"] else event.get("error"))
    if agent == CLAUDE_CODE:
        if not event["ok"]:
            return {**payload, "hook_event_name": "PostToolUseFailure", "error": text, "is_interrupt": False}
        return {**payload, "tool_response": {"content": text}}
    if agent == CODEX:
        return {**payload, "tool_response": {"content": text, "success": event["ok"]}}
    return {**payload, "tool_response": {"llmContent": text, "error": None if event["ok"] else {"message": text}}}


def denied(out: dict[str, Any]) -> bool:
    return out.get("decision") == "deny" or out.get("hookSpecificOutput", {}).get("permissionDecision") == "deny"


def through(answer_of: Any, agent: str, session: str) -> list[int]:
    """The 1-based indices of the recorded events whose call the hooks denied (a denied call's
    result never comes: the tool did not run)."""
    refused, skip = [], False
    for i, event in enumerate(recorded_with_a_runaway(), 1):
        if skip:
            skip = False
            continue
        if answer_of(as_hook(agent, session, event)) and event["type"] == "tool_call":
            refused.append(i)
            skip = True
    return refused


def replayed() -> tuple[int, int]:
    """(trip event, blocked calls) of the replay of what the hooks see."""
    import json

    from agent_breaker._replay import replay_engine, replay_lines
    from agent_breaker.config import load_config

    lines = (json.dumps({**e, "session": "r"}) for e in recorded_with_a_runaway())
    [row], invalid = replay_lines(lines, replay_engine(load_config(CODING_CONFIG)))
    assert invalid == 0 and row["tripped"]
    return row["trip_event"], row["blocked_calls"]


@pytest.mark.slow
@pytest.mark.parametrize("agent", AGENTS)
def test_a_recorded_session_through_each_endpoint_is_cut_where_replay_cuts_it(agent, client):
    trip_event, blocked = replayed()
    session = f"rec-{uuid.uuid4().hex[:8]}"

    def answer_of(payload: dict[str, Any]) -> bool:
        r = hook(client, agent, payload)
        assert r.status_code == 200, r.text
        return denied(r.json())

    refused = through(answer_of, agent, session)
    assert refused[0] == trip_event and len(refused) == blocked
    assert recorded_with_a_runaway()[trip_event - 1]["args"] == {"command": "go build ./..."}


@pytest.mark.slow
def test_a_recorded_session_through_the_command_is_cut_where_replay_cuts_it(tmp_path):
    trip_event, blocked = replayed()
    state = f"sqlite:///{tmp_path}/hooks.db"

    def answer_of(payload: dict[str, Any]) -> bool:
        code, _, err = command(CLAUDE_CODE, payload, state)
        assert code in (0, BLOCK_EXIT) and ("could not" not in err), err
        return code == BLOCK_EXIT

    refused = through(answer_of, CLAUDE_CODE, "rec-cmd")
    assert refused[0] == trip_event and len(refused) == blocked


def replay_through(client: Any, agent: str, events: list[dict[str, Any]], dropped: Any) -> tuple[int, list[Any]]:
    """Recorded events through `agent`'s endpoint, without the results `dropped(n)` names (n:
    the result's 1-based index): (results sent, the denials of calls)."""
    run = uuid.uuid4().hex[:8]
    results, refused = 0, []
    for event in events:
        if event["type"] not in ("tool_call", "tool_result", "user"):
            continue
        if event["type"] == "tool_result":
            results += 1
            if dropped(results):
                continue
        r = hook(client, agent, as_hook(agent, f"{run}-{event['session']}", event))
        assert r.status_code == 200, r.text
        if event["type"] == "tool_call" and denied(r.json()):
            refused.append((event["session"], r.json()))
    return results, refused


# through Claude Code's endpoint (Codex pairs a result with its call by id alike; Gemini CLI,
# which sends no call id, is replayed with no result at all below): 7,700 requests take ~25 s
@pytest.mark.slow
@pytest.mark.parametrize("agent", [CLAUDE_CODE])
def test_recorded_sessions_with_every_fifth_result_missing_are_never_refused(agent, hooks_client):
    """Real agents send no result for some calls they announced (declined by the user or by
    another hook, interrupted, no PostToolUse in the settings): the 41 recorded sessions, each
    fifth result dropped, through the endpoint with the hooks' token (whose prompts restart
    nothing). None of their calls is denied, for calls in flight or anything else (the sessions
    are good work: replay cuts none of them)."""
    results, refused = replay_through(hooks_client, agent, real_sessions(), lambda n: n % 5 == 0)
    assert results > 3000 and refused == []


@pytest.mark.slow
@pytest.mark.parametrize("agent", AGENTS)
def test_a_recorded_session_with_no_result_at_all_is_never_refused(agent, client):
    """Hook settings with only the pre-call hook: the longest recorded session (312 calls) sends
    no result; its calls in flight never hold up the next."""
    events = [e for e in real_sessions() if e["session"] == LONGEST]
    results, refused = replay_through(client, agent, events, lambda n: True)
    assert results > 300 and refused == []


# ----------------------------------------------------------------------------- a broken install


@pytest.mark.parametrize(("fail", "code"), [("open", 1), ("closed", BLOCK_EXIT)])
@pytest.mark.parametrize("missing", ["agent_breaker.engine", "agent_breaker.cli"])
def test_a_broken_install_is_never_a_decision_to_let_the_call_through(monkeypatch, capsys, tmp_path, missing, fail, code):
    """A module missing from the install (the engine, or the command itself) is one line on
    stderr naming it and the fix: an error the agent shows (exit 1), or a block under
    --fail closed; never the silent exit 0 of a guard that decided."""
    import io
    import json
    import sys

    from agent_breaker.__main__ import main

    monkeypatch.setitem(sys.modules, missing, None)  # importing it now fails, as a file missing would
    monkeypatch.setenv("AGENT_BREAKER_HOOK_DAEMON", "off")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(json.dumps(pre(CLAUDE_CODE, "s-b", 1, "ls")).encode())))
    argv = ["hook", "claude-code", "--state", f"sqlite:///{tmp_path}/hooks.db", "--fail", fail]

    assert main(argv) == code
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert missing in err and "pip install --force-reinstall" in err


def test_print_config_names_this_installs_command_by_absolute_path(capsys):
    import json
    import os
    import shlex

    from agent_breaker.cli import main

    assert main(["hooks", "print-config", "codex"]) == 0
    out, err = capsys.readouterr()
    command = shlex.split(json.loads(out)["hooks"]["PreToolUse"][0]["hooks"][0]["command"])
    program = command[0]
    assert os.path.isabs(program) and os.access(program, os.X_OK), program
    assert command[1:] in (["hook", "codex"], ["-m", "agent_breaker", "hook", "codex"])
    assert program in err and "print them again" in err


def test_version_is_the_installed_distributions(capsys):
    from importlib.metadata import version

    import agent_breaker
    from agent_breaker.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith(f"agent-breaker-rails {version('agent-breaker-rails')} (")
    assert agent_breaker.__version__ == version("agent-breaker-rails")


def test_codex_results_take_their_exit_status_from_the_sessions_transcript(tmp_path):
    """Codex's PostToolUse holds a shell command's output only; its rollout records the exit code
    (the real lines' shape, from Codex 0.171), which the command reads, on every transport."""
    rollout = tmp_path / "rollout.jsonl"
    completed = {
        "timestamp": "2026-12-03T14:21:58.588Z",
        "type": "event_msg",
        "payload": {
            "type": "item_completed",
            "item": {"type": "CommandExecution", "id": "call_7", "status": "failed", "exit_code": 2, "aggregated_output": "x"},
        },
    }
    output = {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "call_7", "output": "..."}}
    rollout.write_text(json.dumps(completed) + "\n" + json.dumps(output) + "\n")
    event = {
        **common(CODEX, "s-codex", "PostToolUse"),
        "transcript_path": str(rollout),
        "tool_name": "Bash",
        "tool_input": {"command": "ls /nope"},
        "tool_use_id": "call_7",
        "tool_response": "ls: cannot access '/nope': No such file or directory\n",
    }
    from agent_breaker.hooks.command import _with_exit_status

    hook = read_hook(CODEX, json.loads(_with_exit_status(CODEX, json.dumps(event).encode())))
    assert hook.event is not None and hook.event["ok"] is False and hook.event["error"] == "exit code 2"
    # a call the transcript does not name (yet) is read from what the hook holds
    unnamed = _with_exit_status(CODEX, json.dumps({**event, "tool_use_id": "call_8"}).encode())
    assert read_hook(CODEX, json.loads(unnamed)).event["ok"] is True  # type: ignore[index]
    # other agents' inputs and other events are passed on as they came
    raw = json.dumps(pre(CODEX, "s-codex", 1, "ls")).encode()
    assert (
        _with_exit_status(CODEX, raw) is raw
        and _with_exit_status(CLAUDE_CODE, json.dumps(event).encode()) == json.dumps(event).encode()
    )


def test_hooks_trust_prints_the_codex_config_lines_for_each_printed_hook(tmp_path, capsys, monkeypatch):
    import tomllib

    from agent_breaker.cli import main

    monkeypatch.setenv("CODEX_HOME", str(tmp_path))
    assert main(["hooks", "trust", "codex", "--fail", "closed"]) == 0
    state = tomllib.loads(capsys.readouterr().out)["hooks"]["state"]
    hooks_file = str(tmp_path / "hooks.json")
    assert sorted(state) == sorted(
        f"{hooks_file}:{e}:0:0" for e in ("pre_tool_use", "post_tool_use", "user_prompt_submit", "stop")
    )
    assert all(v["trusted_hash"].startswith("sha256:") and len(v["trusted_hash"]) == 71 for v in state.values())
