"""The real coding agents, from npm, run headless against the scripted model (tests/_model.py),
each set up as docs/coding-agents.md tells users: the settings `hooks print-config` prints, in
the file the guide names, and each trust step the agent needs.

The CLIs are installed once, at pinned versions, into a cache outside the repository
(`$AGENT_BREAKER_TEST_AGENT_CLIS`, else `~/.cache/agent-breaker/agent-clis/<versions>`). Without
Node.js the tests are skipped, saying why; with `AGENT_BREAKER_TEST_REQUIRE_AGENTS=1` (CI) they fail
instead, so a machine that lost node cannot pass them by skipping.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CLAUDE_CODE, CODEX, GEMINI_CLI = "claude-code", "codex", "gemini-cli"
#: agent -> (npm package, pinned version, its binary)
CLIS = {
    CLAUDE_CODE: ("@anthropic-ai/claude-code", "2.1.332", "claude"),
    GEMINI_CLI: ("@google/gemini-cli", "0.61.0", "gemini"),
    CODEX: ("@openai/codex", "0.171.0", "codex"),
}
PROMPT = "The build is broken. Fix it."


def _unavailable(why: str) -> None:
    if os.environ.get("AGENT_BREAKER_TEST_REQUIRE_AGENTS") == "1":
        pytest.fail(f"the real coding agents are required here (AGENT_BREAKER_TEST_REQUIRE_AGENTS=1): {why}")
    pytest.skip(why)


def install() -> Path:
    """The folder of the agents' binaries, installed on first use (a file lock keeps parallel
    test workers from installing twice)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        _unavailable("Node.js and npm are not installed: the real coding agents' tests need them (Node.js 20)")
    specs = sorted(f"{package}@{version}" for package, version, _ in CLIS.values())
    tag = hashlib.sha256(" ".join(specs).encode()).hexdigest()[:12]
    base = os.environ.get("AGENT_BREAKER_TEST_AGENT_CLIS")
    user_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    cache = Path(base) if base else user_cache / "agent-breaker" / "agent-clis"
    folder = cache / tag
    folder.mkdir(parents=True, exist_ok=True)
    bins = folder / "node_modules" / ".bin"
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all((bins / binary).exists() for _, _, binary in CLIS.values()):
            done = subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(folder), *specs],
                capture_output=True,
                text=True,
                timeout=900,
            )
            if done.returncode != 0:
                _unavailable(f"npm install {' '.join(specs)} failed: {done.stderr.strip()[-500:]}")
    return bins


