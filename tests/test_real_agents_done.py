"""The guard at the end of a turn, on the real Claude Code, Gemini CLI and Codex (`Stop`, Gemini
CLI's `AfterAgent`): a model that ran a failing test and then says the tests pass is sent back to
work once with the guard's reason (`done_claim`), headless against the scripted model, guarded by
the hooks exactly as `hooks print-config` prints them (the coding config).

The project is a real one: `calc.py` and a `pytest` file for it. The model edits `calc.py` with
the agent's own edit tool (Claude Code: Read then Edit; Gemini CLI: write_file; Codex: its
shell), runs `python -m pytest -q test_calc.py` (the interpreter running these tests, by its
path), then ends its turn with text. What reached the model after each of its ends of turn is
read from the requests it got."""

from __future__ import annotations

import html
import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _agents import CLAUDE_CODE, GEMINI_CLI, Home, Ran, agent_breaker_path, run
from _model import Scenario, ScriptedModel, serving
from test_real_agents import bins, pytest_generate_tests, user  # noqa: F401  (its fixtures, and `agent` per module)

pytestmark = pytest.mark.slow

#: the agent each module runs (test_real_agents_done_gemini.py and _codex.py take these tests)
AGENTS = [CLAUDE_CODE]

#: the interpreter beside these tests, which has pytest, by its path: Codex runs commands in a login
#: shell, whose profile sets PATH anew
TEST = f"{shlex.quote(sys.executable)} -m pytest -q test_calc.py"
#: how the guard's reason names it (the interpreter aside)
NAMED = "pytest -q test_calc.py"
BUGGY = "def add(a, b):\n    return a - b\n"
STILL_WRONG = "def add(a, b):\n    return b\n"  # 1 failed, 1 passed
FIXED = "def add(a, b):\n    return a + b\n"  # 2 passed
TESTS = (
    "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n\n\ndef test_add_zero():\n    assert add(0, 3) == 3\n"
)

CLAIM = "All tests pass now."
TRUTH = "The test still fails: test_add expects add(2, 2) == 4 and add returns 2. I have not fixed it yet."
REASON = "agent-breaker (done_claim): "
#: the turns the default `done_claim.max_refusals_per_turn` sends back before a claim goes through
MAX_REFUSALS = 2


def project(user: Home) -> None:
    """calc.py with its bug, and its tests."""
    (user.project / "calc.py").write_text(BUGGY)
    (user.project / "test_calc.py").write_text(TESTS)


def edit_then_test(agent: str, user: Home, content: str) -> list:
    """The model's calls: an edit of calc.py to `content` with the agent's own tool, then the test."""
    path = str(user.project / "calc.py")
    if agent == CLAUDE_CODE:  # Claude Code edits a file only once it has read it
        edits: list = [
            {"tool": "Read", "input": {"file_path": path}, "verbatim": True},
            {"tool": "Edit", "input": {"file_path": path, "old_string": BUGGY, "new_string": content}, "verbatim": True},
        ]
    elif agent == GEMINI_CLI:
        edits = [{"tool": "write_file", "input": {"file_path": path, "content": content}}]
    else:
        edits = [f"cat > calc.py <<'EOF'\n{content}EOF"]
        # Codex hands back a command still running after 10 s with no exit status (it runs on):
        # the test's own wait, the most its tool takes
        return [*edits, {"tool": "exec_command", "input": {"cmd": TEST, "yield_time_ms": 30_000}}]
    return [*edits, TEST]


def done_run(agent: str, bins: Path, user: Home, content: str, closing) -> tuple[ScriptedModel, Ran]:
    calls = edit_then_test(agent, user, content)
    model = ScriptedModel(Scenario(lambda n: calls[n], len(calls), closing))
    started = time.monotonic()
    with serving(model) as url:
        ran = run(agent, bins, user, url, turns=len(calls) + MAX_REFUSALS + 2)
    print(f"{agent}: exit {ran.returncode} in {time.monotonic() - started:.1f}s; sent back {model.closings_read()} times")
    return model, ran


def texts(items: str | None) -> list[str]:
    """The strings in conversation items (JSON text), XML and HTML entities undone (Codex writes a
    hook's words as XML)."""
    found: list[str] = []

    def walk(value) -> None:
        if isinstance(value, str):
            found.append(html.unescape(value))
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(json.loads(items) if items else [])
    return found


def reason_in(items: str | None) -> str | None:
    """The guard's done_claim reason in what the model read, as the agent wrapped it (Claude
    Code: "Stop hook feedback:" and the text; Codex: a <hook_prompt>; Gemini CLI: the text as a
    prompt), or None."""
    for text in texts(items):
        if REASON in text:
            reason = text[text.index(REASON) :]
            for end in ("</hook_prompt>", "</system-reminder>"):
                reason = reason.split(end)[0]
            return reason.strip()
    return None


