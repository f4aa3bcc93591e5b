"""LangGraph / LangChain tools behind the guard: `guard_tools(tools, engine=...)` and
`GuardedToolNode(tools, engine=...)`, built on `agent_breaker.guarded`.

The session is the graph's thread id, read from the run's config at each call
(`config["configurable"]["thread_id"]`), so two threads never share loop state. A refused
call comes back as a `ToolMessage` (status "error") whose content is the observation as JSON
text: the graph keeps running and the model reads why and what to do instead. A tool that
raises is recorded as a failed call and the exception goes on to the `ToolNode`, which handles
it as its `handle_tool_errors` says (by default: bad arguments become a message, the rest is raised).
A graph run without a thread id fails closed: the tool does not run (`MissingThreadId`).

    tools = guard_tools([run_sql, search], engine=engine)
    graph.add_node("tools", GuardedToolNode([run_sql, search], engine=engine, handle_tool_errors=True))
    graph.compile(checkpointer=InMemorySaver()).invoke(inputs, {"configurable": {"thread_id": "t1"}})
"""

from __future__ import annotations

from .._extras import require

require("langgraph", "langgraph", "agent_breaker.integrations.langgraph")

import json  # noqa: E402
from collections.abc import Callable, Collection, Iterable, Sequence  # noqa: E402
from typing import Any  # noqa: E402

from langchain_core.messages import ToolCall, ToolMessage  # noqa: E402
from langchain_core.runnables import RunnableConfig  # noqa: E402
from langchain_core.runnables.config import ensure_config  # noqa: E402
from langchain_core.tools import BaseTool, ToolException  # noqa: E402
from langchain_core.tools import tool as make_tool  # noqa: E402
from langchain_core.tools.base import ArgsSchema  # noqa: E402
from langgraph.prebuilt import ToolNode  # noqa: E402
from pydantic import PrivateAttr  # noqa: E402

from .._errors import AgentBreakerError  # noqa: E402
from .._guarded import FailureKind, failure_kind, guarded, with_advice  # noqa: E402
from ..engine import Engine  # noqa: E402

#: the configurable key a graph run names its thread by (LangGraph's own)
THREAD_ID = "thread_id"


class MissingThreadId(AgentBreakerError, ValueError):
    """A guarded tool ran with no thread id in its config: the guard keys loop state by it, and
    one shared session would mix every conversation's history, so the call does not run."""


