"""benchmarks/synthetic.py, the labeled synthetic trace generator: deterministic per seed, its events
in the trace format of shared/spec/traces.md, one label per session, every family present. (How
well any detector does on its sets is not this file's business.)"""

from __future__ import annotations

import importlib.util
import json
import math
from collections import defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str) -> ModuleType:
    """A module of benchmarks/ by its path (`pytest` does not put the repository root on sys.path)."""
    spec = importlib.util.spec_from_file_location(f"synthetic_generator_test_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


synthetic = _load("synthetic")
FAMILIES = synthetic.FAMILIES
TYPES = {"tool_call", "tool_result", "assistant", "user", "final"}


@pytest.fixture(scope="module")
def one_set() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return synthetic.generate(11, 2)


def _by_session(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for ev in events:
        out[ev["session"]].append(ev)
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def test_the_same_seed_gives_the_same_set():
    a = synthetic.generate(3, 2)
    b = synthetic.generate(3, 2)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_two_seeds_give_different_sessions():
    ev1, lab1 = synthetic.generate(1, 1)
    ev2, lab2 = synthetic.generate(2, 1)
    assert {lab["session"] for lab in lab1}.isdisjoint({lab["session"] for lab in lab2})
    strip = [{k: v for k, v in e.items() if k not in ("session", "ts", "call_id")} for e in ev1]
    strip2 = [{k: v for k, v in e.items() if k not in ("session", "ts", "call_id")} for e in ev2]
    assert strip != strip2
    shapes1 = sorted((lab["family"], lab["shape"]) for lab in lab1)
    shapes2 = sorted((lab["family"], lab["shape"]) for lab in lab2)
    assert shapes1 != shapes2


def test_every_event_parses_as_the_trace_format(one_set):
    events, _labels = one_set
    for ev in events:
        assert json.loads(json.dumps(ev)) == ev  # plain JSON
        assert isinstance(ev["session"], str) and ev["session"]
        assert ev["type"] in TYPES
        assert _is_num(ev["ts"])
        for key in ("tenant", "feature", "agent"):
            assert key not in ev or (isinstance(ev[key], str) and ev[key])
        assert "depth" not in ev or (_is_int(ev["depth"]) and ev["depth"] >= 0)
        for key in ("input_tokens", "output_tokens"):
            assert key not in ev or (_is_int(ev[key]) and ev[key] >= 0)
        assert "cost_usd" not in ev or (_is_num(ev["cost_usd"]) and ev["cost_usd"] >= 0)
        if ev["type"] == "tool_call":
            assert isinstance(ev["tool"], str) and ev["tool"]
            assert isinstance(ev.get("args", {}), dict)
            assert "call_id" not in ev or (isinstance(ev["call_id"], str) and ev["call_id"])
            assert "thought" not in ev or isinstance(ev["thought"], str)
            assert "mutating" not in ev or isinstance(ev["mutating"], bool)
        elif ev["type"] == "tool_result":
            assert isinstance(ev["tool"], str) and ev["tool"]
            assert isinstance(ev["ok"], bool)
            assert "call_id" not in ev or (isinstance(ev["call_id"], str) and ev["call_id"])
            assert "error" not in ev or isinstance(ev["error"], str)
            if not ev["ok"]:
                assert "error" in ev or "result" in ev
        else:
            assert isinstance(ev["text"], str) and ev["text"]


def test_sessions_are_ordered_and_results_pair_with_calls(one_set):
    events, _labels = one_set
    for sid, evs in _by_session(events).items():
        ts = [e["ts"] for e in evs]
        assert ts == sorted(ts), sid
        tenants = {e["tenant"] for e in evs}
        assert len(tenants) == 1, sid
        open_ids: set[str] = set()
        seen_ids: set[str] = set()
        unpaired: dict[str, int] = defaultdict(int)
        for e in evs:
            if e["type"] == "tool_call":
                if "call_id" in e:
                    assert e["call_id"] not in seen_ids, (sid, e["call_id"])
                    seen_ids.add(e["call_id"])
                    open_ids.add(e["call_id"])
                else:
                    unpaired[e["tool"]] += 1
            elif e["type"] == "tool_result":
                if "call_id" in e:
                    assert e["call_id"] in open_ids, (sid, e["call_id"])
                    open_ids.discard(e["call_id"])
                else:
                    assert unpaired[e["tool"]] > 0, (sid, e["tool"])
                    unpaired[e["tool"]] -= 1


def test_labels_match_sessions(one_set):
    events, labels = one_set
    sessions = _by_session(events)
    assert len(labels) == len({lab["session"] for lab in labels})
    assert {lab["session"] for lab in labels} == set(sessions)
    for lab in labels:
        assert {"session", "family", "kind", "loop_start"} <= set(lab)
        assert lab["family"] in FAMILIES
        assert lab["kind"] in ("runaway", "legit")
        if lab["kind"] == "legit":
            assert lab["loop_start"] is None
        else:
            assert _is_int(lab["loop_start"])
            # loop_start indexes a real event of the session
            assert 1 <= lab["loop_start"] <= len(sessions[lab["session"]])


def test_every_family_appears_with_its_kind(one_set):
    _events, labels = one_set
    kinds: dict[str, set[str]] = defaultdict(set)
    for lab in labels:
        kinds[lab["family"]].add(lab["kind"])
    assert set(kinds) == set(FAMILIES)
    for name, (kind, _fn, _doc) in FAMILIES.items():
        if kind == "legit":
            assert kinds[name] == {"legit"}, name
        else:
            assert "runaway" in kinds[name], name
    assert any(n.startswith("rw-") for n in FAMILIES) and any(n.startswith("lg-") for n in FAMILIES)


def test_a_runaway_pattern_starts_on_the_event_it_names(one_set):
    events, labels = one_set
    sessions = _by_session(events)
    for lab in labels:
        if lab["kind"] != "runaway":
            continue
        ev = sessions[lab["session"]][lab["loop_start"] - 1]
        if lab["family"] == "rw-false-claim":
            assert ev["type"] == "final"
        elif lab["family"] == "rw-echo":
            assert ev["type"] == "assistant"
        elif lab["family"] == "rw-dup-mutation":
            assert ev["type"] == "tool_call" and ev.get("mutating") is True
        elif lab["family"] not in ("rw-budget", "rw-cross-session"):
            assert ev["type"] in ("tool_call", "assistant"), (lab, ev)


def test_families_can_be_chosen_and_unknown_ones_are_refused():
    events, labels = synthetic.generate(5, 3, ["lg-debugging", "rw-noisy-error"])
    assert {lab["family"] for lab in labels} == {"lg-debugging", "rw-noisy-error"}
    assert len(labels) == 6 and len(_by_session(events)) == 6
    with pytest.raises(ValueError, match="unknown families"):
        synthetic.generate(5, 1, ["rw-no-such-family"])


def test_the_cli_writes_what_generate_returns(tmp_path, capsys):
    out, lab = tmp_path / "t.jsonl", tmp_path / "l.jsonl"
    rc = synthetic.main(
        [
            "--seed",
            "4",
            "--per-family",
            "1",
            "--out",
            str(out),
            "--labels",
            str(lab),
            "--families",
            "rw-false-claim,lg-true-claim,rw-cross-session",
        ]
    )
    assert rc == 0
    events, labels = synthetic.generate(4, 1, ["rw-false-claim", "lg-true-claim", "rw-cross-session"])
    assert [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()] == events
    assert [json.loads(x) for x in lab.read_text(encoding="utf-8").splitlines()] == labels
    assert synthetic.main(["--list"]) == 0
    assert "rw-noisy-error" in capsys.readouterr().out


@pytest.mark.parametrize("seed", range(20, 32))
def test_any_seed_builds_a_well_formed_set(seed):
    events, labels = synthetic.generate(seed, 1)
    sessions = _by_session(events)
    assert {lab["session"] for lab in labels} == set(sessions)
    assert {lab["family"] for lab in labels} == set(FAMILIES)
    for lab in labels:
        if lab["kind"] == "runaway":
            assert 1 <= lab["loop_start"] <= len(sessions[lab["session"]])
