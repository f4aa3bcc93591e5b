"""The OpenAI Agents SDK integration (issue: tool guardrails or the SDK's nearest hook, session =
the run): `guarded_function_tool` on the SDK's real `Runner.run`, with the example's scripted
model. A refused call never reaches the function and the model reads the observation; failed
calls, raised or rejected by the SDK, are recorded as failures; each run is a session of its
own unless `session=` says otherwise. On both stores."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

agents = pytest.importorskip("agents")
from agents import Agent, RunContextWrapper, Runner  # noqa: E402

from agent_breaker.integrations.openai_agents import guarded_function_tool  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "openai_agents_agent.py"
_spec = importlib.util.spec_from_file_location("openai_agents_agent", EXAMPLE)
assert _spec is not None and _spec.loader is not None
example = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = example  # its dataclasses resolve their module by name
_spec.loader.exec_module(example)

agents.set_tracing_disabled(True)

QUERY = {"query": "SELEC 1"}


def run(script: Any, tools: list[Any], context: Any = None) -> tuple[list[Any], Any]:
    """One real `Runner.run` of a scripted agent: the tool calls it made, and its answer."""
    agent = Agent(name="a", model=example.ScriptedModel(script), tools=tools)
    result = asyncio.run(Runner.run(agent, "go", context=context, max_turns=example.MAX_TURNS))
    return example.tool_turns(result.to_input_list()), result.final_output


def repeat(n: int = example.MAX_TURNS, args: dict[str, Any] = QUERY) -> Any:
    """A runaway's script: the same call until the guard's observation comes back (or n calls),
    then an answer."""

    def script(turns: list[Any]) -> Any:
        if len(turns) == n or (turns and example.is_observation(turns[-1].output)):
            return "stopped"
        return "run_sql", args

    return script


@pytest.fixture
def recorded(monkeypatch) -> Any:
    """Spy on an engine's recorded tool results."""
    events: list[dict[str, Any]] = []

    def spy(engine):
        record = engine.record_tool_result

        def record_and_keep(event):
            # the dispatch hands the engine the typed event: kept as its trace-format fields
            events.append(event if isinstance(event, dict) else event.model_dump(exclude_none=True))
            return record(event)

        monkeypatch.setattr(engine, "record_tool_result", record_and_keep)
        return events

    return spy


def failing_sql(engine, ran: list[str], **kwargs: Any):
    @guarded_function_tool(engine=engine, **kwargs)
    def run_sql(query: str) -> str:
        """Run a SQL query."""
        ran.append(query)
        raise ValueError('syntax error at or near "SELEC"')

    return run_sql


def test_the_runaway_agent_is_warned_at_its_fourth_call_cut_at_its_fifth_and_reads_why(make_engine):
    turns = asyncio.run(example.run_runaway(make_engine()))
    assert example.cut_at(turns) == 5
    # the first three failures reach the model as the SDK's own error text, as without the guard
    assert all("syntax error" in t.output and not example.is_observation(t.output) for t in turns[:3])
    # the fourth runs: its error text, then the warning it ran under
    error, warning = turns[3].output.split("\n\n")
    assert "syntax error" in error and json.loads(warning)["warning"] == "IDENTICAL_FAILURE"
    observation = json.loads(turns[4].output)
    assert (observation["error"], observation["tool"]) == ("IDENTICAL_FAILURE", "run_sql")
    assert observation["actionable_instruction"]


def test_parallel_duplicate_transfers_in_one_answer_run_once(make_engine):
    sent: list[int] = []

    @guarded_function_tool(engine=make_engine(), mutating=True)
    def wire_transfer(to: str, amount: int) -> str:
        """Send money."""
        sent.append(amount)
        return f"sent {amount}"

    def script(turns: list[Any]) -> Any:
        return "done" if turns else [("wire_transfer", {"to": "ACC-2291", "amount": 500})] * 3

    turns, _ = run(script, [wire_transfer])
    assert sent == [500]
    assert sorted(t.output for t in turns if not example.is_observation(t.output)) == ["sent 500"]
    assert [json.loads(t.output)["error"] for t in turns if example.is_observation(t.output)] == ["DUPLICATE_MUTATION"] * 2


