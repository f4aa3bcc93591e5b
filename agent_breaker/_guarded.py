"""Enforcement in front of the tool: `guarded(tool_fn, engine=..., session=...)`.

The guard's verdicts only advise; a caller that ignores them bypasses every guard. A guarded
tool cannot be ignored: each call is checked first, the tool runs only when the call is
allowed, its result (or its exception) is recorded, and a refused call returns the synthetic
observation instead of the tool's output, so the agent reads why and what to do. A refusal
whose route names an alternative the caller registered runs that alternative, guarded too.

    tools = guarded(search_db, engine=engine, session=lambda: run_id.get())

    @guarded(engine=engine, session="s1", mutating=True)
    async def wire_transfer(to: str, amount: int) -> dict: ...
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import json
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal

from ._aio import without_blocking
from ._text import normalize_name
from .dispatch import Decision, decide_event
from .engine import Engine
from .verdicts import Verdict

log = logging.getLogger("agent_breaker.guarded")

FailureKind = Literal["dependency", "call"]
#: exceptions that say the dependency did not answer (its breaker counts them), not that the call was wrong
DEPENDENCY_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, asyncio.TimeoutError)
#: what one error message may carry into the engine (it classifies it, and keeps only hashes)
MAX_ERROR_CHARS = 500


def failure_kind(exc: BaseException) -> FailureKind | None:
    """A raised exception's kind: a transport error is the dependency's; anything else is left
    to the engine to read from the message (HTTP 5xx, "timeout", ...), else the call's own."""
    return "dependency" if isinstance(exc, DEPENDENCY_ERRORS) else None


Session = str | Callable[[], str]
#: what a guarded call does with an advisory (a graduated heuristic's warning): the call runs,
#: and this gets the observation to pass on to the agent
Advise = Callable[[dict[str, Any]], Any]


def guarded(
    fn: Callable[..., Any] | None = None,
    *,
    engine: Engine,
    session: Session,
    tool: str | None = None,
    tenant: str | Callable[[], str | None] | None = None,
    mutating: bool | None = None,
    alternatives: Mapping[str, Callable[..., Any]] | None = None,
    classify: Callable[[BaseException], FailureKind | None] = failure_kind,
    turn: str | Callable[[], str | None] | None = None,
    advise: Advise | None = None,
) -> Any:
    """`fn` behind the guard (sync or async; as a decorator when `fn` is left out). `session`
    (and `tenant`, `turn`) may be callables, read at each call (a run id from a context
    variable). Keyword and positional arguments are the call's arguments, by the function's
    parameter names. Refused: the verdict's observation is returned, or a registered
    alternative's result when the refusal routes to it. Raised: the exception is recorded as a
    failed call (its kind from `classify`) and raised again. `turn`: the model step that asked
    for the call (parallel calls of one step share it: a repeat of an action among them is
    refused at once). `advise`: called with the observation of a warning the call runs under
    (default: logged), for the caller to pass on to the agent."""
    if fn is None:
        return lambda f: guarded(
            f,
            engine=engine,
            session=session,
            tool=tool,
            tenant=tenant,
            mutating=mutating,
            alternatives=alternatives,
            classify=classify,
            turn=turn,
            advise=advise,
        )
    guard = _Guard(
        fn,
        engine,
        session,
        normalize_name(tool or fn.__name__),
        tenant,
        mutating,
        alternatives or {},
        classify,
        turn,
        advise or _log_advisory,
    )
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            return await guard.run_async(*args, **kwargs)

        return run_async

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        return guard.run(*args, **kwargs)

    return run


