"""What users install, tested as they install it: the sdist and the wheel built as a release
builds them, their contents held to the source tree, and the wheel installed into fresh virtual
environments (with the NeMo extra, and bare) and run from there, out of the source tree's reach.

The rest of the suite runs on an editable install of the tree, which hides a module the wheel
lacks; these tests are the ones that would see it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from _doc_runner import Reader, run_page
from _server import call, start

from agent_breaker import DISTRIBUTION

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
#: where each folder of the tree lands in the wheel (setup.py maps the NeMo glue into the package)
PLACES = {
    "agent_breaker": "agent_breaker",
    "actions": "agent_breaker/actions",
    "rails": "agent_breaker/rails",
    "config": "agent_breaker/configs",
}
INSTALL_TIMEOUT_S = 600
STATS_SWITCH = "NEMO_GUARDRAILS_NO_USAGE_STATS"
TOKEN = "install-test-token-" + "x" * 24


def tree_files() -> dict[str, str]:
    """Every file of the package in the source tree (its path in the tree: its name in the wheel)."""
    names = {}
    for folder, place in PLACES.items():
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                inside = path.relative_to(ROOT / folder).as_posix()
                names[f"{folder}/{inside}"] = f"{place}/{inside}"
    return names


def run(argv: list[Any], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """A command that must succeed; what it printed, in the failure's message. It runs in an
    empty folder of its own unless told otherwise: `python -c` and `python -m` import from their
    working directory first (the source tree, or a stray `inspect.py` in /tmp, would shadow what
    is installed)."""
    with tempfile.TemporaryDirectory() as empty:
        kwargs.setdefault("cwd", empty)
        done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, **kwargs)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist, and the wheel built from it, as `python -m build` makes them for a release."""
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", out, ROOT])
    return out


def wheel_of(dist: Path) -> Path:
    [wheel] = dist.glob("*.whl")
    return wheel


def fresh_venv(where: Path, requirement: str) -> Path:
    """A new virtual environment holding `requirement` and what it needs; its interpreter."""
    run([sys.executable, "-m", "venv", where])
    python = where / "bin" / "python"
    run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", requirement])
    return python


