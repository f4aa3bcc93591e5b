"""Two agents on LiteLLM, offline, behind agent-breaker's LiteLLM guardrail.

Each agent is a plain tool loop over `litellm.acompletion`: LiteLLM's real completion path runs
(its callbacks, the guardrail's hooks, its cost accounting), only the model's replies are
scripted (`mock_response` / `mock_tool_calls`). The guard sees each request before the model
call and each tool call before the client runs it.

- The runaway agent asks for the same broken SQL query every turn, whatever comes back.
- The legitimate agent looks a customer up, fetches an invoice (once more after a transient
  503), starts an export and polls it from queued to done, then answers.

    pip install -e ".[litellm]" && python examples/litellm_agent.py

The last line of stdout is a JSON summary.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # the bundled prices: no fetch at import

import asyncio
import inspect
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

import litellm

from agent_breaker import Engine, ReceiptKeys
from agent_breaker.integrations.litellm import AgentBreakerGuardrail

MODEL = "gpt-4o-mini"  # in LiteLLM's cost map: each turn is priced by LiteLLM
MAX_TURNS = 12

Message = dict[str, Any]
Reply = tuple[str, list[dict[str, Any]]]  # the model's text and its tool calls


# ----------------------------------------------------------------- the tools (plain Python)
def run_sql(query: str) -> dict[str, Any]:
    raise ValueError(f'syntax error at or near "{query.split()[0]}"')


def lookup_customer(email: str) -> dict[str, Any]:
    return {"customer_id": "C-1042", "email": email, "latest_invoice": "INV-3001"}


def make_fetch_invoice() -> Callable[..., dict[str, Any]]:
    calls = 0

    def fetch_invoice(invoice_id: str) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("503 Service Unavailable")
        return {"invoice_id": invoice_id, "customer_id": "C-1042", "amount_usd": 1250.0, "status": "overdue"}

    return fetch_invoice


def start_export(customer_id: str) -> dict[str, Any]:
    return {"job_id": "J-77", "customer_id": customer_id, "status": "queued"}


def make_get_job_status() -> Callable[..., dict[str, Any]]:
    states = iter(["running", "done"])

    def get_job_status(job_id: str) -> dict[str, Any]:
        status = next(states, "done")
        return {"job_id": job_id, "status": status} | (
            {"url": f"https://exports.example.com/{job_id}.csv"} if status == "done" else {}
        )

    return get_job_status


def schema(name: str, fn: Callable[..., Any]) -> dict[str, Any]:
    """The tool as the model is told about it: its name and string parameters."""
    params = list(inspect.signature(fn).parameters)
    props = {p: {"type": "string"} for p in params}
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": props, "required": params}},
    }


# ----------------------------------------------------------------- the scripted models
def call(name: str, **args: Any) -> dict[str, Any]:
    return {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def last_result(messages: list[Message]) -> tuple[str | None, dict[str, Any], str]:
    """The tool, arguments and output of the conversation's latest tool result."""
    if messages[-1]["role"] != "tool":
        return None, {}, ""
    for message in reversed(messages):
        for tool_call in message.get("tool_calls") or []:
            if tool_call["id"] == messages[-1]["tool_call_id"]:
                fn = tool_call["function"]
                return fn["name"], json.loads(fn["arguments"]), messages[-1]["content"]
    return None, {}, ""


def looping_model(messages: list[Message]) -> Reply:
    """Never changes course: the same query, whatever the last one returned. Its run ends when
    a reply comes back without a tool call: the guard's observation in place of the call."""
    return "", [call("run_sql", query="SELEC count(*) FROM orders WHERE day = current_date")]


def legit_model(messages: list[Message]) -> Reply:
    """Reads the latest result and takes the next step of the task."""
    tool, args, output = last_result(messages)
    if tool is None:
        return "", [call("lookup_customer", email="ada@example.com")]
    if tool == "fetch_invoice" and output.startswith("Error"):
        return "", [call("fetch_invoice", **args)]  # a transient error: try once more
    result = json.loads(output)
    if tool == "lookup_customer":
        return "", [call("fetch_invoice", invoice_id=result["latest_invoice"])]
    if tool == "fetch_invoice":
        return "", [call("start_export", customer_id=result["customer_id"])]
    if result["status"] != "done":
        return "", [call("get_job_status", job_id=result["job_id"])]
    return f"Invoice INV-3001 is overdue ($1,250). The account export is ready: {result['url']}", []


# ----------------------------------------------------------------- the agent loop
async def run_agent(
    model: Callable[[list[Message]], Reply], tools: dict[str, Callable[..., Any]], task: str
) -> tuple[list[str], set[str], str]:
    """The client's loop: ask the model, run the tool calls it gets back, until it answers.
    Returns the ids of the tool calls the model asked for, those the client ran, the answer."""
    run_id = f"run-{uuid.uuid4().hex[:8]}"  # a fresh session for each run
    schemas = [schema(name, fn) for name, fn in tools.items()]
    messages: list[Message] = [{"role": "user", "content": task}]
    asked: list[str] = []
    ran: set[str] = set()
    for _ in range(MAX_TURNS):
        text, tool_calls = model(messages)
        asked += [c["id"] for c in tool_calls]
        try:
            response = await litellm.acompletion(
                model=MODEL,
                messages=messages,
                tools=schemas,
                metadata={"run_id": run_id},
                mock_response=text,
                mock_tool_calls=tool_calls or None,
            )
        except litellm.RateLimitError as exc:  # the guard refused the model call (HTTP 429)
            return asked, ran, str(exc)
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return asked, ran, message.content or ""
        for tool_call in message.tool_calls:
            ran.add(tool_call.id)
            try:
                output = json.dumps(tools[tool_call.function.name](**json.loads(tool_call.function.arguments)))
            except Exception as exc:
                output = f"Error: {type(exc).__name__}: {exc}"
            messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": output})
    return asked, ran, "(gave up)"


async def main() -> None:
    litellm.suppress_debug_info = True
    logging.getLogger("LiteLLM").setLevel(logging.CRITICAL)
    engine = Engine(sinks=False, escalations=False, receipt_keys=ReceiptKeys.ephemeral())
    litellm.callbacks = [AgentBreakerGuardrail(engine)]

    asked, ran, answer = await run_agent(looping_model, {"run_sql": run_sql}, "How many orders came in today?")
    refused = [i for i, cid in enumerate(asked, 1) if cid not in ran]
    print(f"runaway agent: {len(asked)} tool calls asked, refused: {refused}; it ends with: {answer[:160]}")
    runaway_cut = refused[0] if refused else None

    tools = {
        "lookup_customer": lookup_customer,
        "fetch_invoice": make_fetch_invoice(),
        "start_export": start_export,
        "get_job_status": make_get_job_status(),
    }
    asked, ran, answer = await run_agent(legit_model, tools, "Is ada@example.com's latest invoice paid? Export her account too.")
    legit_cut = sum(cid not in ran for cid in asked)
    print(f"legitimate agent: {len(asked)} tool calls, {legit_cut} refused; it answers: {answer}")

    summary = {"framework": "litellm", "runaway_cut_at_call": runaway_cut, "legit_calls": len(asked), "legit_cut": legit_cut}
    print(json.dumps(summary))


if __name__ == "__main__":
    asyncio.run(main())
