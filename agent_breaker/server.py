"""`agent-breaker serve`: NeMo Guardrails' server, hardened, with the agent-breaker events endpoint.

    POST /v1/agent-breaker/events
    {"config_id": "agent_breaker", "session_id": "S", "events": [{"type": "ToolCallRequested", ...}]}
 -> {"session_id": "S", "events": [{"type": "ToolCallVerdict", ...}]}

What it adds to the stock server (see docs/security.md):
- every config is built once, at start-up (a bad one stops start-up), verbose logging off, and
  one engine serves each config whatever `model` a chat-completions request names;
- an ASGI guard in front of every route: the Host header, a bearer token (tokens may be bound
  to a tenant), a request size limit, and a JSON check (nesting depth, valid Unicode, events per
  request) before anything recursive runs, NeMo included: bad input gets a 4xx, never a 500;
- breaker admin routes (`GET /v1/agent-breaker/breakers`, `POST .../breakers/{tool}`), only
  with $AGENT_BREAKER_ADMIN_TOKEN set, and opened by that token alone (no API token);
- escalation admin routes (`GET /v1/agent-breaker/escalations`, `POST .../escalations/{id}`),
  behind the same token, on the escalation queue's store (a SQLite file, or a fleet's Redis);
- the events endpoint runs events through a small pool of live Colang states per config, and
  they hold no payload: the Colang runtime sees ids and a reference, the action reads the event
  from a table that lives for the request only.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import logging
import math
import os
import re
import secrets
import stat
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from nemoguardrails import LLMRails, RailsConfig
from nemoguardrails.context import llm_stats_var
from nemoguardrails.logging.stats import LLMStats
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import heuristics as H
from . import metrics
from ._extras import MissingExtra
from ._text import has_invalid_chars
from .actions import ENGINE_PARAM
from .actions.guards import (
    CALLER_LABELS,
    CALLER_TENANT,
    MAX_CONTEXT_EVENTS,
    PAYLOAD_REF,
    PAYLOADS,
    ROUTE_ARGS,
    context_events,
    label_problem,
    merge_context_messages,
    set_max_context_events,
)
from .admin import (
    ADMIN_TOKEN_ENV,
    BAD_TOOL,
    BREAKERS_PATH,
    AdminInputError,
    breaker_rows,
    checked_tenant,
    checked_tool,
    force,
    operator_state,
)
from .config import ConfigError
from .configs import ROOT as SHIPPED
from .engine import Engine
from .escalations import (
    BAD_ID,
    ESCALATIONS_PATH,
    MAX_NOTE_CHARS,
    AlreadyResolved,
    EscalationStorageError,
    InvalidEscalation,
    UnknownEscalation,
    store_location,
)
from .escalations.operator import Stores
from .events import MAX_ID_CHARS, is_id
from .protocol import BY_COLANG, TOOL_CALL_EVENT, VERDICT_TYPES
from .store import StorageError
from .transport import Transport, TransportError

log = logging.getLogger("agent_breaker.server")

API_TOKEN_ENV = "AGENT_BREAKER_API_TOKEN"
API_TOKENS_FILE_ENV = "AGENT_BREAKER_API_TOKENS_FILE"
#: a token for GET /metrics alone (a scraper's): it may use no config
METRICS_TOKEN_ENV = "AGENT_BREAKER_METRICS_TOKEN"
ALLOWED_HOSTS_ENV = "AGENT_BREAKER_ALLOWED_HOSTS"
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
#: a token's tenant when it may act for every tenant
ALL_TENANTS = "*"

DEFAULT_MAX_REQUEST_BYTES = 1_048_576
DEFAULT_MAX_EVENT_BYTES = 262_144
DEFAULT_MAX_EVENTS = MAX_CONTEXT_EVENTS
DEFAULT_MAX_JSON_DEPTH = 64
POOL_SIZE = 8  # live Colang states per config: its events in flight at once

EVENTS_PATH = "/v1/agent-breaker/events"
CHECK_PATH = "/v1/agent-breaker/check"
CONFIGS_PATH = "/v1/agent-breaker/configs"
DEFAULT_CONFIG_ID = "agent_breaker"  # what the events and check endpoints use when none is named
METRICS_PATH = "/metrics"
CHAT_PATH = "/v1/chat/completions"
_ID_PATTERN = r"^[^\x00-\x1f\x7f]+$"
# fields the Colang runtime sees of an event; the rest stays in PAYLOADS for the request
_COLANG_FIELDS = ("type", "session_id", "call_id", "tool_name", "tenant")
_NOISE = ("uid", "event_created_at", "source_uid")


class ServeError(RuntimeError):
    """`agent-breaker serve` cannot start; the message says why and what to set."""


@dataclass(frozen=True)
class Limits:
    """What one request may carry (every path); each has an environment variable."""

    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    max_events: int = DEFAULT_MAX_EVENTS
    max_depth: int = DEFAULT_MAX_JSON_DEPTH

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Limits:
        values = {}
        for name, var in (
            ("max_request_bytes", "AGENT_BREAKER_MAX_REQUEST_BYTES"),
            ("max_event_bytes", "AGENT_BREAKER_MAX_EVENT_BYTES"),
            ("max_events", "AGENT_BREAKER_MAX_EVENTS_PER_REQUEST"),
            ("max_depth", "AGENT_BREAKER_MAX_JSON_DEPTH"),
        ):
            raw = environ.get(var)
            if raw is None:
                continue
            try:
                values[name] = int(raw)
            except ValueError:
                raise ServeError(f"${var} must be a whole number, but was {raw!r}") from None
            if values[name] < 1:
                raise ServeError(f"${var} must be at least 1, but was {raw}")
        return cls(**values)


@dataclass(frozen=True)
class TokenScope:
    """What one token may act for: a tenant (`*`: every tenant), and the configs, agents and
    features it may name (None: any)."""

    tenant: str
    configs: frozenset[str] | None = None
    agents: frozenset[str] | None = None
    features: frozenset[str] | None = None
    metrics: bool = False  # the scraper's token: /metrics, and no config

    @classmethod
    def read(cls, entry: Any, where: str) -> TokenScope:
        """A tokens-file value: "<tenant>", or {"tenant": ..., "configs": [...], "agents": [...],
        "features": [...]} (the lists optional)."""
        if isinstance(entry, str) and entry:
            return cls(entry)
        if not isinstance(entry, dict) or not isinstance(entry.get("tenant"), str) or not entry["tenant"]:
            raise ServeError(f'{where}: a tenant ("<tenant>" or "*"), or an object with "tenant" and optional lists')
        unknown = set(entry) - {"tenant", "configs", "agents", "features"}
        if unknown:
            raise ServeError(f"{where}: unknown keys {sorted(unknown)} (tenant, configs, agents, features)")
        lists: dict[str, Any] = {}
        for name in ("configs", "agents", "features"):
            value = entry.get(name)
            if value is not None and not (isinstance(value, list) and all(isinstance(v, str) and v for v in value)):
                raise ServeError(f"{where}: {name} must be a list of names")
            lists[name] = None if value is None else frozenset(value)
        return cls(entry["tenant"], **lists)


class Tokens:
    """Bearer tokens, each with its scope (a tenant or all, `*`; optionally the configs, agents
    and features it may name). Only SHA-256 digests are kept, and a presented token is
    compared with every digest in constant time."""

    def __init__(self, tokens: Mapping[str, str | TokenScope]) -> None:
        if not tokens:
            raise ServeError("no API token given")
        self._digests = [
            (hashlib.sha256(t.encode()).digest(), scope if isinstance(scope, TokenScope) else TokenScope(scope))
            for t, scope in tokens.items()
        ]
        self.count = len(self._digests)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Tokens | None:
        """$AGENT_BREAKER_API_TOKEN (all tenants) and/or $AGENT_BREAKER_API_TOKENS_FILE, a JSON
        object {"<token>": "<tenant>" or "*"}; None when neither is set."""
        tokens: dict[str, str | TokenScope] = {}
        single = environ.get(API_TOKEN_ENV, "")
        if single:
            tokens[_checked_token(single, API_TOKEN_ENV)] = ALL_TENANTS
        scraper = environ.get(METRICS_TOKEN_ENV, "")
        if scraper:
            tokens[_checked_token(scraper, METRICS_TOKEN_ENV)] = TokenScope(ALL_TENANTS, configs=frozenset(), metrics=True)
        path = environ.get(API_TOKENS_FILE_ENV, "")
        if path:
            try:
                data = json.loads(Path(path).read_text(encoding="utf-8"))
            except OSError as exc:
                raise ServeError(f"cannot read ${API_TOKENS_FILE_ENV} ({path}): {exc.strerror}") from None
            except ValueError:
                raise ServeError(f"${API_TOKENS_FILE_ENV} ({path}) is not JSON") from None
            if not isinstance(data, dict):
                raise ServeError(f'${API_TOKENS_FILE_ENV} ({path}) must be a JSON object {{"<token>": "<tenant> or *"}}')
            for i, (token, entry) in enumerate(data.items()):
                where = f"{API_TOKENS_FILE_ENV} entry {i}"
                tokens[_checked_token(token, where)] = TokenScope.read(entry, f"${where}")
        return cls(tokens) if tokens else None

    def scope_of(self, presented: str) -> TokenScope | None:
        """What a presented token may act for; None if it is no token of ours."""
        digest = hashlib.sha256(presented.encode("utf-8", "surrogatepass")).digest()
        found = None
        for known, scope in self._digests:
            if hmac.compare_digest(known, digest):
                found = scope
        return found

    def tenant_of(self, presented: str) -> str | None:
        """The tenant a presented token acts for (`*`: every tenant); None if it is no token of ours."""
        scope = self.scope_of(presented)
        return None if scope is None else scope.tenant


TOKEN_FILE_ENV = "AGENT_BREAKER_TOKEN_FILE"


def token_file(environ: Mapping[str, str] = os.environ) -> Path:
    """Where `serve` keeps the token it generates: $AGENT_BREAKER_TOKEN_FILE, else
    $XDG_STATE_HOME/agent-breaker/api-token (~/.local/state by default)."""
    if environ.get(TOKEN_FILE_ENV):
        return Path(environ[TOKEN_FILE_ENV]).expanduser()
    state = environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "agent-breaker" / "api-token"


def generated_token(path: Path) -> str:
    """The token in `path`, made at first start (owner-only: only who runs the server can read
    it). A file others may read or write, or another user's, is refused: its token may be known."""
    if not os.path.lexists(path):
        # written whole, then linked in: workers starting together all read the one that won
        draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with os.fdopen(os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as out:
                out.write(secrets.token_urlsafe(32) + "\n")
            with contextlib.suppress(FileExistsError):
                os.link(draft, path)
        except OSError as exc:
            raise ServeError(f"cannot create the API token file {path}: {exc.strerror}; set ${API_TOKEN_ENV}") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(draft)
    try:
        st = os.stat(path, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise ServeError(f"the API token file {path} must be a file of this user's that only it may read (chmod 600)")
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ServeError(f"cannot read the API token file {path}: {exc.strerror}") from None
    return _checked_token(token, TOKEN_FILE_ENV)


def _checked_token(token: str, source: str) -> str:
    if len(token) < 16:
        raise ServeError(
            f"${source}: a token needs at least 16 characters "
            "(use `python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
        )
    return token


def admin_token(tokens: Tokens | None, environ: Mapping[str, str] = os.environ) -> Tokens | None:
    """$AGENT_BREAKER_ADMIN_TOKEN, the one token of the breaker admin routes; None (the routes
    are off) when unset. It may not also be an API token: an agent runtime holds those."""
    raw = environ.get(ADMIN_TOKEN_ENV, "")
    if not raw:
        return None
    token = _checked_token(raw, ADMIN_TOKEN_ENV)
    if tokens is not None and tokens.tenant_of(token) is not None:
        raise ServeError(f"${ADMIN_TOKEN_ENV} is also an API token: give the admin routes a token of their own")
    return Tokens({token: ALL_TENANTS})


def allowed_hosts(host: str, environ: Mapping[str, str] = os.environ) -> frozenset[str] | None:
    """Host names a request may name: $AGENT_BREAKER_ALLOWED_HOSTS, else the loopback names
    when bound to loopback (against DNS rebinding); None (any) for another bind without a list."""
    raw = environ.get(ALLOWED_HOSTS_ENV, "")
    if raw:
        return frozenset(h.strip().lower() for h in raw.split(",") if h.strip())
    if is_loopback(host):
        return LOOPBACK | {host}
    return None


def is_loopback(host: str) -> bool:
    return host in LOOPBACK or host.startswith("127.")


# ----------------------------------------------------------------------------- the ASGI guard

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def _native_tool_turn(messages: list[dict[str, Any]]) -> bool:
    """A conversation that ends with the model's tool calls (checked by the tool-output rail) or
    with their results after a user's message (recorded by the tool-input rail): NeMo's native
    tool rails answer it with no model."""
    last = messages[-1] if messages else {}
    if last.get("role") == "assistant":
        return bool(last.get("tool_calls"))
    return last.get("role") == "tool" and any(m.get("role") == "user" for m in messages)


def _requested_config(path: str, data: Any) -> str | None:
    """The config a request's body names (the events endpoint's default when it names none)."""
    if not isinstance(data, dict):
        return None
    if path in (EVENTS_PATH, CHECK_PATH):
        config_id = data.get("config_id", DEFAULT_CONFIG_ID)
    elif path == CHAT_PATH:
        guardrails = data.get("guardrails")
        config_id = guardrails.get("config_id") if isinstance(guardrails, dict) else None
        config_id = config_id if config_id is not None else data.get("config_id")
    else:
        return None
    return config_id if isinstance(config_id, str) else repr(config_id)


def _native_turn_size(messages: Any) -> int:
    """The tool calls of a conversation's last model turn and the tool messages after it: what
    the native tool rails check or record, each an engine decision."""
    if not isinstance(messages, list):
        return 0
    size = 0
    for m in reversed(messages):
        if not isinstance(m, dict):
            continue
        if m.get("role") == "tool":
            size += 1
        elif m.get("role") == "assistant" and m.get("tool_calls"):
            calls = m["tool_calls"]
            return size + (len(calls) if isinstance(calls, list) else 1)
        else:
            return size
    return size


class RequestGuard:
    """Outermost ASGI middleware: Host, token, size and JSON checks before any route runs."""

    def __init__(
        self,
        app: Any,
        *,
        tokens: Tokens | None,
        hosts: frozenset[str] | None,
        limits: Limits,
        configs: ServedConfigs | None = None,
        admin: Tokens | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.admin = admin  # None: the admin routes are not installed
        self.hosts = hosts
        self.limits = limits
        self.configs = configs
        self.transport = transport or Transport()
        self.bodies: dict[str, int] = {}  # bodies being read, per tenant (the token's)
        self.token_file: Path | None = None  # where the token `serve` generated is

    def chat_problem(self, body: Mapping[str, Any]) -> str | None:
        """Chat-completions requests these configs cannot answer (NeMo would stream no verdict,
        or fail with a 500): a 400 that says why, before NeMo sees them."""
        if body.get("stream"):
            return "streaming answers carry no agent-breaker verdict: send the request with stream false"
        guardrails = body.get("guardrails")
        config_id = guardrails.get("config_id") if isinstance(guardrails, dict) else None
        if self.configs is None or not isinstance(config_id, str) or config_id not in self.configs.rails:
            return None  # NeMo answers an unknown config with a 4xx of its own
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        roles = {m.get("role") for m in messages}
        if self.configs.takes_events[config_id] and "assistant" in roles:
            return f"config {config_id} (Colang 2.x) takes no assistant messages as input"
        if (
            not self.configs.has_model[config_id]
            and roles & {"user", "assistant", "tool"}
            and not self.configs.takes_events[config_id]
            and not _native_tool_turn(messages)
        ):
            return (
                f"config {config_id} has no model to answer messages: end the conversation with the model's tool calls"
                " (an assistant message with tool_calls) or their results (tool messages), or send agent-breaker events"
            )
        return None

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            # no route of this server takes a WebSocket (NeMo's chat UI is off): none passes unchecked
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        if self.hosts is not None and _host_name(headers.get("host", "")) not in self.hosts:
            await _reply(send, 400, "the Host header names no host this server answers for")
            return
        origin = headers.get("origin")
        if origin is not None and (self.hosts is None or _host_name(urlsplit(origin).netloc) not in self.hosts):
            # a browser page of another site (a bare loopback server has no token to stop it)
            await _reply(send, 403, "requests from web pages of other origins are refused")
            return
        tenant = ALL_TENANTS
        granted = TokenScope(ALL_TENANTS)
        presented = _bearer(headers)
        if self.admin is not None and _is_admin_path(_route_path(scope)):
            # the admin token alone opens the admin routes: an API token (a tenant's, or `*`) does not
            if presented is None:
                await _reply(send, 401, "the admin routes need 'Authorization: Bearer <admin token>'", _CHALLENGE)
                return
            if self.admin.tenant_of(presented) is None:
                await _reply(send, 403, f"this token is not the admin token (${ADMIN_TOKEN_ENV})")
                return
            if not scope.get("path", "").isprintable():
                # a line break in the tool name ends the router's match: a bare 404 would hide why
                await _reply(send, 422, BAD_ID if _route_path(scope).startswith(ESCALATIONS_PATH) else BAD_TOOL)
                return
            scope.setdefault("state", {})[ADMIN_GRANTED] = True
        elif self.tokens is not None:
            found = None if presented is None else self.tokens.scope_of(presented)
            if found is None:
                await _reply(send, 401, "a valid 'Authorization: Bearer <token>' header is required", _CHALLENGE)
                return
            granted, tenant = found, found.tenant
            operator = granted.metrics or (tenant == ALL_TENANTS and granted.configs is None)
            if _route_path(scope) == METRICS_PATH and not operator:
                # the registry names every tenant, feature and tool, with their spend
                await _reply(send, 403, f"/metrics answers an all-tenant token or ${METRICS_TOKEN_ENV} only")
                return
        body = b""
        if scope.get("method") in ("POST", "PUT", "PATCH"):
            if headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
                await _reply(send, 415, "the request body must be JSON, sent as Content-Type: application/json")
                return
            declared = headers.get("content-length")
            if declared is not None and (not declared.isdigit() or int(declared) > self.limits.max_request_bytes):
                await _reply(send, 413, f"the request is over the limit of {self.limits.max_request_bytes} bytes")
                return
            if self.bodies.get(tenant, 0) >= self.transport.max_bodies_per_tenant:
                # a token's stalled bodies hold its own slots, not another tenant's
                await _reply(
                    send, 429, f"{self.transport.max_bodies_per_tenant} request bodies of this token are being read already"
                )
                return
            self.bodies[tenant] = self.bodies.get(tenant, 0) + 1
            try:
                read = await self._body(receive)
            finally:
                self.bodies[tenant] -= 1
                if not self.bodies[tenant]:
                    del self.bodies[tenant]
            if isinstance(read, tuple):
                if read[0]:
                    await _reply(send, *read)
                return
            body = read
            if body:
                problem, data = self.check_json(scope.get("path", ""), body)
                path = scope.get("path", "")
                if problem is None and granted.configs is not None and path in (EVENTS_PATH, CHECK_PATH, CHAT_PATH):
                    config_id = _requested_config(path, data)
                    if config_id not in granted.configs:
                        problem = (403, f"this API token may not use config {config_id!r}")
                if problem is not None:
                    await _reply(send, *problem)
                    return
                # the endpoint reads the body parsed once, here
                scope.setdefault("state", {})[PARSED_BODY] = data
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        # the token stays here: no route, and no model server NeMo calls, ever sees it
        scope["headers"] = [(k, v) for k, v in scope.get("headers", ()) if k.lower() != b"authorization"]
        token = CALLER_TENANT.set(None if tenant == ALL_TENANTS else tenant)
        labels = CALLER_LABELS.set((granted.agents, granted.features))
        try:
            await self.app(scope, replay, send)
        finally:
            CALLER_LABELS.reset(labels)
            CALLER_TENANT.reset(token)

    async def _body(self, receive: Receive) -> bytes | tuple[int, str]:
        """The request body, read within `body_timeout_s`; else (status, reason), or (0, "")
        when the client went away."""
        limit = self.limits.max_request_bytes
        chunks = []
        size = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.transport.body_timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                return 408, f"the request body did not arrive within {self.transport.body_timeout_s:g} s"
            if message["type"] == "http.disconnect":
                return 0, ""
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return 413, f"the request is over the limit of {limit} bytes"
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)

    def check_json(self, path: str, body: bytes) -> tuple[tuple[int, str] | None, Any]:
        """(status, reason) when a body may not reach the routes: nested too deep, not JSON,
        invalid Unicode, or more agent-breaker events (or bigger ones) than a request may
        carry; else (None, the parsed body). Each check runs before the costlier ones after it,
        and none recurses: a hostile body must cost little to turn away."""
        limits = self.limits
        try:
            # strict UTF-8: a surrogate written as raw bytes, or another encoding, is refused here
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return (400, "the request body is not valid UTF-8"), None
        if _max_depth(text) > limits.max_depth:
            return (400, f"the request body is nested deeper than {limits.max_depth} levels"), None
        try:
            data = json.loads(text)
        except ValueError:
            return (400, "the request body is not valid JSON"), None
        if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(data):
            return (400, "the request holds a lone surrogate (not valid Unicode text)"), None
        if isinstance(data, dict):
            if path == EVENTS_PATH:
                events = data.get("events")
                events = events if isinstance(events, list) else []
                where = "events"
            elif path == CHECK_PATH:
                events = [data.get("event")]
                where = "event"
            elif path == CHAT_PATH:
                problem = self.chat_problem(data)
                if problem is not None:
                    return (400, problem), None
                events = context_events(_context_messages(data))
                where = "agent_breaker_events"
                turn = _native_turn_size(data.get("messages"))
                if turn > limits.max_events:
                    return (413, f"{turn} tool calls and tool messages in one turn; the limit is {limits.max_events}"), None
            else:
                events = []
                where = ""
            if len(events) > limits.max_events:
                return (413, f"{len(events)} agent-breaker events in one request; the limit is {limits.max_events}"), None
            for i, event in enumerate(events):
                if _size(event) > limits.max_event_bytes:
                    return (413, f"{where}[{i}] is over the limit of {limits.max_event_bytes} bytes"), None
        return None, data


#: where the request guard leaves the parsed body for the endpoint (ASGI scope state)
PARSED_BODY = "agent_breaker_body"
#: set in the ASGI scope state by the request guard once the admin token checked out
ADMIN_GRANTED = "agent_breaker_admin"
# a JSON string, its loop unrolled (fast in `re`); the closing quote is optional, so an
# unterminated string is consumed once instead of rescanned from each of its quotes
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _max_depth(text: str) -> int:
    """How deep a JSON body nests, from its brackets outside strings (all in C but the max)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(itertools.accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


def _has_lone_surrogate(data: Any) -> bool:
    """Only for bodies that escape a surrogate at all: a walk without recursion."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if has_invalid_chars(value):
                return True
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def _context_messages(body: Mapping[str, Any]) -> list[Any]:
    """Context contents of a chat-completions request: `guardrails.context` and context messages."""
    out = []
    guardrails = body.get("guardrails")
    if isinstance(guardrails, dict) and guardrails.get("context") is not None:
        out.append(guardrails["context"])
    messages = body.get("messages")
    if isinstance(messages, list):
        out.extend(m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "context")
    return out


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


_CHALLENGE = {"www-authenticate": 'Bearer realm="agent-breaker"'}


def _bearer(headers: Mapping[str, str]) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, if the request has one."""
    scheme, _, presented = headers.get("authorization", "").partition(" ")
    return presented.strip() if scheme.lower() == "bearer" and presented.strip() else None


def _route_path(scope: Mapping[str, Any]) -> str:
    """The path the router matches: behind a root path (a proxy mount, `--root-path`) the
    request's path starts with it."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


#: the admin routes' prefixes: the breakers, and the escalation queue
ADMIN_PATHS = (BREAKERS_PATH, ESCALATIONS_PATH)


def _is_admin_path(path: str) -> bool:
    # the path the router matches (percent-decoded by the ASGI server): no spelling reaches
    # an admin route past this check
    return any(path == prefix or path.startswith(prefix + "/") for prefix in ADMIN_PATHS)


def _host_name(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def error_body(status: int, message: str) -> dict[str, Any]:
    """Every error this server answers, from the guard or an endpoint: `{"error": {"message": ...}}`."""
    return {"error": {"message": message, "type": "invalid_request_error", "code": status}}


def json_error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content=error_body(status, message))


def parsed_body(model: type[BaseModel], request: Request) -> Any:
    """The request's body as `model`, or the 422 answer. The request guard has parsed the body
    and held it to the size, depth and count limits (an empty body is no object: 422)."""
    try:
        return model.model_validate(request.scope.get("state", {}).get(PARSED_BODY))
    except ValidationError as exc:
        return json_error(422, "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()))


async def _reply(send: Send, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
    body = json.dumps(error_body(status, message)).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


# ----------------------------------------------------------------------------- configs


class ColangThread:
    """One thread with its own event loop runs every Colang step of the server.

    NeMo's runtime awaits a 1 ms sleep after each internal step and holds a process-wide
    semaphore across them: on the HTTP loop, every request that arrives meanwhile (a flood of
    refused ones included) ran between those steps, and each event took as many turns of
    other work as it has steps. On a loop of its own the guard's steps wait for nothing but the
    interpreter lock, while the HTTP loop parses, checks and refuses requests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="agent-breaker-colang", daemon=True)
        self._thread.start()

    async def run(self, step: Callable[[], Awaitable[Any]]) -> Any:
        """Await `step()` on the Colang loop, for the caller's tenant (context variables do
        not cross threads by themselves)."""
        tenant = CALLER_TENANT.get()

        async def as_caller() -> Any:
            CALLER_TENANT.set(tenant)  # this task's own context
            return await step()

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(as_caller(), self.loop))


class ServedRails(LLMRails):
    """A config's rails as the server runs them: on the Colang thread, and with every context
    message's agent-breaker events read (NeMo turns each context message into its own event,
    and a guard loop busy with the first would miss the others)."""

    colang: ColangThread | None = None

    async def generate_async(self, *args: Any, messages: list[dict[str, Any]] | None = None, **kwargs: Any) -> Any:
        merged = merge_context_messages(messages)
        generate = super().generate_async
        if self.colang is None:
            return await generate(*args, messages=merged, **kwargs)
        return await self.colang.run(lambda: generate(*args, messages=merged, **kwargs))

    async def process_events_async(
        self, events: list[dict[str, Any]], state: Any = None, blocking: bool = False
    ) -> tuple[list[dict[str, Any]], Any]:
        """NeMo's own runs one call at a time per process (a module-wide semaphore its authors
        question in a TODO): a decision awaiting a slow Redis stalled every other session's,
        of every config. Each call here has a state of its own (ColangPool), and the runtime
        keeps states apart (its pending actions are keyed by the state's main flow), so the
        calls interleave wherever an action awaits."""
        llm_stats_var.set(LLMStats())  # as NeMo's own: a flow that calls a model counts there
        return await self.runtime.process_events(events, state, blocking)


class ServedConfigs:
    """The configs a server answers for, each built once at start-up (one engine each)."""

    def __init__(self, root: Path) -> None:
        root = root.expanduser().resolve()
        if not root.is_dir():
            raise ServeError(f"config root {root} is not a folder")
        if _is_config(root):
            folders = {root.name: root}
        else:
            folders = {p.name: p for p in sorted(root.iterdir()) if p.is_dir() and _is_config(p)}
        if not folders:
            raise ServeError(f"{root} holds no config folder (a folder with a config.yml)")
        self.root = root
        self.rails: dict[str, Any] = {}
        self.takes_events: dict[str, bool] = {}
        self.has_model: dict[str, bool] = {}
        for name, folder in folders.items():
            try:
                config = RailsConfig.from_path(str(folder))
                self.rails[name] = ServedRails(config, verbose=False)
            except Exception as exc:  # NeMo wraps ours, and its own come in many types
                missing = _cause(exc, MissingExtra)
                if missing is not None and root == SHIPPED.resolve():
                    # a light install serves the shipped configs it can (the Redis one needs [redis]);
                    # a root of the user's own is served whole or not at all
                    log.warning("agent-breaker: config %s is not served: %s", name, missing)
                    continue
                cause = _cause(exc, (ConfigError, MissingExtra))
                if cause is not None:
                    raise ServeError(f"config {name}: {cause}") from None
                raise ServeError(f"config {name} does not load: {type(exc).__name__}: {_first_line(exc)}") from None
            self.takes_events[name] = config.colang_version != "1.0"
            self.has_model[name] = any(m.type == "main" for m in config.models)
        if not self.rails:
            raise ServeError(f"no config of {root} can be served with the extras installed, see above")

    @property
    def ids(self) -> list[str]:
        return sorted(self.rails)

    def get(self, config_id: str) -> Any:
        rails = self.rails.get(config_id)
        if rails is None:
            raise LookupError(f"unknown config id; this server serves {self.ids}")
        return rails

    def engine(self, config_id: str | None) -> tuple[str, Engine]:
        """A config's id and engine; the id may be left out when the server serves one config
        (ValueError otherwise; LookupError for an unknown one)."""
        if config_id is None:
            if len(self.rails) != 1:
                raise ValueError(f"config_id is required: this server serves {self.ids}")
            config_id = self.ids[0]
        return config_id, self.get(config_id).runtime.registered_action_params[ENGINE_PARAM]


def _is_config(folder: Path) -> bool:
    return (folder / "config.yml").is_file() or (folder / "config.yaml").is_file()


def _cause(exc: BaseException, types: type[BaseException] | tuple[type[BaseException], ...]) -> BaseException | None:
    """Our own error, if NeMo wrapped one (it reports `init(app)` failing, not why)."""
    seen: BaseException | None = exc
    for _ in range(16):
        if seen is None or isinstance(seen, types):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]


# ----------------------------------------------------------------------------- the events endpoint


class EventsRequest(BaseModel):
    """The events endpoint's request body."""

    model_config = ConfigDict(extra="forbid")

    config_id: str = Field(DEFAULT_CONFIG_ID, max_length=256, description="A config the server serves.")
    session_id: str = Field(min_length=1, max_length=256, pattern=_ID_PATTERN)
    events: list[dict[str, Any]] = Field(min_length=1)


class CheckRequest(BaseModel):
    """The gateway check's request body: the events endpoint's fields, one tool call."""

    model_config = ConfigDict(extra="forbid")

    config_id: str = Field(DEFAULT_CONFIG_ID, max_length=256, description="A config the server serves.")
    session_id: str = Field(min_length=1, max_length=256, pattern=_ID_PATTERN)
    event: dict[str, Any] = Field(description="One ToolCallRequested event (its `type` may be left out).")


#: a refused call's reason in a response header: printable ASCII, one line, bounded
MAX_HEADER_REASON = 256


def header_text(text: str) -> str:
    return "".join(c if " " <= c <= "~" else "?" for c in text[:MAX_HEADER_REASON])


class ColangPool:
    """A few live Colang states per config, shared by every session. The guard flows keep no
    per-session state (the engine does), so any free state serves any event: memory stays
    at POOL_SIZE states per config however many sessions there are, and each state holds
    ids only (the payload stays in PAYLOADS for the request)."""

    def __init__(self, size: int = POOL_SIZE) -> None:
        self.size = size
        self._free: dict[str, asyncio.Queue[Any]] = {}

    def _queue(self, config_id: str) -> asyncio.Queue[Any]:
        queue = self._free.get(config_id)
        if queue is None:
            queue = self._free[config_id] = asyncio.Queue()
            for _ in range(self.size):
                queue.put_nowait(None)  # NeMo starts a state on its first event
        return queue

    async def process(self, rails: Any, config_id: str, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        queue = self._queue(config_id)
        state = await queue.get()
        verdicts: list[dict[str, Any]] = []
        try:
            # one event per call: a guard loop awaiting its action would miss the next event
            # of a batch (Colang 2.x flows have no inbox)
            for event in events:
                ref = secrets.token_hex(16)
                PAYLOADS[ref] = event
                try:
                    colang_event = {k: event[k] for k in _COLANG_FIELDS if event.get(k) is not None}
                    colang_event[PAYLOAD_REF] = ref
                    out, state = await rails.process_events_async([colang_event], state)
                finally:
                    PAYLOADS.pop(ref, None)
                    route_args = ROUTE_ARGS.pop(ref, None)
                for e in out:
                    if e.get("type") in VERDICT_TYPES:
                        verdict = {k: v for k, v in e.items() if k not in _NOISE}
                        if route_args is not None and verdict.get("route"):
                            verdict["route"] = {**verdict["route"], "args": route_args}
                        verdicts.append(verdict)
        except BaseException:
            state = None  # a state an event broke is not reused
            raise
        finally:
            queue.put_nowait(state)
        return verdicts

    def states(self) -> list[Any]:
        """The live states (tests: they must hold no payload)."""
        return [s for q in self._free.values() for s in list(q._queue) if s is not None]  # type: ignore[attr-defined]


def install_events_endpoint(app: Any, configs: ServedConfigs, colang: ColangThread) -> ColangPool:
    """Add POST /v1/agent-breaker/events to the FastAPI app."""
    pool = ColangPool()
    app.state.agent_breaker_colang = pool

    def prepared(config_id: str, session_id: str, raw: list[dict[str, Any]], where: str) -> JSONResponse | tuple[Any, list]:
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

    @app.post(CHECK_PATH, tags=["agent-breaker"])
    async def agent_breaker_check(request: Request) -> Any:
        """Check one tool call as a gateway does: 200 with the verdict when it may run; 429 when
        it is refused, with Retry-After (when the heuristic knows one), X-Agent-Breaker-Heuristic
        and X-Agent-Breaker-Reason; 422 for an event the guard cannot read."""
        body = parsed_body(CheckRequest, request)
        if isinstance(body, JSONResponse):
            return body
        event = {"type": TOOL_CALL_EVENT, **body.event}
        if event["type"] != TOOL_CALL_EVENT:
            return json_error(422, f"event.type must be {TOOL_CALL_EVENT} (or left out): the check takes tool calls")
        ready = prepared(body.config_id, body.session_id, [event], "event")
        if isinstance(ready, JSONResponse):
            return ready
        rails, events = ready
        [verdict] = await colang.run(lambda: pool.process(rails, body.config_id, events))
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

    return pool


class ForceRequest(BaseModel):
    """The breaker admin's POST body."""

    model_config = ConfigDict(extra="forbid")

    state: str = Field(max_length=64, description="The state to set: closed, forced_open, disabled or metrics_only.")


def install_admin_endpoints(app: Any, configs: ServedConfigs) -> None:
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


def install_escalation_endpoints(app: Any, configs: ServedConfigs) -> None:
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


def keep_only_served_routes(app: Any) -> None:
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) in NEMO_ROUTES_SERVED]
    app.openapi_url = app.docs_url = app.redoc_url = None


def install_configs_endpoint(app: Any, configs: ServedConfigs) -> None:
    @app.get(CONFIGS_PATH)
    async def agent_breaker_configs() -> Any:
        return {"configs": [{"id": config_id} for config_id in configs.ids]}


def install_metrics_endpoint(app: Any) -> None:
    """Add GET /metrics: the process's decision metrics, in Prometheus' text exposition format
    (behind the same bearer token as every other route)."""

    @app.get(METRICS_PATH, tags=["agent-breaker"], include_in_schema=False)
    async def agent_breaker_metrics() -> Any:
        return Response(content=generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)


# ----------------------------------------------------------------------------- start-up


def quiet_nemo_logging() -> None:
    """NeMo logs every event it processes at INFO (and verbose mode prints them): keep its
    warnings and errors, drop the rest, whatever level the process runs at."""
    nemo = logging.getLogger("nemoguardrails")
    nemo.setLevel(logging.WARNING)
    if not any(isinstance(f, _BelowWarning) for f in nemo.filters):
        nemo.addFilter(_BelowWarning())


class _BelowWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


@contextlib.contextmanager
def _private_cwd() -> Iterator[None]:
    before = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="agent-breaker-serve-") as empty:
        os.chdir(empty)
        try:
            yield
        finally:
            os.chdir(before)


