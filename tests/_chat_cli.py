"""The real `nemoguardrails chat` on a shipped config, under a pseudo-terminal, for tests."""

from __future__ import annotations

import os
import re
import select
import signal
import sys
import time
from collections.abc import Mapping

import pytest

ANSI = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|[@-Z\\-_])")


class ChatCLI:
    """Types lines into the chat CLI and reads its screen; stopped by PID."""

    def __init__(self, config: str, env: Mapping[str, str], python: str = sys.executable, cwd: str | None = None) -> None:
        pty = pytest.importorskip("pty")
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: by default the interpreter running the tests, so the chat is the one installed beside them
            if cwd is not None:
                os.chdir(cwd)  # `-m` imports from the working directory first: a source tree's must not shadow the install
            os.execve(python, [python, "-m", "nemoguardrails", "chat", "--config", config], dict(env))
        self.screen = b""

    def read_until(self, marker: bytes, timeout_s: float, start: int = 0) -> bool:
        """Read the screen until `marker` shows up after position `start`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:
                    return False
                if not chunk:
                    return False
                self.screen += chunk
                if marker in self.screen[start:]:
                    return True
        return False

    def says(self, line: str, expect: str, timeout_s: float = 30) -> None:
        """Type a line; fail unless `expect` shows up after it as text (colours, cursor moves and
        line wrapping aside)."""
        seen = len(self.screen)
        os.write(self.fd, (line + "\n").encode())
        deadline = time.monotonic() + timeout_s
        wanted = " ".join(expect.split())  # the terminal wraps long lines
        while wanted not in " ".join(self.text(seen).split()):
            assert time.monotonic() < deadline and self.read_until(b"\n", deadline - time.monotonic(), len(self.screen)), (
                f"{expect!r} not shown after {line!r}: {self.text(seen)[-1500:]}"
            )

    def text(self, start: int = 0) -> str:
        """The screen from `start`, without terminal escape sequences."""
        return ANSI.sub("", self.screen[start:].decode(errors="replace"))

    def tail(self, n: int = 1500) -> str:
        return self.screen.decode(errors="replace")[-n:]

    def close(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.fd)