class _Guard:
    def __init__(
        self,
        fn: Callable[..., Any],
        engine: Engine,
        session: Session,
        tool: str,
        tenant: str | Callable[[], str | None] | None,
        mutating: bool | None,
        alternatives: Mapping[str, Callable[..., Any]],
        classify: Callable[[BaseException], FailureKind | None],
        turn: str | Callable[[], str | None] | None,
        advise: Advise,
    ) -> None:
        self.fn = fn
        self.turn = turn
        self.advise = advise
        self.engine = engine
        self.session = session
        self.tool = tool
        self.tenant = tenant
        self.mutating = mutating
        self.alternatives = {normalize_name(name): alt for name, alt in alternatives.items()}
        self.classify = classify
        self.signature = inspect.signature(fn)

    def _event(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = self.signature.bind(*args, **kwargs)
        call_args: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            kind = self.signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_KEYWORD:
                call_args.update(value)
            elif kind is inspect.Parameter.VAR_POSITIONAL:
                call_args[name] = list(value)
            else:
                call_args[name] = value
        tenant = self.tenant() if callable(self.tenant) else self.tenant
        event: dict[str, Any] = {
            "type": "tool_call",
            "session": self.session() if callable(self.session) else self.session,
            "call_id": f"g-{uuid.uuid4().hex}",
            "tool": self.tool,
            "args": call_args,
        }
        if tenant is not None:
            event["tenant"] = tenant
        if self.mutating is not None:
            event["mutating"] = self.mutating
        turn = self.turn() if callable(self.turn) else self.turn
        if turn is not None:
            event["turn"] = turn
        return event

    def _result(self, call: Mapping[str, Any], **outcome: Any) -> dict[str, Any]:
        keep = ("session", "call_id", "tool", "tenant", "mutating")
        return {"type": "tool_result", **{k: call[k] for k in keep if k in call}, **outcome}

    def _failure(self, call: Mapping[str, Any], exc: BaseException) -> dict[str, Any]:
        error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
        kind = self.classify(exc)
        return self._result(call, ok=False, error=error, **({"error_kind": kind} if kind else {}))

    def _refused(self, verdict: Verdict) -> tuple[Callable[..., Any] | None, dict[str, Any]]:
        """A refusal's alternative (registered, with its mapped arguments), or none."""
        route = verdict.route or {}
        if route.get("tier") == "alternative" and route.get("tool") in self.alternatives:
            return self.alternatives[route["tool"]], dict(route.get("args") or {})
        return None, {}

    def run(self, *args: Any, **kwargs: Any) -> Any:
        call = self._event(args, kwargs)
        verdict = self._verdict(decide_event(self.engine, call))
        if not verdict.allowed:
            alternative, alt_args = self._refused(verdict)
            return verdict.observation if alternative is None else alternative(**alt_args)
        self._advise(verdict)
        try:
            output = self.fn(*args, **kwargs)
        except Exception as exc:
            self._record(self._failure(call, exc))
            raise
        self._record(self._result(call, ok=True, result=_plain(output)))
        return output

    @staticmethod
    def _verdict(decision: Decision) -> Verdict:
        # a call the guard cannot read (arguments too big or too deep) is refused: the tool does not run
        assert isinstance(decision.verdict, Verdict)
        return decision.verdict

    def _record(self, event: dict[str, Any]) -> None:
        """The tool ran: a result the guard cannot read (too big, too deep) is logged, and the
        tool's own answer goes back to the agent all the same."""
        invalid = decide_event(self.engine, event).invalid
        if invalid is not None:
            log.warning("agent-breaker: the result of %s was not recorded: %s", self.tool, invalid)

    async def run_async(self, *args: Any, **kwargs: Any) -> Any:
        call = self._event(args, kwargs)
        verdict = self._verdict(await self._decide(decide_event, self.engine, call))
        if not verdict.allowed:
            alternative, alt_args = self._refused(verdict)
            if alternative is None:
                return verdict.observation
            out = alternative(**alt_args)
            return await out if inspect.isawaitable(out) else out
        self._advise(verdict)
        try:
            output = await self.fn(*args, **kwargs)
        except asyncio.CancelledError:
            # a caller's timeout cancelled the call: the dependency did not answer in time. Recorded
            # at once (a cancelled task must not await again), or the call would wait forever
            self._record(self._failure(call, TimeoutError("cancelled before it answered")))
            raise
        except Exception as exc:
            await self._decide(self._record, self._failure(call, exc))
            raise
        await self._decide(self._record, self._result(call, ok=True, result=_plain(output)))
        return output

    def _advise(self, verdict: Verdict) -> None:
        """Hand a warning to the caller's hook; a failing hook never keeps the call from running
        (it is allowed, and awaits its result)."""
        if verdict.advisory and verdict.observation is not None:
            try:
                self.advise(verdict.observation)
            except Exception:
                log.exception("agent-breaker: the advise hook of %s failed", self.tool)

    async def _decide(self, method: Callable[..., Any], *args: Any) -> Any:
        return await without_blocking(self.engine, method, *args)


def _log_advisory(observation: dict[str, Any]) -> None:
    log.warning(
        "agent-breaker: %s ran under a warning (%s): %s", observation["tool"], observation["warning"], observation["message"]
    )


def with_advice(output: Any, advice: list[dict[str, Any]]) -> Any:
    """A tool's text output with the warnings it ran under after it, as JSON the model reads;
    any other output as it is."""
    if not advice or not isinstance(output, str):
        return output
    return "\n\n".join([output, *(json.dumps(a) for a in advice)])


def _plain(output: Any) -> Any:
    """A tool's output as the engine reads results: JSON-like values as they are, a pydantic
    model or a dataclass as its fields, anything else as its text."""
    if output is None or isinstance(output, (str, int, float, bool, list, dict)):
        return output
    dump = getattr(output, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if dataclasses.is_dataclass(output) and not isinstance(output, type):
        return dataclasses.asdict(output)
    return str(output)


__all__ = ["DEPENDENCY_ERRORS", "failure_kind", "guarded", "with_advice"]