class GuardedTool(BaseTool):
    """One LangChain tool behind the guard. The model sees the same name, description and
    arguments; each call is checked, and the wrapped tool runs only when it is allowed."""

    tool: BaseTool
    engine: Engine
    session_key: str = THREAD_ID
    tenant_key: str | None = None
    mutating: bool | None = None
    classify: Callable[[BaseException], FailureKind | None] = failure_kind
    # the tools guarded with this one, by name: a refusal that routes to one of them runs it
    _siblings: dict[str, GuardedTool] = PrivateAttr(default_factory=dict)

    @property
    def tool_call_schema(self) -> ArgsSchema:
        return self.tool.tool_call_schema

    @property
    def args(self) -> dict[str, Any]:
        return self.tool.args

    def get_input_schema(self, config: RunnableConfig | None = None) -> Any:
        # the ToolNode reads it to inject graph state, store and runtime into the wrapped tool
        return self.tool.get_input_schema(config)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{self.name} is guarded: call it with invoke() or ainvoke(), which check each call first")

    def invoke(self, input: str | dict[str, Any] | ToolCall, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config = ensure_config(config)
        answered: list[Any] = []

        # guarded reads the call's arguments from this signature; the tool gets its whole input,
        # with what the ToolNode injected
        def run_tool(**_model_args: Any) -> Any:
            return _ran(answered, self.tool.invoke(input, config, **kwargs))

        call_id, model_args = _parse(input, self.tool)
        alternatives = {name: _alternative(sibling, call_id, config, answered) for name, sibling in self._siblings.items()}
        advice: list[dict[str, Any]] = []
        protected = guarded(run_tool, **self._guard(config), alternatives=alternatives, advise=advice.append)
        try:
            out = protected(**model_args)
        except ToolException:
            if answered:  # the tool caught its own error: recorded as failed, its message goes back
                return _advised(answered[0], advice)
            raise
        return _advised(answered[0], advice) if answered else self._refusal(out, call_id)

    async def ainvoke(self, input: str | dict[str, Any] | ToolCall, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config = ensure_config(config)
        answered: list[Any] = []

        async def run_tool(**_model_args: Any) -> Any:
            return _ran(answered, await self.tool.ainvoke(input, config, **kwargs))

        call_id, model_args = _parse(input, self.tool)
        alternatives = {name: _aalternative(sibling, call_id, config, answered) for name, sibling in self._siblings.items()}
        advice: list[dict[str, Any]] = []
        protected = guarded(run_tool, **self._guard(config), alternatives=alternatives, advise=advice.append)
        try:
            out = await protected(**model_args)
        except ToolException:
            if answered:
                return _advised(answered[0], advice)
            raise
        return _advised(answered[0], advice) if answered else self._refusal(out, call_id)

    def _guard(self, config: RunnableConfig) -> dict[str, Any]:
        """`guarded`'s settings for one call: the session and tenant come from this run's config."""
        configurable = config.get("configurable") or {}
        session = configurable.get(self.session_key)
        if session in (None, ""):
            raise MissingThreadId(
                f"agent-breaker: {self.name} ran without configurable[{self.session_key!r}]; the guard keeps each "
                f"thread's loop state under it: invoke the graph with "
                f"config={{'configurable': {{{self.session_key!r}: ...}}}}"
            )
        tenant = configurable.get(self.tenant_key) if self.tenant_key else None
        # one ToolNode run (a task of the graph) runs the tool calls of one model message
        metadata = config.get("metadata") or {}
        turn = metadata.get("langgraph_checkpoint_ns") or configurable.get("checkpoint_ns") or None
        return {
            "engine": self.engine,
            "session": str(session),
            "tool": self.name,
            "tenant": None if tenant is None else str(tenant),
            "mutating": self.mutating,
            "classify": self.classify,
            "turn": None if turn is None else str(turn),
        }

    def _refusal(self, observation: dict[str, Any], call_id: str | None) -> Any:
        """The observation as the model reads a tool's answer: JSON text, in a ToolMessage when
        the call came from the model (its id is the call's)."""
        content = json.dumps(observation)
        if call_id is None:
            return content
        return ToolMessage(content, name=self.name, tool_call_id=call_id, status="error")


def _advised(answer: Any, advice: list[dict[str, Any]]) -> Any:
    """The tool's answer with the warnings it ran under, for the model to read."""
    if not advice:
        return answer
    if isinstance(answer, ToolMessage) and isinstance(answer.content, str):
        return answer.model_copy(update={"content": with_advice(answer.content, advice)})
    return with_advice(answer, advice)


def _parse(input: str | dict[str, Any] | ToolCall, tool: BaseTool) -> tuple[str | None, dict[str, Any]]:
    """The model's call id (None for bare arguments) and the arguments the model chose: the
    graph state, store or runtime a ToolNode injects are not part of the call."""
    if isinstance(input, str):
        return None, {"input": input}
    if input.get("type") == "tool_call":
        call_id, args = input["id"], input["args"]
    else:
        call_id, args = None, input
    chosen = tool.args
    return call_id, {name: value for name, value in args.items() if name in chosen}


def _ran(answered: list[Any], output: Any) -> Any:
    """What the guard records of the tool's answer: the content the model reads (a message's
    envelope, its ids, would make every result look new). An answer with status "error" is the
    tool's own handled failure: it is recorded as one."""
    answered.append(output)
    if isinstance(output, ToolMessage):
        if output.status == "error":
            raise ToolException(output.text)
        return output.content
    return output


def _call(tool: BaseTool, call_id: str | None, args: dict[str, Any]) -> dict[str, Any]:
    if call_id is None:
        return args
    return {"type": "tool_call", "name": tool.name, "args": args, "id": call_id}


def _alternative(tool: GuardedTool, call_id: str | None, config: RunnableConfig, answered: list[Any]) -> Callable[..., Any]:
    """A guarded sibling the engine routes a refused call to, answering the same call."""

    def run(**args: Any) -> Any:
        answered.append(tool.invoke(_call(tool, call_id, args), config))
        return answered[-1]

    return run


def _aalternative(tool: GuardedTool, call_id: str | None, config: RunnableConfig, answered: list[Any]) -> Callable[..., Any]:
    async def run(**args: Any) -> Any:
        answered.append(await tool.ainvoke(_call(tool, call_id, args), config))
        return answered[-1]

    return run


def guard_tools(
    tools: Iterable[BaseTool | Callable[..., Any]],
    *,
    engine: Engine,
    session_key: str = THREAD_ID,
    tenant_key: str | None = None,
    mutating: Collection[str] = (),
    classify: Callable[[BaseException], FailureKind | None] = failure_kind,
) -> list[GuardedTool]:
    """Each tool (a `BaseTool`, or a function, made one with `langchain_core.tools.tool`)
    behind the guard. `session_key` / `tenant_key`: the configurable keys the session and the
    tenant are read from at each call. `mutating`: the names of the tools that change the world.
    A refusal whose route names another of these tools runs it (guarded) for the same call."""
    wrapped = [
        GuardedTool(
            name=t.name,
            description=t.description,
            args_schema=t.args_schema,
            return_direct=t.return_direct,
            tags=t.tags,
            metadata=t.metadata,
            extras=t.extras,
            tool=t,
            engine=engine,
            session_key=session_key,
            tenant_key=tenant_key,
            mutating=True if t.name in mutating else None,
            classify=classify,
        )
        for t in (t if isinstance(t, BaseTool) else make_tool(t) for t in tools)
    ]
    siblings = {t.name: t for t in wrapped}
    for t in wrapped:
        t._siblings = {name: other for name, other in siblings.items() if other is not t}
    return wrapped


class GuardedToolNode(ToolNode):
    """A `ToolNode` whose tools are guarded (`guard_tools`); its other keyword arguments
    (`handle_tool_errors`, `name`, `messages_key`, ...) are the ToolNode's."""

    def __init__(
        self,
        tools: Sequence[BaseTool | Callable[..., Any]],
        *,
        engine: Engine,
        session_key: str = THREAD_ID,
        tenant_key: str | None = None,
        mutating: Collection[str] = (),
        classify: Callable[[BaseException], FailureKind | None] = failure_kind,
        **kwargs: Any,
    ) -> None:
        guarded_tools = guard_tools(
            tools,
            engine=engine,
            session_key=session_key,
            tenant_key=tenant_key,
            mutating=mutating,
            classify=classify,
        )
        super().__init__(guarded_tools, **kwargs)


__all__ = ["THREAD_ID", "GuardedTool", "GuardedToolNode", "MissingThreadId", "guard_tools"]
