"""The routes `serve` adds to NeMo's app: the events endpoint and the gateway check, the config
list, /metrics, and (with an admin token) the breaker and escalation admin routes; and which of
NeMo's own routes stay. Each reads the body the request guard parsed."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import heuristics as H
from .. import metrics
from .._admin import BREAKERS_PATH, AdminInputError, breaker_rows, checked_tenant, checked_tool, force, operator_state
from .._aio import without_blocking
from ..actions import ENGINE_PARAM
from ..actions.guards import CALLER_TENANT, label_problem, verdict_event
from ..engine import Engine
from ..escalations import (
    ESCALATIONS_PATH,
    MAX_NOTE_CHARS,
    AlreadyResolved,
    EscalationStorageError,
    InvalidEscalation,
    UnknownEscalation,
    store_location,
)
from ..escalations.operator import Stores
from ..events import MAX_ID_CHARS, is_id
from ..protocol import BY_COLANG, TOOL_CALL_EVENT, TOOL_RESULT_EVENT
from ..store import StorageError
from ._colang import _COLANG_FIELDS, ColangPool, ColangThread, ServedConfigs
from ._errors import json_error
from ._guard import ADMIN_GRANTED, PARSED_BODY
from ._paths import CHAT_PATH, CHECK_PATH, CONFIGS_PATH, DEFAULT_CONFIG_ID, EVENTS_PATH, METRICS_PATH, RESULT_PATH

_ID_PATTERN = r"^[^\x00-\x1f\x7f]+$"


def parsed_body(model: type[BaseModel], request: Request) -> Any:
    """The request's body as `model`, or the 422 answer. The request guard has parsed the body
    and held it to the size, depth and count limits (an empty body is no object: 422)."""
    try:
        return model.model_validate(request.scope.get("state", {}).get(PARSED_BODY))
    except ValidationError as exc:
        return json_error(422, "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()))


class EventsRequest(BaseModel):
    """The events endpoint's request body."""

    model_config = ConfigDict(extra="forbid")

    config_id: str = Field(DEFAULT_CONFIG_ID, max_length=256, description="A config the server serves.")
    session_id: str = Field(min_length=1, max_length=256, pattern=_ID_PATTERN)
    events: list[dict[str, Any]] = Field(min_length=1)


class GatewayRequest(BaseModel):
    """The gateway endpoints' request body: the events endpoint's fields, one event."""

    model_config = ConfigDict(extra="forbid")

    config_id: str = Field(DEFAULT_CONFIG_ID, max_length=256, description="A config the server serves.")
    session_id: str = Field(min_length=1, max_length=256, pattern=_ID_PATTERN)
    event: dict[str, Any] = Field(description="One event of the endpoint's type (its `type` may be left out).")


#: a refused call's reason in a response header: printable ASCII, one line, bounded
MAX_HEADER_REASON = 256


def header_text(text: str) -> str:
    return "".join(c if " " <= c <= "~" else "?" for c in text[:MAX_HEADER_REASON])