def user_env(home: Path, **extra: str) -> dict[str, str]:
    """A user's shell as the docs leave it: none of the test run's AGENT_BREAKER_* variables,
    nothing of the source tree on the import path, a home and a runtime folder of its own (a
    short path: a daemon's socket path is bounded)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_BREAKER_", "PYTHON", "VIRTUAL_ENV"))}
    home.mkdir(exist_ok=True)
    return {**env, "HOME": str(home), "XDG_RUNTIME_DIR": tempfile.mkdtemp(prefix="ab-"), **extra}


# ---------------------------------------------------------------------------------- what is built


def test_the_wheel_holds_every_module_and_data_file_of_the_tree_and_nothing_else(dist):
    names = set(zipfile.ZipFile(wheel_of(dist)).namelist())
    package = {n for n in names if not n.startswith(f"{DISTRIBUTION.replace('-', '_')}-")}
    assert set(tree_files().values()) - package == set(), "missing from the wheel"
    assert package - set(tree_files().values()) == set(), "in the wheel, not in the tree"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


def test_the_sdist_holds_the_tree_the_wheel_is_built_from(dist):
    [sdist] = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert set(tree_files()) - names == set(), "missing from the sdist"
    assert {"pyproject.toml", "setup.py", "README.md", "LICENSE", "CHANGELOG.md"} <= names


def test_the_built_files_pass_twine_check(dist):
    out = run([sys.executable, "-m", "twine", "check", "--strict", *sorted(dist.iterdir())])
    assert out.stdout.count("PASSED") == 2, out.stdout


# ----------------------------------------------------------------- the wheel with NeMo, as users run it


@pytest.fixture(scope="module")
def nemo_venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fresh_venv(tmp_path_factory.mktemp("venv") / "nemo", f"{wheel_of(dist)}[nemo]")


def test_version_is_the_distributions(nemo_venv, tmp_path):
    from importlib.metadata import version

    out = run([nemo_venv.parent / "agent-breaker", "--version"], env=user_env(tmp_path / "home"), cwd=tmp_path).stdout
    site = run([nemo_venv, "-c", "import agent_breaker; print(agent_breaker.__file__)"], cwd=tmp_path).stdout.strip()
    assert out.startswith(f"{DISTRIBUTION} {version(DISTRIBUTION)} ({Path(site).parent}, Python ")
    assert Path(site).is_relative_to(nemo_venv.parents[1]), "the package came from outside the fresh environment"


def test_the_readme_runs_as_pasted_on_the_installed_wheel(nemo_venv, tmp_path):
    """The demo with its whole output, the engine and RailsConfig quick starts, NeMo's server,
    `serve` and its gateway check, the chat: every block of the README, from the wheel."""
    assert run_page("README.md", Reader(tmp_path, python=str(nemo_venv))) >= 6


def test_serve_records_no_nemo_usage_statistics_unless_the_user_turns_them_on(nemo_venv, tmp_path):
    recorded = {}
    for switch in (None, "0"):  # NeMo's own switch: 0 is "on"
        home = tmp_path / f"home-{switch}"
        # NeMo records nothing under pytest or CI: the server runs without either, as a user's does
        env = {k: v for k, v in user_env(home).items() if k not in ("PYTEST_CURRENT_TEST", "CI", "DO_NOT_TRACK", STATS_SWITCH)}
        env.update({STATS_SWITCH: switch} if switch else {})
        env.update(AGENT_BREAKER_RECEIPT_KEYS="k1:" + "ab" * 32, AGENT_BREAKER_API_TOKEN=TOKEN)
        server = start(command=(str(nemo_venv.parent / "agent-breaker"),), env=env, token=TOKEN)
        try:
            assert server.post("/v1/agent-breaker/check", {"session_id": "s", "event": call(1)}).status_code == 200
        finally:
            server.stop()
        recorded[switch] = (home / ".config" / "nemoguardrails" / "usage_stats.json").exists()
    assert recorded == {None: False, "0": True}


def test_the_printed_hook_command_denies_the_fifth_identical_failing_call(nemo_venv, tmp_path):
    env = user_env(tmp_path / "home")
    printed = run([nemo_venv.parent / "agent-breaker", "hooks", "print-config", "claude-code"], env=env, cwd=tmp_path)
    command = json.loads(printed.stdout)["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    assert shlex.split(command)[0] == str(nemo_venv.parent / "agent-breaker") and "print them again" in printed.stderr
    env["PATH"] = "/usr/bin:/bin"  # the agent's shell: no virtual environment on its PATH
    answers = []
    try:
        for n in range(1, 6):
            call = {"session_id": "s-wheel", "transcript_path": "", "cwd": str(tmp_path), "tool_use_id": f"t{n}"}
            call.update(tool_name="Bash", tool_input={"command": "make build"})
            answers.append(hook(command, {**call, "hook_event_name": "PreToolUse"}, env))
            error = "Exit code 2\nmake: *** No rule to make target 'build'.  Stop."
            hook(command, {**call, "hook_event_name": "PostToolUseFailure", "error": error, "is_interrupt": False}, env)
    finally:
        stop_daemons(Path(env["XDG_RUNTIME_DIR"]))
    assert [code for code, _ in answers] == [0, 0, 0, 0, 2], answers
    assert "additionalContext" in answers[3][1] and "identical_failure" in answers[4][1]


def hook(command: str, event: dict[str, Any], env: dict[str, str]) -> tuple[int, str]:
    """One hook call as an agent makes it (the command line through a shell): its exit code and
    what it printed."""
    done = subprocess.run(["sh", "-c", command], input=json.dumps(event), capture_output=True, text=True, env=env)
    assert done.returncode in (0, 2), done.stderr
    return done.returncode, done.stdout + done.stderr


# --------------------------------------------------------------------- the core wheel, without extras


@pytest.fixture(scope="module")
def core_venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fresh_venv(tmp_path_factory.mktemp("venv") / "core", str(wheel_of(dist)))


ENGINE_LOOP = """
import sys
from agent_breaker import Engine

