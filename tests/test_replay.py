"""`agent-breaker replay`: the contract of shared/spec/traces.md."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CALL_ERROR

from agent_breaker.cli import main

TRACES = Path(__file__).resolve().parent / "traces"  # the shared sample and its scorer, copied
SAMPLE = TRACES / "synthetic-sample.jsonl"
LABELS = TRACES / "synthetic-sample.labels.jsonl"


def replay(tmp_path, events, *args, capsys):
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    code = main(["replay", str(path), *args])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err


def failing_loop(session, n=6, ts0=100.0):
    events = []
    for i in range(n):
        events.append(
            {
                "session": session,
                "ts": ts0 + 2 * i,
                "type": "tool_call",
                "tool": "q",
                "args": {"x": 1},
                "call_id": f"c{i}",
                "cost_usd": 0.1,
            }
        )
        events.append(
            {
                "session": session,
                "ts": ts0 + 2 * i + 1,
                "type": "tool_result",
                "tool": "q",
                "call_id": f"c{i}",
                "ok": False,
                "error": CALL_ERROR,
            }
        )
    return events


def test_one_line_per_session_in_order_of_first_appearance(tmp_path, capsys):
    events = [
        {"session": "b", "type": "user", "text": "hi"},
        {"session": "a", "type": "tool_call", "tool": "t", "args": {}},
        {"session": "b", "type": "tool_call", "tool": "t", "args": {}},
    ]
    code, rows, _ = replay(tmp_path, events, capsys=capsys)
    assert code == 0
    assert [r["session"] for r in rows] == ["b", "a"]
    assert set(rows[0]) == {
        "session",
        "tripped",
        "trip_event",
        "heuristic",
        "allowed_calls",
        "blocked_calls",
        "cost_allowed_usd",
        "cost_blocked_usd",
        "warnings",
        "warn_event",
        "warned_by",
    }
    assert rows[1] == {
        "session": "a",
        "tripped": False,
        "trip_event": None,
        "heuristic": None,
        "allowed_calls": 1,
        "blocked_calls": 0,
        "cost_allowed_usd": 0.0,
        "cost_blocked_usd": 0.0,
        "warnings": 0,
        "warn_event": None,
        "warned_by": {},
    }


def test_a_trip_reports_its_event_heuristic_and_the_split_of_calls_and_cost(tmp_path, capsys):
    code, [row], _ = replay(tmp_path, failing_loop("s"), capsys=capsys)
    assert code == 0
    assert row["tripped"] and row["heuristic"] == "identical_failure"
    assert row["trip_event"] == 9  # 5th call: events 1..8 are four call/result pairs
    assert (row["allowed_calls"], row["blocked_calls"]) == (4, 2)
    assert row["cost_allowed_usd"] == pytest.approx(0.4) and row["cost_blocked_usd"] == pytest.approx(0.2)


def test_a_warning_reports_its_event_and_heuristic_apart_from_the_trip(tmp_path, capsys):
    _, [row], _ = replay(tmp_path, failing_loop("s"), capsys=capsys)
    assert row["warn_event"] == 7  # 4th call: it ran under the warning
    assert (row["warnings"], row["warned_by"]) == (1, {"identical_failure": 1})
    _, [row], _ = replay(tmp_path, failing_loop("s", n=4), capsys=capsys)
    assert (row["tripped"], row["trip_event"], row["heuristic"]) == (False, None, None)  # a warning is no trip
    assert (row["warnings"], row["warn_event"], row["allowed_calls"], row["blocked_calls"]) == (1, 7, 4, 0)


def test_results_of_blocked_calls_are_skipped_also_without_call_ids(tmp_path, capsys):
    events = [{k: v for k, v in e.items() if k != "call_id"} for e in failing_loop("s")]
    events.append({"session": "s", "ts": 200, "type": "tool_call", "tool": "other", "args": {}})
    _, [row], _ = replay(tmp_path, events, capsys=capsys)
    assert (row["allowed_calls"], row["blocked_calls"], row["trip_event"]) == (4, 3, 9)


def test_observe_mode_blocks_nothing_and_reports_the_same_trip(tmp_path, capsys):
    _, [row], _ = replay(tmp_path, failing_loop("s"), "--observe", capsys=capsys)
    assert row["tripped"] and row["trip_event"] == 9 and row["heuristic"] == "identical_failure"
    assert row["warn_event"] == 7 and row["warned_by"].get("identical_failure") == 1
    assert (row["allowed_calls"], row["blocked_calls"]) == (6, 0)


def test_missing_timestamps_count_one_second_per_event(tmp_path, capsys):
    events = [{"session": "s", "type": "tool_call", "tool": "poll", "args": {"id": 1}, "input_tokens": 60_000} for _ in range(12)]
    _, [row], _ = replay(tmp_path, events, capsys=capsys)
    # 60k tokens a second is over the 50k tokens/s ceiling once the 10 s window has filled
    assert row["heuristic"] == "token_velocity"


def test_invalid_lines_are_reported_and_their_calls_are_not_run(tmp_path, capsys):
    events = [
        {"session": "s", "type": "tool_call", "tool": "t", "args": "not an object"},
        {"session": "s", "type": "tool_call", "tool": "t", "args": {}},
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events) + "{broken json\n")
    code = main(["replay", str(path)])
    out, err = capsys.readouterr()
    [row] = [json.loads(line) for line in out.splitlines()]
    assert code == 1
    assert "line 1: session s: args" in err and "line 3: not JSON" in err
    assert (row["heuristic"], row["trip_event"], row["blocked_calls"], row["allowed_calls"]) == ("invalid_event", 1, 1, 1)


def test_a_bad_config_stops_replay_with_a_clear_message(tmp_path, capsys):
    cfg = tmp_path / "c.yml"
    cfg.write_text("breaker: {failure_rate_pct: 120}\n")
    path = tmp_path / "t.jsonl"
    path.write_text("")
    assert main(["replay", str(path), "--config", str(cfg)]) == 2
    assert "breaker.failure_rate_pct" in capsys.readouterr().err


def test_replay_does_not_import_nemo(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"session": "s", "type": "tool_call", "tool": "t", "args": {}}) + "\n")
    code = (
        f"import sys; from agent_breaker.cli import main; main(['replay', {str(path)!r}]);"
        "sys.exit(3 if any(m.startswith(('nemoguardrails', 'langchain')) for m in sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def test_shipped_defaults_catch_every_runaway_of_the_sample_and_no_legit_session(tmp_path):
    out = tmp_path / "verdicts.jsonl"
    with out.open("w") as fh:
        subprocess.run([sys.executable, "-m", "agent_breaker.cli", "replay", str(SAMPLE)], stdout=fh, check=True)
    spec = importlib.util.spec_from_file_location("score", TRACES / "score.py")
    assert spec and spec.loader
    score = subprocess.run(
        [sys.executable, spec.origin, str(SAMPLE), str(LABELS), str(out), "--json"], capture_output=True, text=True, check=True
    )
    summary = json.loads(score.stdout)
    assert summary["recall"] == 1.0
    assert summary["fpr"] == 0.0
    # a transient error (the sample's HTTP 500s) gets 5 tries before identical_failure, not 3
    assert summary["median_wasted"] <= 4
    assert summary["missing"] == 0
