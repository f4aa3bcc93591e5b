"""Schema checks (issue 12, item 1): arguments checked before the call (schema_violation, with an
observation that names the field and the problem), results after it (a failed call of the call's
own kind, schema_drift when a tool starts returning another shape), half-open probes that must
meet the result schema; JSON Schema and pydantic models; on both stores."""

from __future__ import annotations

import pytest
from conftest import OUTAGE, call, result, run
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent_breaker import BreakerStateName, ConfigError, parse_config
from agent_breaker._schemas import compile_check

SECRET = "SECRET-VALUE-0c4e"

PAY_SCHEMA = {
    "type": "object",
    "properties": {
        "amount": {"type": "integer", "minimum": 1},
        "to": {"type": "string", "minLength": 3},
        "currency": {"enum": ["EUR", "USD"]},
    },
    "required": ["amount", "to"],
    "additionalProperties": False,
}
LEAD_RESULT = {
    "type": "object",
    "properties": {"lead": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}},
    "required": ["lead"],
}


class Payment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    amount: int = Field(ge=1)
    to: str


def config(**tools) -> dict:
    return {"tools": tools}


def test_arguments_that_break_the_schema_are_refused_with_the_field_and_the_problem(make_engine, clock, incidents):
    engine = make_engine(config(pay={"args_schema": PAY_SCHEMA, "mutating": True}))
    v = engine.check_tool_call(call("pay", {"amount": SECRET, "to": "acct-1"}))
    assert (v.allowed, v.heuristic, v.scope) == (False, "schema_violation", "call")
    assert v.reason == "pay arguments: field amount: must be of type integer"
    assert v.observation["error"] == "SCHEMA_VIOLATION"
    assert "field amount: must be of type integer" in v.observation["actionable_instruction"]
    assert [(i.heuristic, i.severity, i.counters) for i in incidents] == [("schema_violation", "block", {"part": "arguments"})]
    assert SECRET not in repr(v.to_dict()) + repr([i.to_dict() for i in incidents])
    # the agent fixes the call: it runs
    assert engine.check_tool_call(call("pay", {"amount": 5, "to": "acct-1"}, call_id="c2")).allowed


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"to": "acct-1"}, "needs 'amount'"),
        ({"amount": 0, "to": "acct-1"}, "field amount: must be at least 1"),
        ({"amount": 1, "to": "ab"}, "field to: must be at least 3 characters long"),
        ({"amount": 1, "to": "acct-1", "currency": "GBP"}, "field currency: must be one of 'EUR', 'USD'"),
        ({"amount": 1, "to": "acct-1", SECRET: 1}, "holds a field the schema does not allow"),
        ([1, 2], "must be of type object"),
    ],
)
def test_each_problem_is_named_without_quoting_what_the_agent_sent(args, problem):
    check = compile_check(PAY_SCHEMA, None)
    assert check is not None
    assert check(args) == problem
    assert check({"amount": 3, "to": "acct-1", "currency": "EUR"}) is None


def test_a_pydantic_model_checks_arguments_too(make_engine, clock):
    engine = make_engine(config(pay={"args_model": f"{__name__}:Payment"}))
    v = engine.check_tool_call(call("pay", {"amount": 0, "to": "x"}))
    assert (v.allowed, v.heuristic) == (False, "schema_violation")
    assert v.reason == "pay arguments: field amount: Input should be greater than or equal to 1"
    v = engine.check_tool_call(call("pay", {"amount": 1, "to": "x", SECRET: SECRET}, call_id="c2"))
    assert v.reason == "pay arguments: holds a field the model does not allow" and SECRET not in v.reason
    assert engine.check_tool_call(call("pay", {"amount": 1, "to": "x"}, call_id="c3")).allowed


def test_observe_mode_reports_and_lets_the_call_run(make_engine, clock, incidents):
    engine = make_engine({**config(pay={"args_schema": PAY_SCHEMA}), "modes": {"schema_violation": "observe"}})
    v = engine.check_tool_call(call("pay", {"to": "acct-1"}))
    assert (v.allowed, v.heuristic, v.severity) == (True, "schema_violation", "warn")
    assert [i.severity for i in incidents] == ["warn"]


def test_a_result_that_breaks_its_schema_is_a_failed_call_of_the_calls_own(make_engine, clock, incidents):
    engine = make_engine(config(fetch_lead={"result_schema": LEAD_RESULT}))
    v = engine.check_tool_call(call("fetch_lead", {"q": 1}))
    r = engine.record_tool_result(result("fetch_lead", True, {"leads": [SECRET]}, call_id=v.call_id))
    assert (r.accepted, r.failed, r.heuristic) == (True, True, "schema_violation")
    assert r.reason == "fetch_lead result: needs 'lead'"
    assert [(i.heuristic, i.severity, i.counters["part"]) for i in incidents] == [("schema_violation", "block", "result")]
    assert SECRET not in repr([i.to_dict() for i in incidents])
    # it counts as a failure for the loop detectors: the same call failing in a row is cut
    for _ in range(2):
        run(engine, clock, "fetch_lead", {"q": 1}, True, {"leads": [SECRET]})
    assert engine.check_tool_call(call("fetch_lead", {"q": 1})).heuristic == "identical_failure"


