"""`agent-breaker replay` on hostile trace files: bad lines are reported by number and the
replay goes on; a reader that stops early is no error."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _server import child_env


def replay(path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agent_breaker.cli", "replay", str(path), *extra],
        env=child_env(),
        capture_output=True,
        timeout=120,
    )


def test_bad_lines_are_reported_by_number_and_the_replay_goes_on(tmp_path):
    trace = tmp_path / "trace.jsonl"
    ok = b'{"session": "a", "type": "tool_call", "tool": "t", "args": {}}\n'
    trace.write_bytes(
        ok
        + b"\xff\xfe not UTF-8\n"
        + b'{"session": "a", "type": "tool_call", "tool": "t", "args": '
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}\n"
        + b'{"session": "a", "type": "tool_call", "tool": "t", "args": {"x": '
        + b"[" * 200
        + b"]" * 200
        + b"}}\n"
        + b'{"session": "a", "type": "tool_call", "tool": "t", "args": {"x": "\\ud800"}}\n'
        + b'{"session": "b", "type": "tool_call", "tool": "t", "args": {}}\n'
    )
    proc = replay(trace)
    err = proc.stderr.decode()
    assert proc.returncode == 1
    assert "line 2: not UTF-8" in err and "line 3: nested too deep" in err
    assert "line 4:" in err and "deeper than 32" in err and "line 5:" in err and "surrogate" in err
    assert b'"session": "b"' in proc.stdout  # the line after them was replayed


@pytest.mark.slow  # a subprocess or a server
def test_a_reader_that_stops_early_is_no_error(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(f'{{"session": "s{i}", "type": "tool_call", "tool": "t", "args": {{}}}}\n' for i in range(20_000)))
    proc = subprocess.run(
        f"{sys.executable} -m agent_breaker.cli replay {trace} | head -1",
        shell=True,
        env=child_env(),
        capture_output=True,
        timeout=120,
    )
    assert proc.stdout.count(b"\n") == 1
    assert b"BrokenPipe" not in proc.stderr and b"Traceback" not in proc.stderr
