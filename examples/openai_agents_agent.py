"""Two agents on the OpenAI Agents SDK's real `Runner.run`, their tools made with
`guarded_function_tool`, their model scripted (an SDK `Model` that plays a script: no network,
no key):

- a runaway agent that retries the same broken SQL query and never changes course by itself;
  it stops when the guard's observation comes back instead of the query's error;
- a legitimate agent that looks up a customer's orders, starts an export, polls the export job
  until it is done (queued -> running -> done) and retries an exchange-rate lookup once after a
  transient connection failure.

Each `Runner.run` is a session of its own (the integration's default). The last line printed is
the summary: {"framework", "runaway_cut_at_call", "legit_calls", "legit_cut"}.

    pip install -e ".[openai-agents]" && python examples/openai_agents_agent.py
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import agents
from agents import Agent, FunctionTool, MaxTurnsExceeded, ModelResponse, Runner, Usage
from agents.models.interface import Model
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from agent_breaker import Engine, ReceiptKeys
from agent_breaker.integrations.openai_agents import guarded_function_tool

NAME = "openai-agents"
#: the SDK's own bound on a run (its default is 10): the runaway would spin to it unguarded
MAX_TURNS = 20


@dataclass(frozen=True)
class ToolTurn:
    """One tool call of a run and the output the model read for it."""

    name: str
    args: dict[str, Any]
    output: str


def tool_turns(items: str | list[Any]) -> list[ToolTurn]:
    """The tool calls in a run's items (the SDK's Responses-format input), with their outputs."""
    if isinstance(items, str):
        return []
    calls = {item["call_id"]: item for item in items if item.get("type") == "function_call"}
    return [
        ToolTurn(calls[item["call_id"]]["name"], json.loads(calls[item["call_id"]]["arguments"]), item["output"])
        for item in items
        if item.get("type") == "function_call_output"
    ]


def read_json(output: str) -> Any:
    """A tool output as JSON, or None for plain text (the SDK's error message, say)."""
    try:
        return json.loads(output)
    except json.JSONDecodeError:
        return None


def is_observation(output: str) -> bool:
    """Whether a tool output is agent-breaker's observation (a refused call), not the tool's."""
    data = read_json(output)
    return isinstance(data, dict) and "actionable_instruction" in data


# what the model does next, from the tool calls so far: call a tool (name, arguments), several at
# once, or answer
Step = tuple[str, dict[str, Any]] | list[tuple[str, dict[str, Any]]] | str


class ScriptedModel(Model):
    """An Agents SDK model that plays a script instead of calling an API."""

    def __init__(self, script: Callable[[list[ToolTurn]], Step]) -> None:
        self.script = script
        self.ids = itertools.count(1)

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        step = self.script(tool_turns(input))
        if isinstance(step, str):
            n = next(self.ids)
            text = ResponseOutputText(type="output_text", text=step, annotations=[])
            items: list[Any] = [
                ResponseOutputMessage(id=f"msg_{n}", type="message", role="assistant", status="completed", content=[text])
            ]
        else:
            # one tool call, or several in one answer (parallel tool calls)
            items = []
            for name, args in [step] if isinstance(step, tuple) else step:
                n = next(self.ids)
                items.append(
                    ResponseFunctionToolCall(
                        type="function_call", id=f"fc_{n}", call_id=f"call_{n}", name=name, arguments=json.dumps(args)
                    )
                )
        return ModelResponse(output=items, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("this example runs Runner.run, which asks for whole responses")


# ---------------------------------------------------------------- the runaway agent
def runaway_script(turns: list[ToolTurn]) -> Step:
    """Retries the same query whatever the error says, until the guard's observation comes back."""
    if turns and is_observation(turns[-1].output):
        return "The orders database refuses my query; I stopped retrying it. Please check the SQL."
    return "run_sql", {"query": "SELEC count(*) FROM orders WHERE shipped_late"}


def runaway_tools(engine: Engine) -> list[FunctionTool]:
    @guarded_function_tool(engine=engine)
    def run_sql(query: str) -> str:
        """Run a read-only SQL query on the orders database."""
        raise ValueError(f'syntax error at or near "{query.split()[0]}"')

    return [run_sql]


# ---------------------------------------------------------------- the legitimate agent
def legit_script(turns: list[ToolTurn]) -> Step:
    """Orders -> export -> poll the export until done -> exchange rate (one retry) -> answer."""
    if not turns:
        return "search_orders", {"customer": "acme"}
    last = turns[-1]
    if is_observation(last.output):
        return "The guard refused a call; I stopped."
    data = read_json(last.output)
    if last.name == "search_orders":
        return "start_export", {"order_ids": [order["id"] for order in data]}
    if last.name in ("start_export", "export_status") and data["state"] != "done":
        return "export_status", {"job_id": data["job_id"]}
    if last.name == "export_status" or data is None:  # done, or the rate lookup failed: (re)try it
        return "fx_rate", {"currency": "EUR"}
    return f"Exported acme's orders; amounts convert at {data['rate']} EUR per USD."


def legit_tools(engine: Engine) -> list[FunctionTool]:
    states = iter(["running", "running", "done"])
    rate_calls = itertools.count(1)

    @guarded_function_tool(engine=engine)
    def search_orders(customer: str) -> str:
        """The customer's open orders."""
        return json.dumps([{"id": "o-1001", "total_usd": 120}, {"id": "o-1002", "total_usd": 75}])

    @guarded_function_tool(engine=engine)
    def start_export(order_ids: list[str]) -> str:
        """Start exporting orders to the accounting system; returns the export job."""
        return json.dumps({"job_id": "exp-7", "state": "queued", "orders": len(order_ids)})

    @guarded_function_tool(engine=engine)
    async def export_status(job_id: str) -> str:
        """The state of an export job."""
        return json.dumps({"job_id": job_id, "state": next(states)})

    @guarded_function_tool(engine=engine)
    async def fx_rate(currency: str) -> str:
        """Today's exchange rate of a currency against the US dollar."""
        if next(rate_calls) == 1:
            raise ConnectionError("rates API: connection reset by peer")
        return json.dumps({"currency": currency, "rate": 0.92})

    return [search_orders, start_export, export_status, fx_rate]


# ---------------------------------------------------------------- running them
async def run_agent(name: str, script: Callable[[list[ToolTurn]], Step], tools: list[FunctionTool], task: str) -> list[ToolTurn]:
    """One `Runner.run` (a session of its own); the tool calls it made and what came back."""
    agent = Agent(name=name, instructions="Use the tools to do the task.", model=ScriptedModel(script), tools=tools)
    result = await Runner.run(agent, task, max_turns=MAX_TURNS)
    turns = tool_turns(result.to_input_list())
    print(f"{name}: {len(turns)} tool calls, answer: {result.final_output}")
    return turns


async def run_runaway(engine: Engine) -> list[ToolTurn] | None:
    """The runaway agent's tool calls, or None when it spun to the SDK's turn limit."""
    try:
        return await run_agent("runaway", runaway_script, runaway_tools(engine), "How many orders shipped late?")
    except MaxTurnsExceeded:
        return None


async def run_legit(engine: Engine) -> list[ToolTurn]:
    return await run_agent("legit", legit_script, legit_tools(engine), "Export acme's orders and give me the EUR rate.")


def cut_at(turns: list[ToolTurn] | None) -> int | None:
    """The 1-based index of the first refused call."""
    return next((i for i, turn in enumerate(turns or [], 1) if is_observation(turn.output)), None)


async def main() -> dict[str, Any]:
    agents.set_tracing_disabled(True)  # no key to export traces with
    # in memory, no incident sinks or escalation queue: a demo's trips are nobody's page
    engine = Engine(sinks=False, escalations=False, receipt_keys=ReceiptKeys.ephemeral())
    runaway = await run_runaway(engine)
    legit = await run_legit(engine)
    return {
        "framework": NAME,
        "runaway_cut_at_call": cut_at(runaway),
        "legit_calls": len(legit),
        "legit_cut": sum(is_observation(turn.output) for turn in legit),
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
