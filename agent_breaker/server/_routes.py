"""The routes `serve` adds to NeMo's app (the request guard answers the gateway's): the
events endpoint, the config list, /metrics, and (with an admin token) the breaker and escalation admin routes; and which of
NeMo's own routes stay. Each reads the body the request guard parsed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field

from .. import metrics
from .._admin import BREAKERS_PATH, AdminInputError, breaker_rows, checked_tenant, checked_tool, force, operator_state
from ..dispatch import CALLER
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
from ..store import StorageError
from ._colang import ColangPool, ColangThread, ServedConfigs
from ._errors import json_error
from ._gateway import ID_PATTERN, Answer, prepared_events, validated
from ._guard import ADMIN_GRANTED, PARSED_BODY
from ._paths import CHAT_PATH, CONFIG_ID_DESCRIPTION, CONFIGS_PATH, EVENTS_PATH, HEALTH_PATHS, METRICS_PATH


def parsed_body(model: type[BaseModel], request: Request) -> Any:
    """The request's body as `model`, or the 422 answer. The request guard has parsed the body
    and held it to the size, depth and count limits (an empty body is no object: 422)."""
    body = validated(model, request.scope.get("state", {}).get(PARSED_BODY))
    return as_response(body) if isinstance(body, Answer) else body


def as_response(answer: Answer) -> JSONResponse:
    return JSONResponse(status_code=answer.status, content=dict(answer.content), headers=dict(answer.headers))


class EventsRequest(BaseModel):
    """The events endpoint's request body."""

    model_config = ConfigDict(extra="forbid")

    config_id: str | None = Field(None, max_length=256, description=CONFIG_ID_DESCRIPTION)
    session_id: str = Field(min_length=1, max_length=256, pattern=ID_PATTERN)
    events: list[dict[str, Any]] = Field(min_length=1)


def install_events_endpoint(app: FastAPI, configs: ServedConfigs, colang: ColangThread) -> ColangPool:
    """Add POST /v1/agent-breaker/events to the FastAPI app."""
    pool = ColangPool()
    app.state.agent_breaker_colang = pool

    @app.post(EVENTS_PATH, tags=["agent-breaker"])
    async def agent_breaker_events(request: Request) -> Any:
        """Run agent-breaker events through the config's Colang flows; answer the verdicts."""
        body = parsed_body(EventsRequest, request)
        if isinstance(body, JSONResponse):
            return body
        config_id = configs.resolve(body.config_id)
        ready = prepared_events(configs, config_id, body.session_id, body.events, "events", CALLER.get())
        if isinstance(ready, Answer):
            return as_response(ready)
        rails, events = ready
        verdicts = await colang.run(lambda: pool.process(rails, config_id, events))
        return {"session_id": body.session_id, "events": verdicts}

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
    They read the stores the served configs name (`escalations.store`: a SQLite file, or the
    fleet's Redis), every one unless `config_id` picks a config."""
    paths = {config_id: store_location(configs.engine(config_id)[1].config) for config_id in configs.ids}
    stores = Stores()

    def chosen(request: Request) -> dict[Any, list[str]] | JSONResponse:
        """The stores to act on, each with the ids of the served configs that use it: the one
        `config_id` names, else every one; or the error answer."""
        if not request.scope.get("state", {}).get(ADMIN_GRANTED):
            return json_error(403, "the admin routes need the admin token")  # reached past the guard's check
        config_id = request.query_params.get("config_id")
        if config_id is not None and config_id not in paths:
            return json_error(404, f"unknown config id; this server serves {configs.ids}")
        files: dict[Any, list[str]] = {}
        for cid in [config_id] if config_id is not None else configs.ids:
            files.setdefault(paths[cid], []).append(cid)
        return files

    async def answered(act: Callable[[], Any]) -> Any:
        """`act` off the event loop (SQLite may wait on a lock), or the error answer."""
        try:
            return await asyncio.to_thread(act)
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
        tenant's; `limit`: 1 to 1000), of every served config's queue unless `config_id` names
        one; each names the configs that keep it (`configs`)."""
        files = chosen(request)
        if isinstance(files, JSONResponse):
            return files
        # the store checks the status (422 for another); what is not a small whole number in
        # ASCII digits is limit 0, which it refuses too
        status: Any = request.query_params.get("status")
        tenant = request.query_params.get("tenant")
        raw = request.query_params.get("limit", "100")
        limit = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 5 else 0

        def listing() -> dict[str, Any]:
            rows = [
                {**e.to_dict(), "configs": ids}
                for file, ids in files.items()
                for e in stores.get(file).list(status, limit, tenant=tenant)
            ]
            rows.sort(key=lambda row: row["created_at"], reverse=True)
            return {"escalations": rows[:limit]}

        return await answered(listing)

    @app.post(ESCALATIONS_PATH + "/{escalation_id}", tags=["agent-breaker"])
    async def agent_breaker_resolve(escalation_id: str, request: Request) -> Any:
        """Resume or abort an open escalation (in whichever served queue holds it, unless
        `config_id` names one); 409 when it was resolved before."""
        body = parsed_body(ResolveRequest, request)
        if isinstance(body, JSONResponse):
            return body
        files = chosen(request)
        if isinstance(files, JSONResponse):
            return files

        def resolved() -> dict[str, Any]:
            missing: UnknownEscalation | None = None
            for file in files:
                try:
                    return stores.get(file).resolve(escalation_id, body.decision, body.note).to_dict()
                except UnknownEscalation as exc:
                    missing = exc
            assert missing is not None
            raise missing

        return await answered(resolved)


#: NeMo's routes that `serve` answers; the rest (its model list, which forwards the caller's
#: token upstream, its checks and challenges, config listing, docs and OpenAPI schema) are removed
NEMO_ROUTES_SERVED = frozenset({CHAT_PATH, *HEALTH_PATHS})


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
