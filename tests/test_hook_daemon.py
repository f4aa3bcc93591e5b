"""The hook command's per-user daemon: it answers exactly as a hook process would, on the same
store; a call that cannot reach it decides alone (and starts one); it is never used from a folder
others can write to; a broken daemon's answer goes to the fail policy, not through."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_breaker import _hook_client as _client
from agent_breaker.hooks import BLOCK_EXIT, CLAUDE_CODE
from agent_breaker.hooks import command as _hook_command
from agent_breaker.hooks import daemon as _hook_daemon
from agent_breaker.hooks import guard as _hook_guard
from tests.test_hooks import background_read, post, pre

START_TIMEOUT_S = 60.0


@pytest.fixture
def runtime_dir(monkeypatch) -> Iterator[Path]:
    """A runtime folder of the test's own (a short path: a socket's is bounded); every daemon
    started in it is stopped by its PID."""
    base = tempfile.mkdtemp(prefix="ab-")
    monkeypatch.setenv("XDG_RUNTIME_DIR", base)
    monkeypatch.delenv(_hook_daemon.DAEMON_ENV, raising=False)
    folder = Path(base) / "agent-breaker"
    yield folder
    for lock in folder.glob("hookd-*.lock"):
        pid = lock.read_text().strip()
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGTERM)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(int(pid), 0)
    shutil.rmtree(base)


def call(payload: Any, state: str, *, daemon: bool = True, fail: str = "closed") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    code = _hook_command.run(
        CLAUDE_CODE, io.BytesIO(raw), out, err, config=None, state=state, server=None, fail_closed=fail == "closed", daemon=daemon
    )
    return code, out.getvalue(), err.getvalue()


def wait_serving(path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(str(path))
                return
            except OSError:
                pass
        time.sleep(0.05)  # polling a real process's start-up, not driving the guard's time
    raise AssertionError(
        f"no daemon at {path}: {path.with_suffix('.log').read_text() if path.with_suffix('.log').exists() else ''}"
    )


def runaway_and_polling(session: str) -> list[dict[str, Any]]:
    """Identical failing commands, then a hung background shell read with only a clock changing."""
    events: list[dict[str, Any]] = []
    for n in range(1, 7):
        events += [
            pre(CLAUDE_CODE, session, n, "npm run build"),
            post(CLAUDE_CODE, session, n, "npm run build", "error TS2304", 1),
        ]
    for n in range(14):
        events += background_read(100 + n, session + "-poll", f"[12:00:{n:02d}] waiting for server")
    return events


def test_the_daemon_answers_every_call_as_a_hook_process_would(runtime_dir, tmp_path, monkeypatch):
    daemon_state, alone_state = f"sqlite:///{tmp_path}/d.db", f"sqlite:///{tmp_path}/a.db"
    path = _hook_daemon.socket_path(None, daemon_state)
    assert path is not None and path.parent == runtime_dir
    _hook_daemon.start(path, None, daemon_state)
    wait_serving(path)
    events = runaway_and_polling(f"s-{os.getpid()}")
    alone = [call(e, alone_state, daemon=False) for e in events]

    def no_engine_here(*_: Any) -> None:
        raise AssertionError("decided in the test's process, not by the daemon")

    monkeypatch.setattr(_hook_guard, "HookGuard", no_engine_here)
    served = [call(e, daemon_state) for e in events]
    assert served == alone
    denied = [i for i, (code, _, _) in enumerate(served) if code == BLOCK_EXIT]
    assert denied and events[denied[0]]["tool_input"]["command"] == "npm run build"
    assert any(events[i]["tool_name"] == "BashOutput" for i in denied)
    # the socket is the user's alone
    assert path.stat().st_mode & 0o077 == 0 and path.parent.stat().st_mode & 0o077 == 0


def test_a_call_that_finds_no_daemon_decides_alone_and_starts_one(runtime_dir, tmp_path):
    state = f"sqlite:///{tmp_path}/h.db"
    path = _hook_daemon.socket_path(None, state)
    assert path is not None
    # a dead daemon's socket: the file is there, nobody listens
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(path))
    code, out, err = call(pre(CLAUDE_CODE, "s1", 1, "ls"), state)
    assert (code, err) == (0, "") and json.loads(out) == {}
    wait_serving(path)
    # the next call is the daemon's, on the same store: the session goes on where it was
    code, _, err = call(post(CLAUDE_CODE, "s1", 1, "ls", "a b", 0), state)
    assert (code, err) == (0, "")
    assert int(path.with_suffix(".lock").read_text()) > 0


def test_no_daemon_in_a_folder_others_can_write_to_or_when_switched_off(runtime_dir, monkeypatch):
    assert _hook_daemon.socket_path(None, "sqlite:///x.db") is not None
    assert runtime_dir.stat().st_mode & 0o777 == 0o700
    os.chmod(runtime_dir, 0o777)
    assert _hook_daemon.socket_path(None, "sqlite:///x.db") is None
    os.chmod(runtime_dir, 0o700)
    for off in ("off", "0", "false", "No"):
        monkeypatch.setenv(_hook_daemon.DAEMON_ENV, off)
        assert _hook_daemon.socket_path(None, "sqlite:///x.db") is None


def test_each_config_store_and_environment_has_a_daemon_of_its_own(runtime_dir, tmp_path, monkeypatch):
    config = tmp_path / "c.yml"
    config.write_text("agent_breaker: {}\n")
    here = _client.absolute(str(config), "sqlite:///x.db")
    first = _hook_daemon.socket_path(*here)
    assert first is not None  # a daemon can serve here: the comparisons below mean something
    assert first == _hook_daemon.socket_path(*here)
    assert first != _hook_daemon.socket_path(str(config), "sqlite:////y.db")
    assert first != _hook_daemon.socket_path(None, here[1])
    with monkeypatch.context() as m:
        m.setenv("AGENT_BREAKER_FINGERPRINT_SECRET", "another key")
        assert first != _hook_daemon.socket_path(*here)
    with monkeypatch.context() as m:
        m.chdir(tmp_path)
        # a relative path names another file from another folder: another daemon; the same
        # files from any folder: the same one
        assert first != _hook_daemon.socket_path(*_client.absolute(str(config), "sqlite:///x.db"))
        assert first == _hook_daemon.socket_path(*here)
    config.write_text("agent_breaker: {identical_failure: {max_failures: 3}}\n")  # edited: a new daemon
    assert first != _hook_daemon.socket_path(*here)


def broken_daemon(path: Path, reply: bytes, *, sign: bool = True) -> threading.Thread:
    """A process at the daemon's socket that answers `reply` to one call, signed with the user's
    daemon key for the call's nonce (`sign`), or not: an impostor, which cannot read the key."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)
    secret = _client.key(str(path.parent))
    assert secret is not None

    def serve() -> None:
        with server:
            conn, _ = server.accept()
            with conn:
                request = _client.read_all(conn, 1 << 22, time.monotonic() + 10)
                nonce = _client.parse_request(request)[2]
                conn.sendall(_client.signed(secret, nonce, reply) if sign else reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("reply", [b"not an answer", b"E\nStorageError: disk I/O error", b"7\n0\n{}", b"0\n99\n"])
@pytest.mark.parametrize(("fail", "code"), [("open", 0), ("closed", BLOCK_EXIT)])
def test_a_daemon_that_cannot_answer_goes_to_the_fail_policy(runtime_dir, tmp_path, reply, fail, code):
    state = f"sqlite:///{tmp_path}/h.db"
    path = _hook_daemon.socket_path(None, state)
    assert path is not None
    thread = broken_daemon(path, reply)
    got, out, err = call(pre(CLAUDE_CODE, "s1", 1, "ls"), state, fail=fail)
    thread.join(5)
    assert got == code and "could not check this call" in err and "daemon" in err
    assert out == ("{}\n" if fail == "open" else "")


@pytest.mark.parametrize(
    "reply",
    [
        b"0\n0\n{}",  # "allow", unsigned
        b"0" * 64 + b"\n0\n0\n{}",  # with a signature made up
        b"",  # nothing at all
    ],
)
def test_an_impostor_at_the_daemons_socket_decides_nothing(runtime_dir, tmp_path, reply):
    """The agent can name the socket and put a listener of its own there, but cannot sign: its
    "allow" is not taken, and the halted session's call is decided (refused) without it."""
    state = f"sqlite:///{tmp_path}/h.db"
    events = runaway_and_polling("s-imp")[:12]
    answers = [call(e, state, daemon=False) for e in events]
    assert answers[-2][0] == BLOCK_EXIT  # the loop is cut: the session refuses this call
    path = _hook_daemon.socket_path(None, state)
    assert path is not None
    thread = broken_daemon(path, reply, sign=False)
    got, out, err = call(events[-2], state, fail="open")
    thread.join(5)
    assert got == BLOCK_EXIT and "agent-breaker (" in err, err
    assert "not signed" in err or "did not answer" in err, err


def started_daemon(tmp_path: Path) -> tuple[Path, int]:
    """A daemon on a state of the test's own, serving: its socket and PID."""
    state = f"sqlite:///{tmp_path}/h.db"
    path = _hook_daemon.socket_path(None, state)
    assert path is not None
    _hook_daemon.start(path, None, state)
    wait_serving(path)
    return path, int(path.with_suffix(".lock").read_text())


def test_the_daemon_exits_when_idle_and_takes_its_socket_away(runtime_dir, tmp_path, monkeypatch):
    monkeypatch.setenv(_hook_daemon.IDLE_ENV, "0.5")
    path, pid = started_daemon(tmp_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not path.exists()
    with contextlib.suppress(ChildProcessError):  # our child: reap it, or subprocess already did
        os.waitpid(pid, 0)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert path.with_suffix(".lock").read_text() == ""  # no dead PID left to kill by mistake
    # `hooks status`: nothing runs; the exited daemon's files are removed
    assert _hook_daemon.running(runtime_dir) == ([], 1)
    assert [p.name for p in runtime_dir.iterdir()] == [_client.KEY_FILE]  # the user's key stays


def test_hooks_status_lists_a_running_daemon(runtime_dir, tmp_path, capsys):
    from agent_breaker.cli import main

    path, pid = started_daemon(tmp_path)
    assert _hook_daemon.running(runtime_dir) == ([_hook_daemon.Daemon(path, pid, path.with_suffix(".log"))], 0)
    assert main(["hooks", "status"]) == 0
    out = capsys.readouterr().out
    assert "1 running" in out and f"pid {pid}" in out and str(path) in out


def test_a_daemon_that_cannot_start_is_not_started_again_by_every_call(runtime_dir, tmp_path, monkeypatch):
    import subprocess

    config = tmp_path / "broken.yml"
    config.write_text("custom_data:\n  agent_breaker:\n    no_such_key: 1\n")
    started = []
    real_popen = subprocess.Popen

    def counted(*args: Any, **kwargs: Any) -> Any:
        started.append(args)
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", counted)
    state = f"sqlite:///{tmp_path}/h.db"
    for n in range(3):
        out, err = io.StringIO(), io.StringIO()
        raw = io.BytesIO(json.dumps(pre(CLAUDE_CODE, "s1", n, "ls")).encode())
        code = _hook_command.run(CLAUDE_CODE, raw, out, err, config=str(config), state=state, server=None, fail_closed=True)
        assert code == BLOCK_EXIT and "no_such_key" in err.getvalue()  # the config's error, by the fail policy
    assert len(started) == 1


#: what the hook command may load to hand a call to its daemon: what an interpreter starts with,
#: and these (the rest costs milliseconds before every tool call)
LIGHT = {
    "agent_breaker",
    "agent_breaker.__main__",
    "agent_breaker._about",
    "agent_breaker._errors",
    "agent_breaker._hook_client",
    "agent_breaker._hook_contract",
}
HEAVY = ("dataclasses", "typing", "pathlib", "json", "re", "argparse", "inspect", "enum", "socket", "hashlib")


def test_the_command_as_the_agent_runs_it_asks_the_daemon_loading_nothing_heavy(runtime_dir, tmp_path):
    """`python -m agent_breaker hook ...` in a process of its own, as an agent runs it: with a
    daemon, the same answers as deciding alone, and no module beyond the light ones loaded."""
    import subprocess
    import sys

    state = f"sqlite:///{tmp_path}/d.db"
    path = _hook_daemon.socket_path(None, state)
    assert path is not None
    _hook_daemon.start(path, None, state)
    wait_serving(path)
    probe = (
        "import sys\nfrom agent_breaker.__main__ import main\ncode = main(sys.argv[1:])\n"
        "sys.stderr.write('MODULES ' + ' '.join(sorted(sys.modules)) + '\\n')\nsys.exit(code)\n"
    )
    argv = [sys.executable, "-c", probe, "hook", "claude-code", "--state", state, "--fail=closed"]
    env = {**os.environ, "NEMO_GUARDRAILS_NO_USAGE_STATS": "1"}
    # what the interpreter loads before any of ours (an editable install's finder loads re and pathlib)
    bare = subprocess.run([sys.executable, "-c", "import sys; print(' '.join(sys.modules))"], capture_output=True, env=env)
    started = set(bare.stdout.decode().split())
    events = runaway_and_polling(f"s-{os.getpid()}")[:12]
    answers = []
    for event in events:
        done = subprocess.run(argv, input=json.dumps(event).encode(), capture_output=True, env=env, timeout=60)
        err, _, modules = done.stderr.decode().rpartition("MODULES ")
        loaded = set(modules.split()) - started
        ours = {m for m in loaded if m.startswith("agent_breaker")}
        assert ours == LIGHT and not loaded & set(HEAVY), (ours - LIGHT, loaded & set(HEAVY))
        answers.append((done.returncode, done.stdout.decode(), err))
    alone = [call(e, f"sqlite:///{tmp_path}/a.db", daemon=False) for e in events]
    assert answers == alone and any(code == BLOCK_EXIT for code, _, _ in answers)