@dataclass
class Home:
    """A scratch user: home, project, the environment the agent and its hooks run in."""

    home: Path
    project: Path
    env: dict[str, str]

    @classmethod
    def make(cls, tmp: Path) -> Home:
        home, project = tmp / "home", tmp / "project"
        for folder in (home, project):
            folder.mkdir(mode=0o700)
        # a short path, as the user's runtime folder is (/run/user/<uid>): a socket's path is
        # bounded, and under a longer one no hook daemon runs
        runtime = Path(tempfile.mkdtemp(prefix="ab-run-"))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "GEMINI_", "GOOGLE_", "OPENAI_", "CODEX_"))}
        env.update(HOME=str(home), XDG_RUNTIME_DIR=str(runtime), XDG_STATE_HOME=str(home / ".local" / "state"))
        env.update(XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"), NO_COLOR="1")
        return cls(home, project, env)

    def agent_breaker(self, *argv: str) -> str:
        """What `agent-breaker ARGV` prints, run as the user runs it."""
        printed = subprocess.run([agent_breaker_path(), *argv], capture_output=True, text=True, env=self.env, timeout=60)
        assert printed.returncode == 0, printed.stderr
        return printed.stdout

    def stop_daemons(self) -> None:
        """Stop the hook daemons this user started (by the PIDs their lock files hold), and
        remove its runtime folder."""
        runtime = Path(self.env["XDG_RUNTIME_DIR"])
        for lock in (runtime / "agent-breaker").glob("hookd-*.lock"):
            with contextlib.suppress(ValueError, OSError):
                os.kill(int(lock.read_text().split()[0]), signal.SIGTERM)
        shutil.rmtree(runtime, ignore_errors=True)


def agent_breaker_path() -> str:
    """This install's `agent-breaker` (beside the interpreter running the tests)."""
    found = Path(sys.executable).with_name("agent-breaker")
    assert found.exists(), f"no agent-breaker beside {sys.executable}"
    return str(found)


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) if not isinstance(data, str) else data, encoding="utf-8")


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def run(
    agent: str,
    bins: Path,
    user: Home,
    model_url: str,
    *,
    turns: int,
    setup: tuple[str, ...] = (),
    prompt: str = PROMPT,
    resume: str | None = None,
) -> Ran:
    """Set the agent up as the guide says (the settings `hooks print-config AGENT SETUP...`
    prints, and for Codex the trust `hooks trust codex SETUP...` prints), then run it headless on
    `prompt` against the scripted model; `resume`: go on with a session (Claude Code: its id;
    the others: their latest)."""
    env = dict(user.env)
    hooks = json.loads(user.agent_breaker("hooks", "print-config", agent, *setup))
    if agent == CLAUDE_CODE:
        _write(user.project / ".claude" / "settings.json", hooks)
        # IS_SANDBOX: CI runs as root, where Claude Code takes --dangerously-skip-permissions only in a sandbox
        env.update(ANTHROPIC_BASE_URL=model_url, ANTHROPIC_API_KEY="sk-scripted", IS_SANDBOX="1")
        env.update(CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_AUTOUPDATER="1")
        argv = [str(bins / "claude"), "-p", prompt, "--max-turns", str(turns + 5), "--dangerously-skip-permissions"]
        argv += ["--output-format", "json"] + (["--resume", resume] if resume else [])
    elif agent == GEMINI_CLI:
        _write(user.project / ".gemini" / "settings.json", hooks)
        # its own loop detection off: it ends a run at the 5th identical call, before the guard
        # is asked (what is under test here is the guard)
        user_settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}, "model": {"disableLoopDetection": True}}
        _write(user.home / ".gemini" / "settings.json", user_settings)
        # a project's hooks run only in a folder the user trusts
        _write(user.home / ".gemini" / "trustedFolders.json", {str(user.project): "TRUST_FOLDER"})
        env.update(GOOGLE_GEMINI_BASE_URL=model_url, GEMINI_API_KEY="scripted")
        argv = [str(bins / "gemini"), "-p", prompt, "--yolo", "--output-format", "json"] + (
            ["--resume", "latest"] if resume else []
        )
    else:
        codex_home = user.home / ".codex"
        _write(codex_home / "hooks.json", hooks)
        trust = user.agent_breaker("hooks", "trust", "codex", *setup)  # Codex runs no hook it has not trusted
        _write(
            codex_home / "config.toml",
            'model = "scripted"\nmodel_provider = "scripted"\n\n[model_providers.scripted]\n'
            f'name = "scripted"\nbase_url = "{model_url}/v1"\nwire_api = "responses"\nenv_key = "SCRIPTED_API_KEY"\n\n' + trust,
        )
        env.update(CODEX_HOME=str(codex_home), SCRIPTED_API_KEY="scripted")
        argv = [str(bins / "codex"), "exec", *(["resume", "--last"] if resume else []), "--skip-git-repo-check"]
        argv += ["--dangerously-bypass-approvals-and-sandbox", prompt]
    done = subprocess.run(argv, cwd=user.project, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    return Ran(done.returncode, done.stdout, done.stderr)


@contextlib.contextmanager
def scratch_user(tmp: Path) -> Iterator[Home]:
    user = Home.make(tmp)
    try:
        yield user
    finally:
        user.stop_daemons()
