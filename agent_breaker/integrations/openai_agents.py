"""OpenAI Agents SDK tools behind the guard: `guarded_function_tool`, the SDK's `function_tool`
with `agent_breaker.guarded` in front of each call.

    @guarded_function_tool(engine=engine)
    def run_sql(query: str) -> str: ...

    agent = Agent(name="analyst", tools=[run_sql])
    await Runner.run(agent, "How many orders shipped late?")

Each call the model makes is checked first, on the arguments it chose. A refused call never
reaches the function: the model reads the guard's observation (JSON text) as the tool's output
and the run goes on. A function that raises is recorded as a failed call (the exception's kind
from `classify`, as everywhere), then the SDK turns the exception into the model's error text
by the tool's `failure_error_function`, as it would without the guard; arguments the SDK
rejects before the function runs are recorded as a failed call too, with the SDK's message.

Why not the SDK's tool input / output guardrails: an output guardrail runs after the SDK has
turned an exception into text, so a failed call cannot be told from a result, and a tool whose
`failure_error_function` is None fails the run before any output guardrail runs. The guard has
to see the exception itself, so it is built with the function, as `function_tool` builds the
tool: `guarded_function_tool` takes `function_tool`'s keyword arguments.

Session = the run. The SDK has no run id (a trace id only while tracing is on), but every tool
call of one `Runner.run` carries that run's own `Usage` object (`ToolContext.usage`); by default
(`run_session`) it gets a fresh id at the run's first tool call, so two runs never share loop
state (a run resumed from a serialized `RunState`, after a human approval, starts a new one).
`session=` replaces it: a string, or a function of the call's `ToolContext`
(`lambda ctx: ctx.context.thread_id`, a session that spans the runs of one conversation).
"""

from __future__ import annotations

from .._extras import require

require("agents", "openai-agents", "agent_breaker.integrations.openai_agents")

import contextlib  # noqa: E402
import contextvars  # noqa: E402
import functools  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

from agents import FunctionTool, function_tool  # noqa: E402
from agents.tool_context import ToolContext  # noqa: E402

from .._errors import AgentBreakerError  # noqa: E402
from .._guarded import FailureKind, failure_kind, guarded, with_advice  # noqa: E402
from ..engine import Engine  # noqa: E402

RunSession = str | Callable[[ToolContext[Any]], str]
RunTenant = str | Callable[[ToolContext[Any]], str | None] | None

_SESSION_ATTR = "_agent_breaker_session"
log = logging.getLogger("agent_breaker.integrations.openai_agents")


def run_session(ctx: ToolContext[Any]) -> str:
    """One session per `Runner.run`: an id the run's `Usage` object is given at its first tool
    call (parallel calls resolve it on the event loop, one at a time, so they agree)."""
    session = getattr(ctx.usage, _SESSION_ATTR, None)
    if session is None:
        session = f"openai-agents-{uuid.uuid4().hex}"
        setattr(ctx.usage, _SESSION_ATTR, session)
    return str(session)


class ArgumentsRejected(AgentBreakerError):
    """The SDK answered the call itself before the function ran (its arguments did not parse
    or validate): recorded as a failed call, the SDK's message as its error."""


@dataclass
class _Call:
    """What the function did in one call, seen from inside the SDK's invoker."""

    ran: bool = False
    error: Exception | None = None


# set by the tool's invoker for one call; the SDK runs the function in that call's context (a
# sync function in a worker thread, which copies it)
_CALL: contextvars.ContextVar[_Call] = contextvars.ContextVar("agent_breaker_openai_agents_call")


@contextlib.contextmanager
def _watch() -> Iterator[None]:
    call = _CALL.get()
    call.ran = True
    try:
        yield
    except Exception as exc:
        call.error = exc
        raise


def _watched(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` telling the current call that it ran, and what it raised; the SDK reads its name,
    docstring and signature (the run context it injects, too) through the wrapper."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            with _watch():
                return await fn(*args, **kwargs)

        return run_async

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with _watch():
            return fn(*args, **kwargs)

    return run


def _arguments(input: str) -> dict[str, Any]:
    """The arguments the model chose, the call's identity; text that is not a JSON object is
    kept whole (the SDK rejects it, and the call is recorded as failed)."""
    try:
        args = json.loads(input) if input.strip() else {}
    except json.JSONDecodeError:
        return {"input": input}
    return args if isinstance(args, dict) else {"input": input}


def guarded_function_tool(
    fn: Callable[..., Any] | None = None,
    *,
    engine: Engine,
    session: RunSession = run_session,
    tenant: RunTenant = None,
    mutating: bool | None = None,
    classify: Callable[[BaseException], FailureKind | None] = failure_kind,
    **function_tool_kwargs: Any,
) -> Any:
    """`function_tool(fn, **function_tool_kwargs)` behind the guard (as a decorator when `fn`
    is left out). `session` and `tenant`: strings, or functions of the call's `ToolContext`,
    read at each call. `mutating`, `classify`: as for `guarded`."""
    if fn is None:
        return lambda f: guarded_function_tool(
            f,
            engine=engine,
            session=session,
            tenant=tenant,
            mutating=mutating,
            classify=classify,
            **function_tool_kwargs,
        )
    tool: FunctionTool = function_tool(_watched(fn), **function_tool_kwargs)
    invoke = tool.on_invoke_tool

    async def on_invoke_tool(ctx: ToolContext[Any], input: str) -> Any:
        call = _Call()
        answered: list[Any] = []

        async def run_tool(**_model_args: Any) -> Any:
            answered.append(await invoke(ctx, input))
            if call.error is not None:  # the SDK made the model's error text of it: a failed call
                raise call.error
            if not call.ran:
                raise ArgumentsRejected(answered[0])
            return answered[0]

        advice: list[dict[str, Any]] = []
        protected = guarded(
            run_tool,
            engine=engine,
            session=session(ctx) if callable(session) else session,
            tool=tool.name,
            tenant=tenant(ctx) if callable(tenant) else tenant,
            mutating=mutating,
            classify=classify,
            # the run's model requests so far: the tool calls of one model answer share the count
            turn=f"request-{getattr(ctx.usage, 'requests', 0)}",
            advise=advice.append,
        )
        token = _CALL.set(call)
        try:
            out = await protected(**_arguments(input))
        except Exception as exc:
            if answered:  # recorded as failed; the model reads the SDK's answer, as without the guard
                if exc is not call.error and not isinstance(exc, ArgumentsRejected):
                    log.warning("agent-breaker: the guard failed after %s answered: %r", tool.name, exc)
                return with_advice(answered[0], advice)
            raise
        finally:
            _CALL.reset(token)
        return with_advice(answered[0], advice) if answered else json.dumps(out)

    tool.on_invoke_tool = on_invoke_tool
    return tool


__all__ = ["ArgumentsRejected", "guarded_function_tool", "run_session"]