def install_events_endpoint(app: FastAPI, configs: ServedConfigs, colang: ColangThread) -> ColangPool:
    """Add POST /v1/agent-breaker/events to the FastAPI app."""
    pool = ColangPool()
    app.state.agent_breaker_colang = pool

    def prepared(
        config_id: str, session_id: str, raw: list[dict[str, Any]], where: str
    ) -> JSONResponse | tuple[Any, list[dict[str, Any]]]:
        """The config's rails and the events as the flows take them, or the error answer."""
        try:
            rails = configs.get(config_id)
        except LookupError as exc:
            return json_error(404, str(exc))
        if not configs.takes_events[config_id]:
            return json_error(
                400,
                f"config {config_id} is a Colang 1.0 config for native tool calling: it takes no "
                "agent-breaker events (send them to a Colang 2.x config such as agent_breaker)",
            )
        bound = CALLER_TENANT.get()
        events = []
        for i, event in enumerate(raw):
            at = f"{where}[{i}]" if where == "events" else where
            kind = event.get("type")
            if kind not in BY_COLANG:
                return json_error(422, f"{at}.type must be one of {sorted(BY_COLANG)}")
            for name in _COLANG_FIELDS:
                # these reach the Colang state: ids only, checked before they get there
                if event.get(name) is not None and not is_id(event[name]):
                    return json_error(422, f"{at}.{name}: an id of 1 to {MAX_ID_CHARS} printable characters")
            tenant = event.get("tenant")
            if bound is not None:
                if tenant is not None and tenant != bound:
                    return json_error(403, f"{at}.tenant: this token acts for one tenant only, and it is not that one")
                tenant = bound
            outside = label_problem(event)
            if outside is not None:
                return json_error(403, f"{at}.{outside[0]}: {outside[1]}")
            events.append({**event, "session_id": session_id, **({"tenant": tenant} if tenant is not None else {})})
        return rails, events

    @app.post(EVENTS_PATH, tags=["agent-breaker"])
    async def agent_breaker_events(request: Request) -> Any:
        """Run agent-breaker events through the config's Colang flows; answer the verdicts."""
        body = parsed_body(EventsRequest, request)
        if isinstance(body, JSONResponse):
            return body
        ready = prepared(body.config_id, body.session_id, body.events, "events")
        if isinstance(ready, JSONResponse):
            return ready
        rails, events = ready
        verdicts = await colang.run(lambda: pool.process(rails, body.config_id, events))
        return {"session_id": body.session_id, "events": verdicts}

    async def gateway(request: Request, kind: str) -> JSONResponse | dict[str, Any]:
        """One event of `kind` from a gateway, decided by the config's engine directly, not
        through the Colang runtime: the same engine as the flows', so the same decisions (a
        Redis store is awaited off the event loop). The verdict event, or the error answer."""
        body = parsed_body(GatewayRequest, request)
        if isinstance(body, JSONResponse):
            return body
        event = {"type": kind, **body.event}
        if event["type"] != kind:
            return json_error(422, f"event.type must be {kind} (or left out) here")
        ready = prepared(body.config_id, body.session_id, [event], "event")
        if isinstance(ready, JSONResponse):
            return ready
        rails, [prepared_event] = ready
        engine: Engine = rails.runtime.registered_action_params[ENGINE_PARAM]
        return await without_blocking(engine, verdict_event, prepared_event, engine)

    @app.post(CHECK_PATH, tags=["agent-breaker"])
    async def agent_breaker_check(request: Request) -> Any:
        """Check one tool call as a gateway does: 200 with the verdict when it may run; 429 when
        it is refused, with Retry-After (when the heuristic knows one), X-Agent-Breaker-Heuristic
        and X-Agent-Breaker-Reason; 422 for an event the guard cannot read."""
        verdict = await gateway(request, TOOL_CALL_EVENT)
        if isinstance(verdict, JSONResponse):
            return verdict
        if verdict.get("allowed"):
            return JSONResponse(status_code=200, content=verdict)
        heuristic = str(verdict.get("heuristic") or "")
        headers = {
            "X-Agent-Breaker-Heuristic": header_text(heuristic),
            "X-Agent-Breaker-Reason": header_text(str(verdict.get("reason") or "")),
        }
        retry_after = (verdict.get("observation") or {}).get("retry_after_s")
        if isinstance(retry_after, (int, float)) and retry_after > 0:
            headers["Retry-After"] = str(math.ceil(retry_after))
        status = 422 if heuristic == H.INVALID_EVENT else 429
        return JSONResponse(status_code=status, content=verdict, headers=headers)

    @app.post(RESULT_PATH, tags=["agent-breaker"])
    async def agent_breaker_result(request: Request) -> Any:
        """Report what a tool checked with /check returned: 200 with the result's verdict (its
        receipt, for a mutating tool's success); 422 for a result the guard cannot read or of no
        call in flight (invalid_event)."""
        verdict = await gateway(request, TOOL_RESULT_EVENT)
        if isinstance(verdict, JSONResponse):
            return verdict
        status = 422 if verdict.get("heuristic") == H.INVALID_EVENT else 200
        return JSONResponse(status_code=status, content=verdict)

    return pool


class ForceRequest(BaseModel):
    """The breaker admin's POST body."""

    model_config = ConfigDict(extra="forbid")

    state: str = Field(max_length=64, description="The state to set: closed, forced_open, disabled or metrics_only.")


def install_admin_endpoints(app: FastAPI, configs: ServedConfigs) -> None:
    """Add the breaker admin routes (only with an admin token: the request guard lets nothing
    else reach them). `config_id` and `tenant` are query parameters."""

    async def run(request: Request, act: Callable[[Engine], Any]) -> Any:
        """`act` on the chosen config's engine, or the error answer."""
        if not request.scope.get("state", {}).get(ADMIN_GRANTED):
            return json_error(403, "the admin routes need the admin token")  # reached past the guard's check
        try:
            config_id, engine = configs.engine(request.query_params.get("config_id"))
        except LookupError as exc:
            return json_error(404, str(exc))
        except ValueError as exc:
            return json_error(422, str(exc))
        try:
            # a shared store waits on the network: off the event loop
            answer = await asyncio.to_thread(act, engine) if engine.store.remote else act(engine)
        except AdminInputError as exc:
            return json_error(422, str(exc))
        except StorageError as exc:
            return json_error(503, str(exc))
        return {"config_id": config_id, **answer}

    @app.get(BREAKERS_PATH, tags=["agent-breaker"])
    async def agent_breaker_breakers(request: Request) -> Any:
        """Every tool breaker of the config (or of `tenant`), with its state and counters."""
        tenant = request.query_params.get("tenant")
        return await run(request, lambda engine: {"breakers": breaker_rows(engine, checked_tenant(tenant))})

    @app.post(BREAKERS_PATH + "/{tool:path}", tags=["agent-breaker"])
    async def agent_breaker_force(tool: str, request: Request) -> Any:
        """Force a tool's breaker open, reset it closed, disable it or make it metrics-only."""
        body = parsed_body(ForceRequest, request)
        if isinstance(body, JSONResponse):
            return body
        tenant = request.query_params.get("tenant")
        return await run(
            request, lambda engine: force(engine, checked_tool(tool), operator_state(body.state), checked_tenant(tenant))
        )


