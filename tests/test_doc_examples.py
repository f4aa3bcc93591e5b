"""The README's code blocks (and, so far, the python blocks of the Python and NeMo guides) run as
a new user pastes them, in order, and print what the page shows.

- `python` blocks run in a fresh interpreter, `bash` blocks in bash (`-e`); what a block sets
  is in the environment of the blocks after it, as in one shell session; what a block leaves running in the background
  (a server) runs on for the page's next blocks, as in a user's shell, and is stopped (by
  process group) at the page's end.
- A `text` block is the output of the code block before it: its stdout must equal it, or, after
  an interactive command (`nemoguardrails chat`), it is a transcript: each `> ` line is typed and
  the line after it must show up.
- Install lines (`pip install ...`) are not run (the suite runs on the installed package); they
  must name this distribution. The test command is what `.ci/run` runs (tests/test_habits.py).
- Each run gets a home, state and runtime folder of its own; each port a page names (8000,
  8001, ...) becomes a free port.
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
from dataclasses import dataclass
from pathlib import Path

import pytest
from _ports import free_port

from agent_breaker._extras import DISTRIBUTION

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```[ \t]*$", re.M | re.S)
INSTALL = re.compile(r"^(?:python3 -m )?pip install ")
INTERACTIVE = ("nemoguardrails chat",)
DOC_PORT = re.compile(r"\b80[0-9]{2}\b")
BLOCK_TIMEOUT_S = 240


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


def test_the_readme_blocks_are_read_with_their_outputs():
    md = "x\n```bash\necho hi\n```\nsays:\n```text\nhi\n```\n```python\nprint(1)\n```\n```json\n{}\n```\n"
    assert blocks(md) == [Block("bash", "echo hi\n", 2, "hi\n"), Block("python", "print(1)\n", 9), Block("json", "{}\n", 12)]
    # a text block under another heading is no block's output
    assert blocks("```bash\nls\n```\n## Usage\n```text\nls [DIR]\n```\n") == [Block("bash", "ls\n", 1)]


def test_every_install_line_names_this_distribution():
    for block in blocks((ROOT / "README.md").read_text()):
        for line in block.code.splitlines():
            for spec in re.findall(r'pip install (?:-e )?"([^"]+)"', line):
                assert spec.startswith((".[", f"{DISTRIBUTION}[")) or spec == DISTRIBUTION, (block.line, spec)


class Reader:
    """A new user's shell: one environment carried from block to block, in folders of its own."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ports: dict[str, str] = {}
        runtime = tempfile.mkdtemp(prefix="ab-")  # short: a Unix socket's path is bounded
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        (bin_dir / "python3").symlink_to(sys.executable)  # `python3` is the interpreter under test
        # state goes under the reader's home, where the pages say (~/.local/state/agent-breaker)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_BREAKER_", "XDG_STATE_HOME"))}
        self.env.update(
            HOME=str(tmp / "home"),
            XDG_RUNTIME_DIR=runtime,
            NEMO_GUARDRAILS_NO_USAGE_STATS="1",
            PATH=os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), self.env.get("PATH", "")]),
        )
        (tmp / "home").mkdir()
        self.groups: list[int] = []  # the process group of each block run

    def run(self, block: Block) -> str:
        # each port a page names (8000, 8001, ...) is a free port of the reader's own
        code = DOC_PORT.sub(lambda m: self.ports.get(m.group()) or self.ports.setdefault(m.group(), str(free_port())), block.code)
        out, err, env_file = self.tmp / "out", self.tmp / "err", self.tmp / "env"
        if block.lang == "python":
            script = self.tmp / f"block_{block.line}.py"
            script.write_text(code)
            argv = [sys.executable, str(script)]
        else:
            # allexport: a variable a block sets is the next blocks' too, as in one shell session
            argv = ["bash", "-e", "-c", f"set -a\n{code}\nenv -0 > {shlex.quote(str(env_file))}"]
        with out.open("w") as o, err.open("w") as e:
            proc = subprocess.Popen(argv, cwd=self.tmp, env=self.env, stdout=o, stderr=e, start_new_session=True)
            self.groups.append(proc.pid)
            code_ = proc.wait(timeout=BLOCK_TIMEOUT_S)
        assert code_ == 0, f"line {block.line} exited {code_}:\n{err.read_text()[-3000:]}"
        if block.lang == "bash" and env_file.exists():
            pairs = (item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
            self.env = {k: v for k, v in pairs}
        return out.read_text()

    def close(self) -> None:
        """Stop what the blocks left running in the background (a user's shell keeps it until then)."""
        for group in self.groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGTERM)

    def chat(self, block: Block) -> None:
        """An interactive command: type the transcript's `> ` lines, each answer must show up."""
        from _chat_cli import ChatCLI

        expanded = subprocess.run(
            ["bash", "-c", f'set -- {block.code.strip().removeprefix("nemoguardrails chat")}; printf "%s\\0" "$@"'],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\0")[:-1]
        config = expanded[expanded.index("--config") + 1]
        assert block.output is not None, f"README line {block.line}: an interactive command needs its transcript"
        lines = block.output.splitlines()
        cli = ChatCLI(config, self.env)
        try:
            for typed, answer in zip(lines, lines[1:], strict=False):
                if typed.startswith("> ") and not answer.startswith("> "):
                    cli.says(typed[2:], answer)
        finally:
            cli.close()


#: the pages whose blocks run, and which kinds: the README's all; of the guides, so far the
#: python blocks of these (they assume the README's setup: the receipt key exported)
RUN = {
    "README.md": ("bash", "python"),
    "docs/python.md": ("python",),
    "docs/nemo.md": ("bash", "python"),
    "docs/integrations.md": ("python",),
    "docs/operating.md": ("bash", "python"),
    "docs/after-a-trip.md": ("bash", "python"),
}


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(RUN))
def test_every_block_runs_as_pasted_and_prints_what_it_shows(page, tmp_path):
    reader = Reader(tmp_path)
    if page != "README.md":
        reader.env["AGENT_BREAKER_RECEIPT_KEYS"] = "k1:" + os.urandom(32).hex()
    ran = 0
    try:
        for block in blocks((ROOT / page).read_text()):
            first = block.code.strip().splitlines()[0] if block.code.strip() else ""
            if block.lang not in RUN[page] or INSTALL.match(first):
                continue  # data, output, or an install line (checked above)
            if first.startswith(INTERACTIVE):
                reader.chat(block)
            else:
                printed = reader.run(block)
                if block.output is not None:
                    assert printed.strip() == block.output.strip(), f"line {block.line} printed:\n{printed}"
            ran += 1
    finally:
        reader.close()
    assert ran >= (6 if page == "README.md" else 1)