def test_the_legitimate_agent_makes_every_call(make_engine):
    turns = asyncio.run(example.run_legit(make_engine()))
    assert [t.name for t in turns] == ["search_orders", "start_export"] + ["export_status"] * 3 + ["fx_rate"] * 2
    assert not any(example.is_observation(t.output) for t in turns)
    assert json.loads(turns[-1].output)["rate"] == 0.92


def test_a_refused_call_never_reaches_the_function_and_the_run_goes_on(make_engine):
    ran: list[str] = []
    turns, answer = run(repeat(), [failing_sql(make_engine(), ran)])
    assert ran == ["SELEC 1"] * 4 and len(turns) == 5
    assert json.loads(turns[-1].output)["error"] == "IDENTICAL_FAILURE"
    assert answer == "stopped"


def test_failed_calls_are_recorded_as_failures_with_their_error(make_engine, recorded):
    engine = make_engine()
    events = recorded(engine)
    asyncio.run(example.run_legit(engine))
    by_tool = [(e["tool"], e["ok"]) for e in events]
    assert by_tool == [("search_orders", True), ("start_export", True)] + [("export_status", True)] * 3 + [
        ("fx_rate", False),
        ("fx_rate", True),
    ]
    failure = events[5]
    assert failure["error"] == "ConnectionError: rates API: connection reset by peer"
    assert failure["error_kind"] == "dependency"  # a transport error: it counts for the tool's breaker
    assert json.loads(events[-1]["result"]) == {"currency": "EUR", "rate": 0.92}


def test_arguments_the_sdk_rejects_are_a_failed_call_and_the_function_does_not_run(make_engine, recorded):
    engine = make_engine()
    events = recorded(engine)
    ran: list[str] = []
    turns, _ = run(repeat(args={"sql": "SELECT 1"}), [failing_sql(engine, ran)])
    assert ran == []
    assert all("error occurred" in t.output for t in turns[:4])  # the SDK's message, as without the guard
    assert [(e["ok"], e["error"].split(":")[0]) for e in events] == [(False, "ArgumentsRejected")] * 4
    # the model that keeps sending the same wrong arguments is warned, then cut like any other loop
    assert json.loads(turns[4].output)["error"] == "IDENTICAL_FAILURE"


def test_a_tool_without_a_failure_formatter_fails_the_run_and_the_failure_is_recorded(make_engine, recorded):
    engine = make_engine()
    events = recorded(engine)
    ran: list[str] = []
    with pytest.raises(agents.UserError, match="syntax error"):  # the SDK wraps what the tool raised
        run(repeat(1), [failing_sql(engine, ran, failure_error_function=None)])
    assert ran == ["SELEC 1"]
    assert (events[0]["ok"], events[0]["error"]) == (False, 'ValueError: syntax error at or near "SELEC"')


def test_two_runs_do_not_share_loop_state(make_engine):
    engine = make_engine()
    ran: list[str] = []
    tools = [failing_sql(engine, ran)]
    for _ in range(2):
        turns, _ = run(repeat(3), tools)
        assert not any(example.is_observation(t.output) for t in turns)
    assert len(ran) == 6  # three failures each: neither run saw the other's


def test_a_session_read_from_the_run_context_spans_runs_and_the_tool_gets_its_context(make_engine, recorded):
    engine = make_engine()
    events = recorded(engine)
    seen: list[str] = []

    @guarded_function_tool(engine=engine, session=lambda ctx: ctx.context["thread"], tenant=lambda ctx: ctx.context["org"])
    def run_sql(ctx: RunContextWrapper[dict], query: str) -> str:
        """Run a SQL query."""
        seen.append(ctx.context["org"])
        raise ValueError("syntax error")

    context = {"thread": "t-1", "org": "acme"}
    run(repeat(2), [run_sql], context)
    turns, _ = run(repeat(3), [run_sql], context)
    # the second run continues the thread's session: its second call (the fourth) runs under a
    # warning, its third is cut
    assert [example.is_observation(t.output) for t in turns] == [False, False, True]
    assert seen == ["acme"] * 4
    # the run context the SDK injects is not a call argument; the tenant is the context's
    assert {(e["session"], e.get("tenant")) for e in events} == {("t-1", "acme")}


def test_the_tool_keeps_its_name_schema_and_description(make_engine):
    tool = failing_sql(make_engine(), [])
    assert (tool.name, tool.description) == ("run_sql", "Run a SQL query.")
    assert list(tool.params_json_schema["properties"]) == ["query"]
