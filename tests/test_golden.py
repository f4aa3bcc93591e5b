"""Golden files: `agent-breaker replay` on every trace of tests/traces/ (the shared sample and
real runs, copied with their licences, tests/traces/SOURCES.md), with the shipped
defaults, must print exactly what tests/golden/<trace>.out holds. A change of behaviour updates
a golden file in a commit that says which behaviour changed and why."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from agent_breaker import AgentBreakerConfig
from agent_breaker._replay import replay_engine, replay_lines

TRACES = Path(__file__).resolve().parent / "traces"
GOLDEN = Path(__file__).resolve().parent / "golden"


def _traces() -> list[Path]:
    return sorted(p for p in TRACES.glob("*.jsonl") if not p.name.endswith(".labels.jsonl"))


@pytest.mark.parametrize("trace", _traces(), ids=lambda p: p.stem)
def test_replay_output_is_byte_identical_to_its_golden_file(trace):
    golden = GOLDEN / f"{trace.stem}.out"
    with trace.open("rb") as lines:
        results, invalid = replay_lines(lines, replay_engine(AgentBreakerConfig()), errors=io.StringIO())
    out = "".join(json.dumps(r) + "\n" for r in results)
    assert invalid == 0
    assert golden.is_file(), f"no golden file for {trace.name}: write {golden}"
    assert out == golden.read_text(), f"replay of {trace.name} differs from {golden.name}"


def test_every_golden_file_has_its_trace():
    assert _traces()
    assert {p.stem for p in GOLDEN.glob("*.out")} == {p.stem for p in _traces()}
