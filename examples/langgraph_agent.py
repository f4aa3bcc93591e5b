"""A LangGraph agent whose tools are guarded: a looping agent is cut, a legitimate one is not.

Offline: the chat model is scripted (a LangChain `BaseChatModel` that reads the conversation and
answers the way a model would), and everything else is LangGraph's own runtime: a `StateGraph`
with a model node, a `GuardedToolNode` and `tools_condition`, on an `InMemorySaver` checkpointer,
one thread per run. The thread id is the guard's session.

    pip install -e ".[langgraph]"
    python examples/langgraph_agent.py

The last line printed is one JSON object:
{"framework": "langgraph", "runaway_cut_at_call": N, "legit_calls": M, "legit_cut": K}
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool, ToolException, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import tools_condition

from agent_breaker import Engine, ReceiptKeys
from agent_breaker.integrations.langgraph import GuardedToolNode

Policy = Callable[[list[BaseMessage]], AIMessage]


class ScriptedChatModel(BaseChatModel):
    """A chat model whose next message is `policy(conversation)`; it binds tools as a real one
    does (their JSON schemas go with each request) and may only call a tool it was given."""

    policy: Policy

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        reply = self.policy(messages)
        offered = {t["function"]["name"] for t in kwargs.get("tools", [])}
        unknown = [c["name"] for c in reply.tool_calls if c["name"] not in offered]
        if unknown:
            raise ValueError(f"the model called tools it was not given: {unknown}")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def refusal(message: BaseMessage) -> dict[str, Any] | None:
    """The agent-breaker observation a refused call came back with, or None."""
    if not isinstance(message, ToolMessage) or message.status != "error":
        return None
    try:
        content = json.loads(message.text)
    except ValueError:
        return None
    return content if isinstance(content, dict) and "actionable_instruction" in content else None


def call(name: str, args: dict[str, Any], messages: list[BaseMessage]) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call_{len(messages)}"}])


def looping_model(messages: list[BaseMessage]) -> AIMessage:
    """Retries the same broken query after every error, as a stuck model does; it changes
    course only when the guard's observation says so."""
    observation = refusal(messages[-1])
    if observation is not None:
        return AIMessage(f"I could not run the query. {observation['actionable_instruction']}")
    return call("run_sql", {"query": "SELEC count(*) FROM orders WHERE month = '2024-05'"}, messages)


def legitimate_model(messages: list[BaseMessage]) -> AIMessage:
    """Exports May's orders report: counts the orders, fetches the EUR rate (retrying once
    after a dropped connection), starts the export and polls the job until it is done."""
    last = messages[-1]
    if not isinstance(last, ToolMessage):
        return call("run_sql", {"query": "SELECT count(*) FROM orders WHERE month = '2024-05'"}, messages)
    if last.name == "run_sql":
        return call("fetch_rate", {"currency": "EUR"}, messages)
    if last.name == "fetch_rate":
        if last.status == "error":
            return call("fetch_rate", {"currency": "EUR"}, messages)
        return call("start_export", {"report": "orders-2024-05", "currency": "EUR"}, messages)
    job = json.loads(last.text)
    if job["status"] != "done":
        return call("job_status", {"job_id": job["job_id"]}, messages)
    return AIMessage(f"May's orders report is ready: {job['url']}")


def warehouse_tools() -> list[BaseTool]:
    """The agent's tools, fresh for each run (a job queue, a flaky rates API)."""
    rate_attempts = itertools.count(1)
    job_states = iter(["queued", "running", "running", "done"])

    @tool
    def run_sql(query: str) -> dict:
        """Run a read-only SQL query on the orders warehouse."""
        if not query.lstrip().upper().startswith("SELECT"):
            raise ToolException(f'syntax error at or near "{query.split()[0]}"')
        return {"rows": [[1289]]}

    @tool
    def fetch_rate(currency: str) -> dict:
        """Today's exchange rate from USD to `currency`."""
        if next(rate_attempts) == 1:
            raise ConnectionError("connection reset by peer")
        return {"currency": currency, "rate": 0.92}

    @tool
    def start_export(report: str, currency: str) -> dict:
        """Start exporting a report; returns the export job."""
        return {"job_id": "exp-7", "status": next(job_states)}

    @tool
    def job_status(job_id: str) -> dict:
        """The status of an export job."""
        status = next(job_states)
        return {"job_id": job_id, "status": status, **({"url": f"s3://exports/{job_id}.csv"} if status == "done" else {})}

    run_sql.handle_tool_error = True  # the SQL error goes back to the model, as LangChain tools usually do
    return [run_sql, fetch_rate, start_export, job_status]


def build_agent(engine: Engine, policy: Policy) -> CompiledStateGraph:
    """The graph: model → tools → model ... until the model answers in text."""
    tools = warehouse_tools()
    model = ScriptedChatModel(policy=policy).bind_tools(tools)

    def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", GuardedToolNode(tools, engine=engine, handle_tool_errors=True))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


TASK = "How many orders did we get in May? Export them as a report in EUR."


def run_agent(engine: Engine, policy: Policy, thread_id: str) -> list[BaseMessage]:
    """One conversation on its own thread (the guard's session)."""
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}, "recursion_limit": 40}
    return build_agent(engine, policy).invoke({"messages": [HumanMessage(TASK)]}, config)["messages"]


def tool_messages(messages: list[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def main() -> dict[str, Any]:
    # in memory, no incident sinks, no escalation queue: a self-contained demo
    engine = Engine(sinks=False, escalations=False, receipt_keys=ReceiptKeys.ephemeral())
    runaway = tool_messages(run_agent(engine, looping_model, "runaway-1"))
    legit_messages = run_agent(engine, legitimate_model, "legit-1")
    legit = tool_messages(legit_messages)
    cut_at = next((i for i, m in enumerate(runaway, 1) if refusal(m) is not None), None)
    for label, calls in (("runaway", runaway), ("legit", legit)):
        for i, m in enumerate(calls, 1):
            print(f"{label} call {i}: {m.name} -> {m.status}: {' '.join(m.text.split())[:90]}")
    print(f"legit answer: {legit_messages[-1].text}")
    summary = {
        "framework": "langgraph",
        "runaway_cut_at_call": cut_at,
        "legit_calls": len(legit),
        "legit_cut": sum(refusal(m) is not None for m in legit),
    }
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