engine = Engine()
for attempt in range(1, 10):
    verdict = engine.check_tool_call({"session": "s1", "tool": "run_sql", "args": {"q": "SELEC 1"}})
    if not verdict.allowed:
        break
    engine.record_tool_result({"session": "s1", "tool": "run_sql", "ok": False, "error": "syntax error"})
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("nemoguardrails", "redis", "langchain", "litellm"))
print(attempt, verdict.heuristic, heavy)
"""


def test_the_core_install_cuts_a_loop_without_nemo_or_redis(core_venv, tmp_path):
    env = user_env(tmp_path / "home", AGENT_BREAKER_RECEIPT_KEYS="k1:" + "ab" * 32)  # as the README exports it
    out = run([core_venv, "-c", ENGINE_LOOP], env=env, cwd=tmp_path).stdout
    assert out.split(maxsplit=2) == ["5", "identical_failure", "[]\n"]
    absent = run([core_venv, "-c", "import importlib.util as u; print(u.find_spec('nemoguardrails'), u.find_spec('redis'))"])
    assert absent.stdout.split() == ["None", "None"]  # not installed at all: nothing could have pulled them in
    demo = subprocess.run(
        [core_venv.parent / "agent-breaker", "demo"], capture_output=True, text=True, env=user_env(tmp_path / "home")
    )
    assert demo.returncode == 2 and f'pip install "{DISTRIBUTION}[nemo]"' in demo.stderr


def test_the_engine_pulls_in_no_nemo_even_where_it_is_installed(nemo_venv, tmp_path):
    env = user_env(tmp_path / "home", AGENT_BREAKER_RECEIPT_KEYS="k1:" + "ab" * 32)
    out = run([nemo_venv, "-c", ENGINE_LOOP], env=env, cwd=tmp_path).stdout
    assert out.split(maxsplit=2) == ["5", "identical_failure", "[]\n"]


def test_a_broken_install_says_so_and_never_passes_for_a_decision(core_venv, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(core_venv.parents[1], broken, symlinks=True)
    # a venv names its own path in its scripts: the copy's command runs the copy's interpreter
    script = broken / "bin" / "agent-breaker"
    script.write_text(script.read_text().replace(str(core_venv.parents[1]), str(broken)))
    [engine] = broken.glob("lib/python*/site-packages/agent_breaker/engine")
    shutil.rmtree(engine)
    call = {"session_id": "s", "transcript_path": "", "cwd": str(tmp_path), "hook_event_name": "PreToolUse"}
    call.update(tool_name="Bash", tool_input={"command": "ls"}, tool_use_id="t1")
    env = user_env(tmp_path / "home", AGENT_BREAKER_HOOK_DAEMON="off")
    for fail, code in ((None, 1), ("closed", 2)):
        argv = [script, "hook", "claude-code", *(["--fail", fail] if fail else [])]
        out = subprocess.run(argv, input=json.dumps(call), capture_output=True, text=True, env=env, cwd=tmp_path)
        lines = out.stderr.splitlines()
        assert out.returncode == code and out.stdout == "" and len(lines) == 1, out
        assert "agent_breaker.engine" in lines[0] and f"pip install --force-reinstall {wheel_of_install(core_venv)}" in lines[0]


def wheel_of_install(python: Path) -> str:
    """The file the environment's package was installed from, as pip recorded it."""
    code = f"from importlib.metadata import distribution; print(distribution({DISTRIBUTION!r}).read_text('direct_url.json'))"
    return json.loads(run([python, "-c", code]).stdout)["url"].removeprefix("file://")


# ------------------------------------------------------------------------------------------ helpers


def stop_daemons(runtime: Path) -> None:
    """Stop the hook daemons started in the runtime folder, by PID."""
    for lock in (runtime / "agent-breaker").glob("hookd-*.lock"):
        pid = lock.read_text().strip()
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGTERM)
