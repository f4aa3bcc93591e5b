"""The docs runner: a page's code blocks run as a new user pastes them, in order, in a shell of
its own (tests/test_doc_examples.py runs every page on the source tree's install;
tests/test_install.py the README on a wheel installed in a fresh virtual environment).

- `python` blocks run in a fresh interpreter, `bash` blocks in bash (`-e`); what a block sets
  is in the environment of the blocks after it, as in one shell session; what a block leaves
  running in the background (a server) runs on for the page's next blocks, as in a user's shell,
  and is stopped (by process group) at the page's end. Nothing is set for a page that the page
  does not set itself.
- A `text` block is the output of the code block before it: its stdout must equal it, or, after
  an interactive command (`nemoguardrails chat`), it is a transcript: each `> ` line is typed and
  the line after it must show up.
- Install lines (`pip install ...`) are not run (the blocks run on the installed package; what
  follows `&&` on the line is). Lines that run this suite are not run either.
- Each run gets a home, state and runtime folder of its own; each port a page names (8000,
  8001, ...) becomes a free port; a page that names the Redis on 127.0.0.1:6379 gets a
  redis-server of its own on a free port instead (fleet commands list and change whatever the
  Redis holds, so they must not see other tests' keys), stopped by PID at the page's end.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _ports import free_port
from _redis import RedisServer

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```[ \t]*$", re.M | re.S)
#: set-up at the start of a line, through its `&&`: a virtual environment made and entered, a
#: package built or installed. Not run: the blocks run on the install under test
SETUP = re.compile(r"^(?:python3 -m venv \S+|\. \S+/bin/activate|(?:python3 -m )?pip (?:install|wheel) .*?)(?: && |$)")
INTERACTIVE = ("nemoguardrails chat",)
DOC_PORT = re.compile(r"\b80[0-9]{2}\b")
DOC_REDIS = "127.0.0.1:6379"
BLOCK_TIMEOUT_S = 240
#: every page of the docs site (the generated reference pages are written at build time)
PAGES = sorted(["README.md", "CONTRIBUTING.md", *(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))])


@dataclass
class Block:
    lang: str
    code: str
    line: int
    output: str | None = None


def blocks(text: str) -> list[Block]:
    """The code blocks of a Markdown text, each with the `text` block that follows it, if any."""
    found: list[Block] = []
    end = 0
    for m in FENCE.finditer(text):
        lang, code, line = m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1
        if lang == "text":
            # the output of the code block before it in the same section (a synopsis under a new
            # heading is nobody's output)
            if found and found[-1].output is None and "\n#" not in text[end : m.start()]:
                found[-1].output = code
            continue
        found.append(Block(lang, code, line))
        end = m.end()
    return found


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


class Reader:
    """A new user's shell: one environment carried from block to block, in folders of its own;
    `python` (and `python3` on its PATH) is the interpreter whose install the blocks run."""

    def __init__(self, tmp: Path, python: str = sys.executable) -> None:
        self.tmp = tmp
        self.python = python
        self.ports: dict[str, str] = {}
        runtime = tempfile.mkdtemp(prefix="ab-")  # short: a Unix socket's path is bounded
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        # `python3` is the interpreter under test: a script that starts it by its own path, since
        # a link to a virtual environment's interpreter would start the base one outside it
        launcher = bin_dir / "python3"
        launcher.write_text(f'#!/bin/sh\nexec {shlex.quote(python)} "$@"\n')
        launcher.chmod(0o755)
        # state goes under the reader's home, where the pages say (~/.local/state/agent-breaker)
        # nothing of the test run's own: no key, no state folder, no Redis (a page sets what it needs)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_BREAKER_", "XDG_STATE_HOME", "REDIS_URL"))}
        self.env.update(
            HOME=str(tmp / "home"),
            XDG_RUNTIME_DIR=runtime,
            NEMO_GUARDRAILS_NO_USAGE_STATS="1",
            PATH=os.pathsep.join([str(bin_dir), str(Path(python).parent), self.env.get("PATH", "")]),
        )
        (tmp / "home").mkdir()
        # the pages run from a clone: the recorded runs they replay are the clone's
        (tmp / "tests").mkdir()
        (tmp / "tests" / "traces").symlink_to(ROOT / "tests" / "traces")
        self.groups: list[int] = []  # the process groups of blocks that left something running
        self.redis: RedisServer | None = None

    def run(self, block: Block) -> str:
        # each port a page names (8000, 8001, ...) is a free port of the reader's own
        code = DOC_PORT.sub(lambda m: self.ports.get(m.group()) or self.ports.setdefault(m.group(), str(free_port())), block.code)
        if DOC_REDIS in code:
            code = code.replace(DOC_REDIS, self.own_redis())
        # files of the block's own: what an earlier block left running writes to its own
        out, err, env_file = (self.tmp / f"{name}_{block.line}" for name in ("out", "err", "env"))
        if block.lang == "python":
            script = self.tmp / f"block_{block.line}.py"
            script.write_text(code)
            argv = [self.python, str(script)]
        else:
            # allexport: a variable a block sets is the next blocks' too, as in one shell session
            argv = ["bash", "-e", "-c", f"set -a\n{code}\nenv -0 > {shlex.quote(str(env_file))}"]
        with out.open("w") as o, err.open("w") as e:
            proc = subprocess.Popen(argv, cwd=self.tmp, env=self.env, stdout=o, stderr=e, start_new_session=True)
            code_ = proc.wait(timeout=BLOCK_TIMEOUT_S)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 0)  # the group lives on (a server in the background): stopped at the page's end
            self.groups.append(proc.pid)
        assert code_ == 0, f"line {block.line} exited {code_}:\n{err.read_text()[-3000:]}"
        if block.lang == "bash" and env_file.exists():
            pairs = (item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
            self.env = {k: v for k, v in pairs}
        return out.read_text()

    def own_redis(self) -> str:
        """The address of the page's own redis-server, started on first use."""
        if self.redis is None:
            self.redis = RedisServer(str(self.tmp))
            self.redis.start()
            self.env["REDIS_URL"] = self.redis.url  # the shipped Redis config's default, moved too
        return self.redis.address

    def close(self) -> None:
        """Stop what the blocks left running in the background (a user's shell keeps it until
        then): SIGTERM, then SIGKILL to what is still there after a few seconds."""
        for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
            for group in self.groups:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, sig)
            deadline = time.monotonic() + grace
            while self.groups and time.monotonic() < deadline:
                self.groups = [g for g in self.groups if _alive(g)]
                time.sleep(0.1)
        if self.redis is not None:
            self.redis.stop()

    def chat(self, block: Block) -> None:
        """An interactive command: type the transcript's `> ` lines, each answer must show up."""
        from _chat_cli import ChatCLI

        expanded = subprocess.run(
            ["bash", "-c", f'set -- {block.code.strip().removeprefix("nemoguardrails chat")}; printf "%s\\0" "$@"'],
            env=self.env,
            cwd=self.tmp,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\0")[:-1]
        config = expanded[expanded.index("--config") + 1]
        assert block.output is not None, f"README line {block.line}: an interactive command needs its transcript"
        lines = block.output.splitlines()
        cli = ChatCLI(config, self.env, self.python, str(self.tmp))
        try:
            for typed, answer in zip(lines, lines[1:], strict=False):
                if typed.startswith("> ") and not answer.startswith("> "):
                    cli.says(typed[2:], answer)
        finally:
            cli.close()


#: what a block may be: run (`bash`, `python`), its output (`text`), or data that
#: tests/test_doc_blocks.py loads (`yaml`, `json`, `promql`)
RUN, DATA = ("bash", "python"), ("text", "yaml", "json", "promql")
#: commands that run this test suite itself: not run here (CI runs them), held to .ci/run below
SUITE = re.compile(r"(?:^|&& )(?:HYPOTHESIS_PROFILE=\S+ )?python3 -m pytest\b|^bash \.ci/run\b")
#: ids made up at run time: an escalation's (`esc_` and 16 hex digits) matches any other
MADE_UP = re.compile(r"\besc_[0-9a-f]{16}\b")


def commands(code: str) -> str | None:
    """What of a block runs here: without its leading set-up (`python3 -m venv .venv && .
    .venv/bin/activate && pip install ... && rest`: the blocks run on the install under test),
    nor lines that run this suite; None when nothing is left."""
    kept = []
    for line in code.strip().splitlines():
        while (setup := SETUP.match(line)) is not None:
            line = line[setup.end() :]
        if line and not SUITE.search(line):
            kept.append(line)
    return "\n".join(kept) + "\n" if kept else None


def runnable(block: Block) -> str | None:
    """The code of a block that runs here, or None."""
    return commands(block.code) if block.lang == "bash" else block.code if block.lang in RUN else None


def run_page(page: str, reader: Reader) -> int:
    """Run every block of `page` that runs here, each compared with the output the page shows;
    how many ran."""
    ran = 0
    try:
        for block in blocks((ROOT / page).read_text()):
            code = runnable(block)
            if code is None:
                continue  # data, output, an install line or the suite
            block = Block(block.lang, code, block.line, block.output)
            if code.startswith(INTERACTIVE):
                reader.chat(block)
            else:
                printed = reader.run(block)
                if block.output is not None:
                    shown = MADE_UP.sub("esc_", block.output.strip())
                    assert MADE_UP.sub("esc_", printed.strip()) == shown, f"{page} line {block.line} printed:\n{printed}"
            ran += 1
    finally:
        reader.close()
    return ran
