"""Every code block of the README and the docs pages runs as a new user pastes it, in order, and
prints what the page shows; or it is data the tests load (`yaml`, `json`: test_doc_blocks.py;
`promql`: test_doc_promql.py), or output.

- `python` blocks run in a fresh interpreter, `bash` blocks in bash (`-e`); what a block sets
  is in the environment of the blocks after it, as in one shell session; what a block leaves
  running in the background (a server) runs on for the page's next blocks, as in a user's shell,
  and is stopped (by process group) at the page's end. Nothing is set for a page that the page
  does not set itself.
- A `text` block is the output of the code block before it: its stdout must equal it, or, after
  an interactive command (`nemoguardrails chat`), it is a transcript: each `> ` line is typed and
  the line after it must show up.
- A `text` block of usage synopses (lines starting `agent-breaker `) may name only options the
  command's `--help` lists.
- Install lines (`pip install ...`) are not run (the suite runs on the installed package; what
  follows `&&` on the line is); they must name this distribution. Lines that run this suite
  are not run either: the README's test command must be what `.ci/run` runs.
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

import pytest
from _ports import free_port
from _redis import RedisServer

from agent_breaker._extras import DISTRIBUTION

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```[ \t]*$", re.M | re.S)
INSTALL = re.compile(r"^(?:python3 -m )?pip install ")
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


def test_the_readme_blocks_are_read_with_their_outputs():
    md = "x\n```bash\necho hi\n```\nsays:\n```text\nhi\n```\n```python\nprint(1)\n```\n```json\n{}\n```\n"
    assert blocks(md) == [Block("bash", "echo hi\n", 2, "hi\n"), Block("python", "print(1)\n", 9), Block("json", "{}\n", 12)]
    # a text block under another heading is no block's output
    assert blocks("```bash\nls\n```\n## Usage\n```text\nls [DIR]\n```\n") == [Block("bash", "ls\n", 1)]


def test_every_install_line_names_this_distribution():
    for page in PAGES:
        text = (ROOT / page).read_text()
        for spec in re.findall(r'pip install (?:-e )?"([^"]+)"', text):
            assert spec.startswith((".[", f"{DISTRIBUTION}[")) or spec == DISTRIBUTION, (page, spec)


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


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
        # nothing of the test run's own: no key, no state folder, no Redis (a page sets what it needs)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_BREAKER_", "XDG_STATE_HOME", "REDIS_URL"))}
        self.env.update(
            HOME=str(tmp / "home"),
            XDG_RUNTIME_DIR=runtime,
            NEMO_GUARDRAILS_NO_USAGE_STATS="1",
            PATH=os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), self.env.get("PATH", "")]),
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
            argv = [sys.executable, str(script)]
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


#: what a block may be: run (`bash`, `python`), its output (`text`), or data that
#: tests/test_doc_blocks.py loads (`yaml`, `json`, `promql`)
RUN, DATA = ("bash", "python"), ("text", "yaml", "json", "promql")
#: commands that run this test suite itself: not run here (CI runs them), held to .ci/run below
SUITE = re.compile(r"^(?:HYPOTHESIS_PROFILE=\S+ )?python3 -m pytest\b|^bash \.ci/run\b")
#: ids made up at run time: an escalation's (`esc_` and 16 hex digits) matches any other
MADE_UP = re.compile(r"\besc_[0-9a-f]{16}\b")


def test_every_block_is_run_or_data():
    for page in PAGES:
        for block in blocks((ROOT / page).read_text()):
            assert block.lang in RUN + DATA, f"{page} line {block.line}: a ```{block.lang} block is neither run nor checked"


def test_the_readme_test_command_is_what_ci_runs():
    readme = [b.code.strip() for b in blocks((ROOT / "README.md").read_text()) if "pytest" in b.code]
    ci = (ROOT / ".ci" / "run").read_text()
    lines = ci.split("# the README's test command")[1].splitlines()[1:3]
    command = " ".join(line.strip().removesuffix("\\").strip() for line in lines)
    assert readme == [command.replace("pip install -q ", "pip install ")]  # CI's install is quiet


def commands(code: str) -> str | None:
    """What of a block runs here: without a leading install (`pip install ... && rest`: the suite
    runs on the installed package; the install lines name this distribution, checked above),
    nor lines that run this suite; None when nothing is left."""
    kept = []
    for line in code.strip().splitlines():
        if INSTALL.match(line):
            _, _, line = line.partition(" && ")
        if line and not SUITE.match(line):
            kept.append(line)
    return "\n".join(kept) + "\n" if kept else None


def test_install_and_suite_lines_are_not_run_but_what_follows_is():
    assert commands('python3 -m pip install -e ".[nemo]" && agent-breaker demo') == "agent-breaker demo\n"
    assert commands('pip install "agent-breaker-rails[nemo]"') is None
    assert commands('python3 -m pip install -e ".[test]"\npython3 -m pytest -m "not slow"\nbash .ci/run  # CI') is None
    assert commands("python3 -m pytest_helper.py") == "python3 -m pytest_helper.py\n"


def runnable(block: Block) -> str | None:
    """The code of a block that runs here, or None."""
    return commands(block.code) if block.lang == "bash" else block.code if block.lang in RUN else None


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if any(runnable(b) for b in blocks((ROOT / p).read_text()))])
def test_every_block_runs_as_pasted_and_prints_what_it_shows(page, tmp_path):
    reader = Reader(tmp_path)
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
                    assert MADE_UP.sub("esc_", printed.strip()) == shown, f"line {block.line} printed:\n{printed}"
            ran += 1
    finally:
        reader.close()
    assert ran >= (6 if page == "README.md" else 1)


def synopses() -> list[tuple[str, str]]:
    """(page, line) of each usage synopsis: a `text` line that starts with `agent-breaker `."""
    found = []
    for page in PAGES:
        for m in FENCE.finditer((ROOT / page).read_text()):
            if m.group(1) == "text":
                found += [(page, line) for line in m.group(2).splitlines() if line.startswith("agent-breaker ")]
    return found


def test_every_synopsis_names_only_options_its_command_takes():
    assert len(synopses()) >= 5
    for page, line in synopses():
        words = line.split()[1:3]
        # `escalations list` is a subcommand's subcommand; `replay TRACE.jsonl` is not
        for path in (words, words[:1]):
            helped = subprocess.run([sys.executable, "-m", "agent_breaker.cli", *path, "--help"], capture_output=True, text=True)
            if helped.returncode == 0:
                break
        assert helped.returncode == 0, (page, line, helped.stderr)
        for option in re.findall(r"--[a-z][a-z-]*", line):
            assert re.search(rf"{option}(?![\w-])", helped.stdout), f"{page}: {line!r} names {option}, which {path} does not take"