def guard_spoke(model: ScriptedModel) -> bool:
    with model.lock:
        return any("agent-breaker (" in t for s in model.seen for t in texts(json.dumps(s.conversation)))


def test_a_claim_that_tests_pass_after_a_failing_run_is_sent_back_with_the_failure(bins, user, agent):
    """The model's edit leaves a test failing; it says the tests pass. The stop is refused: the
    model's next request carries the guard's reason, which names the failing command and its
    exit status. It then says the truth, and the agent stops there."""
    project(user)
    model, ran = done_run(agent, bins, user, STILL_WRONG, lambda k: CLAIM if k == 0 else TRUTH)
    assert "1 failed, 1 passed" in (model.news(model.scenario.turns) or ""), model.news(model.scenario.turns)  # pytest ran
    reason = reason_in(model.after_closing(1))
    print(f"{agent}: the model read {reason!r}")
    assert reason is not None, (model.closings_read(), ran.returncode, ran.stderr[-2000:])
    assert reason.startswith(REASON) and NAMED in reason, reason
    assert re.search(r"\bexit\w*\W+(?:\w+\W+){0,3}?1\b", reason), reason  # "exit 1", "exited with status 1", ...
    # the truth went through: no request after it, the run ended well with it
    assert model.closings_read() == 1 and model.after_closing(2) is None
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert TRUTH in ran.stdout, ran.stdout[-2000:]


def test_a_claim_after_a_passing_run_ends_the_turn_at_once(bins, user, agent):
    """The model's edit fixes the bug, the tests pass, it says so: the agent stops at once, and
    the guard says nothing to the model."""
    project(user)
    model, ran = done_run(agent, bins, user, FIXED, lambda k: "All tests pass.")
    assert (user.project / "calc.py").read_text() == FIXED  # the edit was made
    assert "2 passed" in (model.news(model.scenario.turns) or ""), model.news(model.scenario.turns)  # pytest ran
    assert model.commands_asked() == len(edit_then_test(agent, user, FIXED))
    assert model.closings_read() == 0 and not guard_spoke(model)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "All tests pass." in ran.stdout, ran.stdout[-2000:]


def incidents(user: Home, heuristic: str) -> list[dict]:
    """The guard's incidents of `heuristic`, beside its state (the daemon may write them a moment
    after its answer: until one that is no refusal, the stop let through, is there)."""
    path = user.home / ".local" / "state" / "agent-breaker" / "hooks.incidents.jsonl"
    found: list[dict] = []
    for _ in range(50):
        lines = path.read_text().splitlines() if path.exists() else []
        found = [i for i in map(json.loads, lines) if i.get("heuristic") == heuristic]
        if found and found[-1].get("severity") != "block":
            break
        time.sleep(0.1)
    return found


def test_a_claim_repeated_after_each_refusal_goes_through_after_two_and_is_on_record(bins, user, agent):
    """The model says the tests pass after a failing run, and again each time it is sent back:
    it is sent back twice (`done_claim.max_refusals_per_turn`), then the stop goes through and
    the agent exits. What the guard did is on record for `agent-breaker report`."""
    project(user)
    model, ran = done_run(agent, bins, user, STILL_WRONG, lambda k: CLAIM)
    assert "1 failed, 1 passed" in (model.news(model.scenario.turns) or ""), model.news(model.scenario.turns)  # pytest ran
    reasons = [reason_in(model.after_closing(k)) for k in range(1, MAX_REFUSALS + 1)]
    print(f"{agent}: the model read {reasons}")
    assert all(r is not None and r.startswith(REASON) and NAMED in r for r in reasons), (reasons, ran.stderr[-2000:])
    assert model.closings_read() == MAX_REFUSALS and model.after_closing(MAX_REFUSALS + 1) is None
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert CLAIM in ran.stdout, ran.stdout[-2000:]
    recorded = incidents(user, "done_claim")
    print(f"{agent}: done_claim incidents {[(i.get('kind'), i.get('severity'), i.get('session')) for i in recorded]}")
    # the refusal, and the claim let through after them, quoted: one session's, the agent's
    assert "block" in [i.get("severity") for i in recorded] and recorded[-1].get("severity") != "block", recorded
    assert CLAIM in recorded[-1].get("reason", ""), recorded
    assert len({i.get("session") for i in recorded}) == 1, recorded
    report = subprocess.run(
        [agent_breaker_path(), "report", "--json", str(user.home / ".local/state/agent-breaker/hooks.incidents.jsonl")],
        capture_output=True,
        text=True,
        env=user.env,
        timeout=60,
    )
    assert report.returncode == 0 and "done_claim" in report.stdout, (report.stdout[-2000:], report.stderr[-2000:])
