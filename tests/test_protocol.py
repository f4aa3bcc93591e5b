"""The protocol table against everything that writes the protocol down: the Colang flows, the
NeMo guide's table, the engine handlers, the registered actions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent_breaker import Engine
from agent_breaker import heuristics as H
from agent_breaker.events import InvalidEventError, parse_event
from agent_breaker.protocol import BY_COLANG, KINDS, missing_fields, to_colang_event, to_engine_event

ROOT = Path(__file__).resolve().parents[1]
FLOWS = (ROOT / "rails" / "flows.co").read_text()
NEMO_GUIDE = (ROOT / "docs" / "nemo.md").read_text()


def _camel(name: str) -> str:
    return "".join(part.title() for part in name.split("_")) + "Action"


def _flow_blocks() -> dict[str, str]:
    """Colang event matched -> the text of its guard loop (up to the next match)."""
    parts = re.split(r"\n(?=\s+match )", FLOWS)
    out = {}
    for part in parts:
        m = re.match(r"\s+match (\w+)\(\) as \$\w+", part)
        if m and m.group(1) in BY_COLANG:
            out[m.group(1)] = part.split("\nflow ")[0]
    return out


def test_every_event_kind_has_a_guard_flow_calling_its_action_and_sending_its_verdict():
    blocks = _flow_blocks()
    assert set(blocks) == set(BY_COLANG)
    for colang, block in blocks.items():
        kind = BY_COLANG[colang]
        assert f"await {_camel(kind.action)}(event=$" in block, colang
        sends = re.findall(r"send (\w+)\((.*)\)\s*$", block, flags=re.M)
        assert len(sends) == 2, (colang, sends)  # the verdict, and the fail-closed one
        for event, args in sends:
            assert event == kind.verdict, (colang, event)
            names = re.findall(r"(?:^|, )(\w+)=", args)
            assert tuple(names) == kind.verdict_fields, (colang, names)
        failed = sends[0][1]
        assert f'heuristic="{H.GUARD_ERROR}"' in failed


def test_every_verdict_the_flows_send_has_its_fields():
    fields = {kind.verdict: kind.verdict_fields for kind in KINDS}
    sends = re.findall(r"send (\w+Verdict)\((.*)\)\s*$", FLOWS, flags=re.M)
    assert len(sends) >= 2 * len(KINDS)
    for event, args in sends:
        assert tuple(re.findall(r"(?:^|, )(\w+)=", args)) == fields[event], event


def test_the_fail_closed_observation_has_the_fields_of_every_observation():
    from agent_breaker.verdicts import observation

    literal = re.search(r"observation=(\{\"error\": \"GUARD_ERROR\".*?\})[,)]", FLOWS).group(1)
    keys = re.findall(r'"(\w+)":', literal)
    assert keys == list(observation(H.GUARD_ERROR, "t", "m", "i", None))


def test_the_nemo_guides_protocol_table_is_the_protocol_table():
    table = NEMO_GUIDE.split("### The event protocol (Colang 2.x)")[1].split("\n\n")[1]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    seen = {}
    for row in rows:
        cell_in, fields, out = (c.strip() for c in row.strip("|").split("|"))
        colang = cell_in.strip("`")
        seen[colang] = (fields, out)
    assert set(seen) == set(BY_COLANG)
    for colang, (fields, out) in seen.items():
        kind = BY_COLANG[colang]
        required = fields.split("; optional")[0]
        for name in kind.required:
            assert f"`{name}`" in required, (colang, name)
        for name in re.findall(r"`(\w+)`", fields):
            assert name in kind.fields or name == "tokens", (colang, name)
        assert out.startswith(f"`{kind.verdict}("), (colang, out)
        listed = re.findall(r"(\w+)", out.split("(", 1)[1])
        if listed:
            assert tuple(listed) == kind.verdict_fields, (colang, listed)


def test_every_handler_and_field_exists_on_the_engine_side():
    for kind in KINDS:
        assert callable(getattr(Engine, kind.handler))
        event = {"type": kind.name, "session": "s"}
        model = type(parse_event({**event, **{"tool": "t", "ok": True}} if "tool" in kind.fields.values() else event))
        for engine_field in kind.fields.values():
            assert engine_field in model.model_fields, (kind.name, engine_field)


def test_events_round_trip_between_the_two_formats():
    for kind in KINDS:
        colang = {"type": kind.colang, **{name: f"v-{name}" for name in kind.fields}}
        engine = to_engine_event(kind, colang)
        assert to_colang_event(engine) == colang


@pytest.mark.parametrize(
    ("event", "fragment"),
    [
        ({"type": "ToolCallRequested", "session_id": "s", "tool_args": {}}, "tool_name: Field required"),
        ({"type": "ToolCallRequested", "session_id": "s", "tool_name": "t"}, "tool_args: Field required"),
        (
            {"type": "ToolCallRequested", "session_id": "s", "tool_name": "t", "tool_args": [1]},
            "tool_args: Input should be a valid dictionary",
        ),
        ({"type": "ToolResultReceived", "session_id": "s", "tool_name": "t"}, "ok: Field required"),
        ({"type": "ToolCallRequested", "tool_name": "t", "tool_args": {}}, "session_id: an event needs a session id"),
        ({"type": "AssistantTurn", "session_id": "s", "input_tokens": -1}, "input_tokens: Input should be greater"),
    ],
)
def test_errors_name_the_protocols_fields(engine, event, fragment):
    from agent_breaker.dispatch import decide

    out = decide(engine, BY_COLANG[event["type"]], event)
    assert out["heuristic"] == "invalid_event" and fragment in out["reason"], out["reason"]


def test_an_invalid_event_error_keeps_its_problems_for_renaming():
    with pytest.raises(InvalidEventError) as err:
        parse_event({"type": "tool_call", "session": "s", "args": {}})
    assert err.value.renamed(lambda f: {"tool": "tool_name"}.get(f, f)) == "tool_name: Field required"


def test_the_trace_formats_event_types_are_the_protocol_tables():
    from typing import get_args

    from agent_breaker import events

    assert tuple(kind.name for kind in KINDS) == events.EVENT_TYPES
    models = get_args(get_args(events.Event)[0])
    assert tuple(model.model_fields["type"].default for model in models) == events.EVENT_TYPES


def test_every_event_kind_has_its_registered_action_and_its_chat_verb():
    from agent_breaker.actions import guards

    from agent_breaker import _chat

    registered = {getattr(fn, "action_meta", {}).get("name") for fn in guards.ACTIONS}
    assert {kind.action for kind in KINDS} <= registered
    # the chat CLI's help lists the table's verbs, and each verb reads as its kind
    assert set(re.findall(r"(?:^commands: |\| )(\w+)", _chat.HELP)) == {kind.chat_verb for kind in KINDS}
    lines = {"tool": "tool t {}", "result": "result t ok {}"}
    for kind in KINDS:
        parsed, fields = _chat.parse_chat_line(lines.get(kind.chat_verb, f"{kind.chat_verb} text"))
        assert parsed is kind and not missing_fields(kind, fields), kind.chat_verb