class ResolveRequest(BaseModel):
    """The escalation admin's POST body."""

    model_config = ConfigDict(extra="forbid")

    decision: str = Field(max_length=16, description="resume (lift the freeze) or abort (keep the session closed).")
    note: str | None = Field(None, max_length=MAX_NOTE_CHARS, description="Why, for the record.")


def install_escalation_endpoints(app: FastAPI, configs: ServedConfigs) -> None:
    """Add the escalation admin routes (only with an admin token, like the breaker admin's):
    `GET /v1/agent-breaker/escalations` (`?status=`, `?tenant=`, `?limit=`) and `POST .../escalations/{id}`.
    They read the store the served configs name (`escalations.store`: a SQLite file, or the
    fleet's Redis); `config_id` picks a config when they name different stores."""
    paths = {config_id: store_location(configs.engine(config_id)[1].config) for config_id in configs.ids}
    stores = Stores()

    async def run(request: Request, act: Callable[[Any], Any]) -> Any:
        """`act` on the chosen file's store (off the event loop: SQLite may wait on a lock), or the error answer."""
        if not request.scope.get("state", {}).get(ADMIN_GRANTED):
            return json_error(403, "the admin routes need the admin token")  # reached past the guard's check
        config_id = request.query_params.get("config_id")
        if config_id is not None and config_id not in paths:
            return json_error(404, f"unknown config id; this server serves {configs.ids}")
        files = {paths[config_id]} if config_id is not None else set(paths.values())
        if len(files) != 1:
            return json_error(422, f"config_id is required: the served configs keep escalations in other files ({configs.ids})")
        try:
            return await asyncio.to_thread(lambda: act(stores.get(files.pop())))
        except InvalidEscalation as exc:
            return json_error(422, str(exc))
        except UnknownEscalation as exc:
            return json_error(404, str(exc))
        except AlreadyResolved as exc:
            return json_error(409, str(exc))
        except EscalationStorageError as exc:
            return json_error(503, str(exc))

    @app.get(ESCALATIONS_PATH, tags=["agent-breaker"])
    async def agent_breaker_escalations(request: Request) -> Any:
        """The newest escalations first (`status`: open, resumed or aborted; `tenant`: one
        tenant's; `limit`: 1 to 1000)."""
        status, tenant = request.query_params.get("status"), request.query_params.get("tenant")
        raw = request.query_params.get("limit", "100")
        # what is not a small whole number in ASCII digits is 0, which the store refuses (422)
        limit = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 5 else 0
        return await run(request, lambda store: {"escalations": [e.to_dict() for e in store.list(status, limit, tenant=tenant)]})

    @app.post(ESCALATIONS_PATH + "/{escalation_id}", tags=["agent-breaker"])
    async def agent_breaker_resolve(escalation_id: str, request: Request) -> Any:
        """Resume or abort an open escalation; 409 when it was resolved before."""
        body = parsed_body(ResolveRequest, request)
        if isinstance(body, JSONResponse):
            return body
        return await run(request, lambda store: store.resolve(escalation_id, body.decision, body.note).to_dict())


#: NeMo's routes that `serve` answers; the rest (its model list, which forwards the caller's
#: token upstream, its checks and challenges, config listing, docs and OpenAPI schema) are removed
NEMO_ROUTES_SERVED = frozenset({CHAT_PATH, "/healthz", "/v1/health"})


def keep_only_served_routes(app: FastAPI) -> None:
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) in NEMO_ROUTES_SERVED]
    app.openapi_url = app.docs_url = app.redoc_url = None


def install_configs_endpoint(app: FastAPI, configs: ServedConfigs) -> None:
    @app.get(CONFIGS_PATH)
    async def agent_breaker_configs() -> Any:
        return {"configs": [{"id": config_id} for config_id in configs.ids]}


def install_metrics_endpoint(app: FastAPI) -> None:
    """Add GET /metrics: the process's decision metrics, in Prometheus' text exposition format
    (behind the same bearer token as every other route)."""

    @app.get(METRICS_PATH, tags=["agent-breaker"], include_in_schema=False)
    async def agent_breaker_metrics() -> Any:
        return Response(content=generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)
