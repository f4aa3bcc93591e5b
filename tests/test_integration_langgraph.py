"""The LangGraph / LangChain integration: guarded tools in a real graph (LangGraph's runtime, a
scripted chat model). A refused call comes back as a ToolMessage carrying the observation and
the graph ends normally; the session is the graph's thread id; a tool's exception is recorded
and then handled as the ToolNode handles it. On both stores."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Annotated

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState

from agent_breaker.integrations.langgraph import GuardedToolNode, MissingThreadId, guard_tools

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "langgraph_agent.py"
_spec = importlib.util.spec_from_file_location("langgraph_agent_example", EXAMPLE)
assert _spec is not None and _spec.loader is not None
example = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = example  # pydantic resolves the model's annotations through it
_spec.loader.exec_module(example)


def tool_messages(messages: list) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def first_cut(messages: list) -> int | None:
    return next((i for i, m in enumerate(tool_messages(messages), 1) if example.refusal(m) is not None), None)


def tools_only_graph(node: GuardedToolNode, checkpointer: InMemorySaver | None = None):
    """A graph of the tool node alone: each invoke runs the tool calls of the AIMessage given."""
    graph = StateGraph(MessagesState)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    return graph.compile(checkpointer=checkpointer)


def ask(name: str, args: dict, call_id: str) -> dict:
    return {"messages": [AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])]}


def thread(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


def test_a_looping_agent_gets_the_observation_as_a_tool_message_and_the_graph_ends_normally(make_engine):
    messages = example.run_agent(make_engine(), example.looping_model, "t1")
    calls = tool_messages(messages)
    assert len(calls) == 5 and first_cut(messages) == 5
    warned = json.loads(calls[3].text.split("\n\n")[-1])  # the fourth ran, its warning after its answer
    assert (warned["warning"], warned["tool"]) == ("IDENTICAL_FAILURE", "run_sql")
    refused = calls[-1]
    asked = messages[-3]  # the model's call the refusal answers
    assert isinstance(asked, AIMessage) and refused.tool_call_id == asked.tool_calls[0]["id"]
    assert (refused.name, refused.status) == ("run_sql", "error")
    observation = json.loads(refused.text)
    assert (observation["error"], observation["tool"]) == ("IDENTICAL_FAILURE", "run_sql")
    # the model read it and answered: the graph ran to its end, no exception, no recursion limit
    assert isinstance(messages[-1], AIMessage) and not messages[-1].tool_calls
    assert observation["actionable_instruction"] in messages[-1].text


def test_a_legitimate_agent_runs_every_step_with_nothing_cut(make_engine):
    messages = example.run_agent(make_engine(), example.legitimate_model, "t1")
    calls = tool_messages(messages)
    assert [m.name for m in calls] == ["run_sql", "fetch_rate", "fetch_rate", "start_export"] + ["job_status"] * 3
    assert first_cut(messages) is None
    assert messages[-1].text == "May's orders report is ready: s3://exports/exp-7.csv"


def test_the_session_is_the_thread_id(make_engine):
    engine = make_engine()
    assert first_cut(example.run_agent(engine, example.looping_model, "thread-a")) == 5
    # another thread starts clean: its loop is its own
    assert first_cut(example.run_agent(engine, example.looping_model, "thread-b")) == 5
    # the same thread, even through another graph instance, is the same session: halted already
    assert first_cut(example.run_agent(engine, example.looping_model, "thread-a")) == 1


def test_an_async_graph_is_guarded_the_same_way(make_engine):
    app = example.build_agent(make_engine(), example.looping_model)
    state = asyncio.run(app.ainvoke({"messages": [HumanMessage(example.TASK)]}, thread("t1")))
    assert first_cut(state["messages"]) == 5 and not state["messages"][-1].tool_calls


def test_an_exception_is_recorded_then_surfaced_as_the_tool_node_does(make_engine):
    ran: list[str] = []

    @tool
    def run_sql(query: str) -> str:
        """Run SQL."""
        ran.append(query)
        raise ValueError("syntax error at or near SELEC")

    # the ToolNode's default lets a tool's exception through: the graph raises it
    app = tools_only_graph(GuardedToolNode([run_sql], engine=make_engine()))
    for i in range(4):  # the fourth runs under a warning
        with pytest.raises(ValueError, match="syntax error"):
            app.invoke(ask("run_sql", {"query": "SELEC 1"}, f"c{i}"), thread("t1"))
    refused = app.invoke(ask("run_sql", {"query": "SELEC 1"}, "c4"), thread("t1"))["messages"][-1]
    assert len(ran) == 4  # each failure was recorded: the fifth call never reached the tool
    assert (refused.tool_call_id, refused.status, json.loads(refused.text)["error"]) == ("c4", "error", "IDENTICAL_FAILURE")


@pytest.mark.parametrize("run_async", [False, True])
def test_parallel_duplicate_transfers_in_one_message_run_once(make_engine, run_async):
    sent: list[int] = []

    @tool
    def wire_transfer(to: str, amount: int) -> str:
        """Send money."""
        sent.append(amount)
        return f"sent {amount} to {to}"

    app = tools_only_graph(GuardedToolNode([wire_transfer], engine=make_engine(), mutating={"wire_transfer"}))
    calls = [{"name": "wire_transfer", "args": {"to": "ACC-2291", "amount": 500}, "id": f"t{i}"} for i in range(3)]
    state = {"messages": [AIMessage("", tool_calls=calls)]}
    out = asyncio.run(app.ainvoke(state, thread("t1"))) if run_async else app.invoke(state, thread("t1"))
    answers = {m.tool_call_id: m for m in tool_messages(out["messages"])}
    assert sent == [500]
    refused = [json.loads(m.text)["error"] for m in answers.values() if m.status == "error"]
    assert refused == ["DUPLICATE_MUTATION", "DUPLICATE_MUTATION"]


def test_without_a_thread_id_the_tool_does_not_run(make_engine):
    ran: list[str] = []

    @tool
    def search(q: str) -> str:
        """Search."""
        ran.append(q)
        return "ok"

    app = tools_only_graph(GuardedToolNode([search], engine=make_engine()))
    with pytest.raises(MissingThreadId, match="thread_id"):
        app.invoke(ask("search", {"q": "x"}, "c1"))
    assert ran == []


def test_injected_graph_state_is_not_part_of_the_call_and_the_model_sees_the_same_schema(make_engine):
    seen: list[int] = []

    @tool
    def search(q: str, messages: Annotated[list, InjectedState("messages")]) -> str:
        """Search the docs."""
        seen.append(len(messages))
        return "no results"

    node = GuardedToolNode([search], engine=make_engine())
    assert node.tools_by_name["search"].tool_call_schema.model_json_schema() == search.tool_call_schema.model_json_schema()
    app = tools_only_graph(node, checkpointer=InMemorySaver())
    outs = [app.invoke(ask("search", {"q": "refund policy"}, f"c{i}"), thread("t1"))["messages"][-1] for i in range(8)]
    # the injected state grows at each call (the thread's messages) yet the model's call is the same one
    assert 2 < len(seen) < 8 and seen == [1 + 2 * i for i in range(len(seen))]
    assert json.loads(outs[-1].text)["error"]


def test_outside_a_graph_the_tool_reads_thread_and_tenant_from_its_config_and_returns_the_observation_as_text(
    make_engine, incidents
):
    def fetch(url: str) -> str:
        """Fetch a URL."""
        raise ValueError("invalid URL")

    (guarded_fetch,) = guard_tools([fetch], engine=make_engine(), tenant_key="tenant")
    config = {"configurable": {"thread_id": "t1", "tenant": "acme"}}
    for _ in range(4):  # the fourth runs under a warning
        with pytest.raises(ValueError):
            guarded_fetch.invoke({"url": "htp:/x"}, config)
    out = guarded_fetch.invoke({"url": "htp:/x"}, config)
    assert isinstance(out, str) and json.loads(out)["error"] == "IDENTICAL_FAILURE"
    assert [(i.session, i.tenant, i.severity) for i in incidents] == [("t1", "acme", "warn"), ("t1", "acme", "block")]


def test_a_refusal_routed_to_another_guarded_tool_runs_it_for_the_same_call(make_engine):
    engine = make_engine(
        {"tools": {"enrich": {"fallback": {"alternatives": [{"tool": "enrich_v1", "args": {"domain": "company"}}]}}}}
    )
    engine.operator.force_breaker("enrich", "forced_open")

    @tool
    def enrich(company: str) -> str:
        """Enrich a company."""
        raise AssertionError("the primary is forced open: it must not run")

    @tool
    def enrich_v1(domain: str) -> str:
        """Enrich a domain (v1)."""
        return f"{domain}: 120 employees"

    app = tools_only_graph(GuardedToolNode([enrich, enrich_v1], engine=engine))
    answer = app.invoke(ask("enrich", {"company": "acme.example"}, "c1"), thread("t1"))["messages"][-1]
    assert (answer.tool_call_id, answer.name, answer.text, answer.status) == (
        "c1",
        "enrich_v1",
        "acme.example: 120 employees",
        "success",
    )
