"""The gateway endpoints (`/check` before a tool runs, `/result` after it) and the coding
agents' hook endpoints (`/v1/hooks/<agent>`, the agent's own JSON in and out), answered by the
request guard itself: one event each, decided by the config's engine on the event loop, with
no Colang runtime and no framework between the guard and the engine. It is the same engine as
the flows', so the decisions are the same.

Each worker holds at most `max_in_flight` gateway requests at once (their bodies read, queued
or being decided, or their answers being sent); one more is answered 503 with `Retry-After` at
once rather than queued without bound. A token past half of them (its share) takes a place only
while more than a sixteenth are free: one token alone, a gateway's, is refused only when the
worker is all but full, and another token always finds a place its clients cannot pin. A body
on its way holds no place (the request guard bounds those per token). The count, the refusals and
each request's time in the server are metrics."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from prometheus_client import Counter, Gauge, Histogram
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import heuristics as H
from .. import hooks, metrics
from .._aio import without_blocking
from ..dispatch import Caller, verdict_event
from ..events import MAX_ID_CHARS, InvalidEventError, is_id
from ..protocol import BY_COLANG, TOOL_CALL_EVENT, TOOL_RESULT_EVENT
from ._colang import _COLANG_FIELDS, ServedConfigs
from ._errors import error_body
from ._logging import log
from ._paths import CHECK_PATH, CONFIG_ID_DESCRIPTION, HOOK_PATHS, RESULT_PATH

R = TypeVar("R")

ID_PATTERN = r"^[^\x00-\x1f\x7f]+$"
#: a tenant's store calls in the worker threads at once (a Redis config's): the threads take
#: calls first come, first served, so one tenant's hundreds of requests would queue every other
#: tenant's behind them; past it a tenant's calls wait in its own line
STORE_CALLS_PER_TENANT = 8
#: a refused call's reason in a response header: printable ASCII, one line, bounded
MAX_HEADER_REASON = 256

IN_FLIGHT = Gauge(
    "agent_breaker_gateway_in_flight",
    "Gateway requests this worker holds: being read, waiting for the event loop or a store thread, or being decided.",
    registry=metrics.REGISTRY,
)
SHED = Counter(
    "agent_breaker_gateway_shed",
    "Gateway requests answered 503 because the worker held its limit of requests in flight.",
    registry=metrics.REGISTRY,
)
SERVER_SECONDS = Histogram(
    "agent_breaker_gateway_seconds",
    "Time of a gateway request in the server, from the request guard to the answer (queueing on the worker included).",
    ["endpoint"],
    buckets=metrics.LATENCY_BUCKETS,
    registry=metrics.REGISTRY,
)


@dataclass(frozen=True)
class Answer:
    """A route's answer: status, JSON body, extra headers."""

    status: int
    content: Mapping[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)


def problem(status: int, message: str, headers: Mapping[str, str] | None = None) -> Answer:
    return Answer(status, error_body(status, message), headers or {})


class GatewayRequest(BaseModel):
    """The gateway endpoints' request body: the events endpoint's fields, one event."""

    model_config = ConfigDict(extra="forbid")

    config_id: str | None = Field(None, max_length=256, description=CONFIG_ID_DESCRIPTION)
    session_id: str = Field(min_length=1, max_length=256, pattern=ID_PATTERN)
    event: dict[str, Any] = Field(description="One event of the endpoint's type (its `type` may be left out).")


