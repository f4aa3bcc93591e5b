"""The drop-ins' offline examples and extras (issue 13): each example runs its framework's real
runtime and prints its summary as its last line; each integration imported without its extra
says which one to install."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize(
    ("example", "module", "summary"),
    [
        ("litellm_agent.py", "litellm", {"framework": "litellm", "runaway_cut_at_call": 5, "legit_calls": 6, "legit_cut": 0}),
        (
            "langgraph_agent.py",
            "langgraph",
            {"framework": "langgraph", "runaway_cut_at_call": 5, "legit_calls": 7, "legit_cut": 0},
        ),
        (
            "openai_agents_agent.py",
            "agents",
            {"framework": "openai-agents", "runaway_cut_at_call": 5, "legit_calls": 7, "legit_cut": 0},
        ),
    ],
)
def test_each_example_cuts_its_runaway_agent_and_no_legitimate_call_and_says_so_last(example, module, summary):
    pytest.importorskip(module)
    proc = subprocess.run([sys.executable, str(EXAMPLES / example)], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # every legitimate call runs; the runaway is warned at its fourth identical failing call, and cut
    # at the fifth
    assert json.loads(proc.stdout.splitlines()[-1]) == {**summary, "runaway_cut_at_call": 5, "legit_cut": 0}


@pytest.mark.parametrize(
    ("integration", "module", "extra"),
    [("litellm", "litellm", "litellm"), ("langgraph", "langgraph", "langgraph"), ("openai_agents", "agents", "openai-agents")],
)
def test_an_integration_imported_without_its_extra_names_it(integration, module, extra):
    script = (
        "import sys\n"
        f"sys.modules[{module!r}] = None\n"
        "from agent_breaker._extras import MissingExtra\n"
        "try:\n"
        f"    import agent_breaker.integrations.{integration}\n"
        "except MissingExtra as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    needs = f"agent_breaker.integrations.{integration} needs {module!r}, which is not installed"
    assert proc.stdout.strip() == f'{needs}: pip install "agent-breaker-rails[{extra}]"'
