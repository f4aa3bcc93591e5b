"""Every code block of the README and the docs pages runs as a new user pastes it, in order, and
prints what the page shows (tests/_doc_runner.py: how); or it is data the tests load (`yaml`,
`json`: test_doc_blocks.py; `promql`: test_doc_promql.py), or output.

- A `text` block of usage synopses (lines starting `agent-breaker `) may name only options the
  command's `--help` lists.
- Install lines must name this distribution, and the README's test command must be what
  `.ci/run` runs.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from _doc_runner import DATA, FENCE, PAGES, ROOT, RUN, Block, Reader, blocks, commands, run_page, runnable

from agent_breaker import DISTRIBUTION


def test_the_readme_blocks_are_read_with_their_outputs():
    md = "x\n```bash\necho hi\n```\nsays:\n```text\nhi\n```\n```python\nprint(1)\n```\n```json\n{}\n```\n"
    assert blocks(md) == [Block("bash", "echo hi\n", 2, "hi\n"), Block("python", "print(1)\n", 9), Block("json", "{}\n", 12)]
    # a text block under another heading is no block's output
    assert blocks("```bash\nls\n```\n## Usage\n```text\nls [DIR]\n```\n") == [Block("bash", "ls\n", 1)]


def test_every_install_line_names_this_distribution():
    for page in PAGES:
        text = (ROOT / page).read_text()
        wheel = f"$(ls dist/{DISTRIBUTION.replace('-', '_')}-*.whl)["  # built from the clone
        for spec in re.findall(r'pip install (?:-e )?"([^"]+)"', text):
            assert spec.startswith((".[", f"{DISTRIBUTION}[", wheel)) or spec == DISTRIBUTION, (page, spec)


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


def test_install_and_suite_lines_are_not_run_but_what_follows_is():
    assert commands('python3 -m pip install -e ".[nemo]" && agent-breaker demo') == "agent-breaker demo\n"
    venv = 'python3 -m venv .venv && . .venv/bin/activate && python3 -m pip install -e ".[nemo]" && agent-breaker demo'
    assert commands(venv) == "agent-breaker demo\n"
    assert commands('pip install "agent-breaker-rails[nemo]"') is None
    assert commands('python3 -m pip wheel --no-deps -w dist . && python3 -m pip install "$(ls dist/x.whl)[nemo]"') is None
    assert commands('python3 -m pip install -e ".[test]"\npython3 -m pytest -m "not slow"\nbash .ci/run  # CI') is None
    assert commands('python3 -m pip install -e ".[test]" && python3 -m ruff check . && python3 -m pytest -n 2') is None
    assert commands("python3 -m pytest_helper.py") == "python3 -m pytest_helper.py\n"


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if any(runnable(b) for b in blocks((ROOT / p).read_text()))])
def test_every_block_runs_as_pasted_and_prints_what_it_shows(page, tmp_path):
    assert run_page(page, Reader(tmp_path)) >= (6 if page == "README.md" else 1)


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