def validated(model: type[BaseModel], data: Any) -> Any:
    """`data` (the body the request guard parsed) as `model`, or the 422 answer."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        return problem(422, "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()))


def prepared_events(
    configs: ServedConfigs,
    config_id: str,
    session_id: str,
    raw: list[dict[str, Any]],
    where: str,
    caller: Caller,
    *,
    colang: bool = True,
) -> Answer | tuple[Any, list[dict[str, Any]]]:
    """A config's rails and the events as the flows and the engine take them (the session and
    the caller's tenant set), or the error answer: 403 for an event outside the caller's scope
    (the dispatch's rule, answered before any Colang state sees the event)."""
    try:
        rails = configs.get(config_id)
    except LookupError as exc:
        return problem(404, str(exc))
    if not configs.takes_events[config_id]:
        return problem(
            400,
            f"config {config_id} is a Colang 1.0 config for native tool calling: it takes no "
            "agent-breaker events (send them to a Colang 2.x config such as agent_breaker)",
        )
    events = []
    for i, event in enumerate(raw):
        at = f"{where}[{i}]" if where == "events" else where
        kind = event.get("type")
        if kind not in BY_COLANG:
            return problem(422, f"{at}.type must be one of {sorted(BY_COLANG)}")
        for name in _COLANG_FIELDS if colang else ():
            # these reach the Colang state: ids only, checked before they get there (the
            # gateway's events go to the engine alone, which refuses a bad id as invalid_event)
            if event.get(name) is not None and not is_id(event[name]):
                return problem(422, f"{at}.{name}: an id of 1 to {MAX_ID_CHARS} printable characters")
        outside = caller.problem(event)
        if outside is not None:
            return problem(403, f"{at}.{outside[0]}: {outside[1]}")
        events.append(caller.bound({**event, "session_id": session_id}))
    return rails, events


def header_text(text: str) -> str:
    return "".join(c if " " <= c <= "~" else "?" for c in text[:MAX_HEADER_REASON])


class Gateway:
    """POST /v1/agent-breaker/check, /v1/agent-breaker/result and /v1/hooks/<agent>, for the
    request guard."""

    KINDS = {CHECK_PATH: TOOL_CALL_EVENT, RESULT_PATH: TOOL_RESULT_EVENT}
    PATHS = frozenset({*KINDS, *HOOK_PATHS})

    def __init__(self, configs: ServedConfigs, *, max_in_flight: int) -> None:
        self.configs = configs
        self.max_in_flight = max_in_flight
        # past half the places a tenant leaves the last sixteenth to the others: one whose clients
        # stop reading their answers (each place is held until its answer is sent, or the write
        # deadline) cannot take them all
        self.share = max(1, max_in_flight // 2)
        self.reserve = max(1, max_in_flight // 16)
        self.in_flight = 0
        self.held: dict[str, int] = {}  # places per tenant (the token's)
        self._lines: dict[str, tuple[asyncio.Semaphore, list[int]]] = {}  # per tenant: its store calls, and waiters
        self._seconds = {path: SERVER_SECONDS.labels(path.rsplit("/", 1)[-1]) for path in self.PATHS}

    def admit(self, tenant: str) -> Answer | None:
        """Take a place for one request of `tenant` (give it back with `release`), or the 503
        answer: the worker is full, or the tenant is past its share and the places left are
        the others' reserve."""
        free = self.max_in_flight - self.in_flight
        if free <= 0:
            why = f"this worker holds {self.max_in_flight} gateway requests already"
        elif self.held.get(tenant, 0) >= self.share and free <= self.reserve:
            why = (
                f"this token holds {self.held[tenant]} gateway requests, past its share of this worker's "
                f"{self.max_in_flight}, and the {free} places left are kept for other tokens"
            )
        else:
            self.in_flight += 1
            self.held[tenant] = self.held.get(tenant, 0) + 1
            IN_FLIGHT.inc()
            return None
        SHED.inc()
        # busy, not a refusal of the call: a gateway retries after a second
        return problem(503, why, {"Retry-After": "1"})

    def release(self, tenant: str, path: str, since: float) -> None:
        self.in_flight -= 1
        self.held[tenant] -= 1
        if not self.held[tenant]:
            del self.held[tenant]
        IN_FLIGHT.dec()
        self._seconds[path].observe(time.perf_counter() - since)

    async def answer(self, path: str, data: Any, caller: Caller) -> Answer:
        """The answer to a /check or /result request (its body parsed and checked by the guard)."""
        kind = self.KINDS[path]
        body = validated(GatewayRequest, data)
        if isinstance(body, Answer):
            return body
        event = {"type": kind, **body.event}
        if event["type"] != kind:
            return problem(422, f"event.type must be {kind} (or left out) here")
        verdict = await self.decide(self.configs.resolve(body.config_id), body.session_id, event, caller)
        if isinstance(verdict, Answer):
            return verdict
        return checked(verdict) if kind == TOOL_CALL_EVENT else reported(verdict)

    async def hook(
        self, agent: str, raw: bytes, config_id: str, caller: Caller, fail_closed: bool, *, prompts_count: bool = True
    ) -> Answer:
        """A coding agent's hook: 200 with the agent's own answer (`{}`: go ahead; a denial in its
        format; a warning as additional context), read and decided as the hook command does. A
        prompt sent with a hook token (`prompts_count` false) restarts nothing: the agent's shell
        holds that token too."""
        read = hooks.read(agent, raw, fail_closed=fail_closed)
        if isinstance(read, hooks.HookAnswer):
            if read.stderr:
                log.warning("agent-breaker: hook %s: %s", agent, read.stderr)
            return Answer(200, read.output)
        assert read.event is not None  # `hooks.read` answers a hook that asks nothing
        if read.event["type"] == hooks.USER_EVENT and not (prompts_count and await self.users_turn(config_id, read, caller)):
            return Answer(200, {})
        verdict = await self.decide(config_id, read.event["session_id"], read.event, caller)
        if isinstance(verdict, Answer):
            # an agent runs a call whose HTTP hook answered an error: an event the guard will
            # not take (an id too long, a label outside the token's scope) is refused instead
            error = verdict.content.get("error")
            message = error.get("message", "") if isinstance(error, Mapping) else ""
            return Answer(200, hooks.not_taken(read, f"{verdict.status}: {message}").output)
        return Answer(200, hooks.answer(read, verdict).output)

    async def users_turn(self, config_id: str, hook: hooks.Hook, caller: Caller) -> bool:
        """Whether a prompt hook is the user's turn (`hooks.users_turn`), judged on the session's
        calls in flight: a server reads no file a request names, so no transcript."""
        assert hook.event is not None
        engine = self.configs.engines.get(config_id)
        if engine is None:
            return True  # an unknown config: `decide` answers it
        session = hook.event["session_id"]
        try:
            in_flight = await self._store_call(caller, engine, lambda: engine.in_flight(session, tenant=caller.tenant))
        except InvalidEventError:
            return True  # an id the engine cannot read: `decide` refuses it
        return hooks.users_turn(hook, in_flight, None)

    async def decide(self, config_id: str, session_id: str, event: dict[str, Any], caller: Caller) -> Answer | dict[str, Any]:
        """One protocol event through the config's engine: the verdict event, or the error answer."""
        ready = prepared_events(self.configs, config_id, session_id, [event], "event", caller, colang=False)
        if isinstance(ready, Answer):
            return ready
        _, [prepared] = ready
        engine = self.configs.engines[config_id]
        return await self._store_call(caller, engine, verdict_event, engine, prepared, caller)

    async def _store_call(self, caller: Caller, engine: Any, fn: Callable[..., R], *args: Any) -> R:
        """`fn(*args)` for the engine (`without_blocking`), in the caller's tenant's line when
        the store is remote."""
        if not engine.store.remote:
            return fn(*args)
        async with self._line(caller.tenant or "*"):
            return await without_blocking(engine, fn, *args)

    @contextlib.asynccontextmanager
    async def _line(self, tenant: str) -> AsyncIterator[None]:
        line = self._lines.get(tenant)
        if line is None:
            line = self._lines[tenant] = (asyncio.Semaphore(STORE_CALLS_PER_TENANT), [0])
        line[1][0] += 1
        try:
            async with line[0]:
                yield
        finally:
            line[1][0] -= 1
            if not line[1][0]:
                del self._lines[tenant]


def checked(verdict: dict[str, Any]) -> Answer:
    """/check: 200 with the verdict when the call may run; 429 when it is refused, with
    Retry-After (when the heuristic knows one), X-Agent-Breaker-Heuristic and
    X-Agent-Breaker-Reason; 422 for an event the guard cannot read."""
    if verdict.get("allowed"):
        return Answer(200, verdict)
    heuristic = str(verdict.get("heuristic") or "")
    headers = {
        "X-Agent-Breaker-Heuristic": header_text(heuristic),
        "X-Agent-Breaker-Reason": header_text(str(verdict.get("reason") or "")),
    }
    retry_after = (verdict.get("observation") or {}).get("retry_after_s")
    if isinstance(retry_after, (int, float)) and 0 < retry_after < math.inf:
        headers["Retry-After"] = str(math.ceil(retry_after))
    return Answer(422 if heuristic == H.INVALID_EVENT else 429, verdict, headers)


def reported(verdict: dict[str, Any]) -> Answer:
    """/result: 200 with the result's verdict (its receipt, for a mutating tool's success); 422
    for a result the guard cannot read or of no call in flight (invalid_event)."""
    return Answer(422 if verdict.get("heuristic") == H.INVALID_EVENT else 200, verdict)