def build_app(root: Path, *, host: str, environ: Mapping[str, str] = os.environ) -> Any:
    """NeMo's FastAPI app, serving the configs under `root`, behind the request guard."""
    tokens = Tokens.from_env(environ)
    generated = None
    if tokens is None:
        if not is_loopback(host):
            raise ServeError(
                f"refusing to bind {host} without configured tokens: set ${API_TOKEN_ENV} (or ${API_TOKENS_FILE_ENV}),"
                " or bind 127.0.0.1"
            )
        # the agent's own tools must not reach the guard (a user turn resets its streaks): a
        # token they do not hold is required even on loopback
        generated = token_file(environ)
        tokens = Tokens({generated_token(generated): ALL_TENANTS})
    limits = Limits.from_env(environ)
    try:
        transport = Transport.from_env(environ)
    except TransportError as exc:
        raise ServeError(str(exc)) from None
    admin = admin_token(tokens, environ)
    quiet_nemo_logging()
    from nemoguardrails.server import api

    with _private_cwd():
        # NeMo imports actions.py / actions/ from the working directory: build every config
        # from an empty private folder, so no file where the server starts runs as code
        configs = ServedConfigs(root)

    async def get_rails(config_ids: list[str], model_name: str | None = None) -> Any:
        # one rails object (one engine) per config: the request's `model` names no other engine
        if len(config_ids) != 1:
            raise ValueError(f"exactly one config id per request; this server serves {configs.ids}")
        try:
            return configs.get(config_ids[0])
        except LookupError as exc:
            raise ValueError(str(exc)) from None

    api._get_rails = get_rails
    api.app.rails_config_path = str(configs.root)
    api.app.single_config_mode = False
    if len(configs.ids) == 1:
        api.app.default_config_id = configs.ids[0]
    colang = ColangThread()
    for rails in configs.rails.values():
        rails.colang = colang
    keep_only_served_routes(api.app)
    install_events_endpoint(api.app, configs, colang)
    install_configs_endpoint(api.app, configs)
    install_metrics_endpoint(api.app)
    if admin is not None:
        install_admin_endpoints(api.app, configs)
        install_escalation_endpoints(api.app, configs)
    set_max_context_events(limits.max_events)
    api.app.state.agent_breaker_configs = configs
    hosts = allowed_hosts(host, environ)
    guard = RequestGuard(api.app, tokens=tokens, hosts=hosts, limits=limits, configs=configs, admin=admin, transport=transport)
    guard.token_file = generated
    return guard