def test_a_mutating_tools_result_that_breaks_its_schema_gets_no_receipt(make_engine, clock):
    engine = make_engine(config(pay={"mutating": True, "result_schema": {"required": ["transfer_id"]}}))
    v = engine.check_tool_call(call("pay", {"amount": 1}))
    assert engine.record_tool_result(result("pay", True, {"status": "queued"}, call_id=v.call_id)).receipt is None
    v = engine.check_tool_call(call("pay", {"amount": 2}, call_id="c2"))
    assert engine.record_tool_result(result("pay", True, {"transfer_id": "TX-1"}, call_id="c2")).receipt is not None


def test_drift_is_reported_when_a_tool_that_met_its_schema_stops(make_engine, clock, incidents):
    engine = make_engine(config(fetch_lead={"result_schema": LEAD_RESULT}))
    for i in range(3):
        run(engine, clock, "fetch_lead", {"q": i}, True, {"lead": {"id": f"L{i}"}}, session=f"s{i}")
    assert incidents == []
    run(engine, clock, "fetch_lead", {"q": 9}, True, {"lead": {"name": "x"}}, session="s9")
    run(engine, clock, "fetch_lead", {"q": 10}, True, {"lead": {"name": "y"}}, session="s10")
    # reported once, when it changed; each bad result is still a violation
    assert [(i.heuristic, i.severity, i.scope) for i in incidents] == [
        ("schema_drift", "warn", "tool"),
        ("schema_violation", "block", "call"),
        ("schema_violation", "block", "call"),
    ]
    assert incidents[0].reason == "fetch_lead started returning another shape: its result field lead: needs 'id'"


def test_a_half_open_probe_must_meet_the_result_schema_to_close_the_breaker(make_engine, clock):
    engine = make_engine(
        {**config(fetch_lead={"result_schema": LEAD_RESULT}), "breaker": {"open_s": 10.0, "half_open_probes": 1}}
    )
    for i in range(5):
        run(engine, clock, "fetch_lead", {"q": i}, False, None, error=OUTAGE, session=f"o{i}")
    assert engine.operator.breaker_state("fetch_lead") is BreakerStateName.OPEN
    clock.advance(10.0)
    probe = engine.check_tool_call(call("fetch_lead", {"q": "p1"}, session="p1"))
    assert probe.allowed
    r = engine.record_tool_result(result("fetch_lead", True, {"garbage": 1}, call_id=probe.call_id, session="p1"))
    assert r.failed and engine.operator.breaker_state("fetch_lead") is BreakerStateName.HALF_OPEN  # proved nothing
    probe = engine.check_tool_call(call("fetch_lead", {"q": "p2"}, session="p2"))
    assert probe.allowed  # the slot it held is free again
    r = engine.record_tool_result(result("fetch_lead", True, {"lead": {"id": "L"}}, call_id=probe.call_id, session="p2"))
    assert not r.failed and engine.operator.breaker_state("fetch_lead") is BreakerStateName.CLOSED


@pytest.mark.parametrize(
    ("tool", "message"),
    [
        ({"args_schema": {"type": "no-such-type"}}, "not a valid JSON Schema"),
        ({"args_model": "no_such_module:Model"}, "cannot import the model 'no_such_module:Model'"),
        ({"result_model": "json:dumps"}, "'json:dumps' is not a pydantic model"),
    ],
)
def test_a_schema_that_cannot_check_anything_fails_the_config(tool, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(config(pay=tool))


class Tagged(BaseModel):
    kind: str = Field(pattern="^(lead|contact)$")
    scores: dict[str, int] = {}

    @field_validator("kind")
    @classmethod
    def _no_test(cls, value: str) -> str:
        if value == "contact":
            raise ValueError(f"contacts are not taken here: {value}")
        return value


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"kind": "lead", "scores": {SECRET: "high"}}, "field scores.{}: Input should be a valid integer"),
        ({"kind": "contact"}, "field kind: breaks the model's 'value_error' rule"),
        ({"kind": SECRET}, "field kind: String should match pattern '^(lead|contact)$'"),
    ],
)
def test_a_models_problem_names_no_key_or_value_the_agent_made_up(args, problem):
    check = compile_check(None, f"{__name__}:Tagged")
    assert check is not None
    found = check(args)
    assert found is not None and found.startswith(problem) and SECRET not in found
