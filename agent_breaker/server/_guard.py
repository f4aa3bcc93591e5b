"""The request guard: the outermost ASGI middleware, in front of every route, NeMo's included.

It checks the Host and Origin headers, the bearer token (and what it may name), the request's
size and the time its body takes, and the JSON (nesting depth, valid Unicode, events per request)
before anything recursive runs: bad input gets a 4xx, never a 500. A body that passes is parsed
once, here, and left in the ASGI scope state for the route."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from .._admin import ADMIN_TOKEN_ENV, BAD_TOOL, BREAKERS_PATH
from .._context_events import MAX_CONTEXT_EVENTS, context_events
from .._text import has_invalid_chars
from ..dispatch import CALLER
from ..escalations import BAD_ID, ESCALATIONS_PATH
from ..hooks import MAX_INPUT_BYTES, hook_of, oversized, undecided
from ._auth import ALL_TENANTS, METRICS_TOKEN_ENV, Tokens, TokenScope
from ._errors import ServeError
from ._gateway import Answer, Gateway, problem
from ._logging import log
from ._paths import CHAT_PATH, DEFAULT_CONFIG_ID, DEFAULT_HOOK_CONFIG_ID, EVENTS_PATH, GATEWAY_PATHS, HOOK_PATHS, METRICS_PATH
from ._transport import Transport

if TYPE_CHECKING:
    from ._colang import ServedConfigs


ALLOWED_HOSTS_ENV = "AGENT_BREAKER_ALLOWED_HOSTS"
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})

DEFAULT_MAX_REQUEST_BYTES = 1_048_576
DEFAULT_MAX_EVENT_BYTES = 262_144
DEFAULT_MAX_EVENTS = MAX_CONTEXT_EVENTS
DEFAULT_MAX_JSON_DEPTH = 64
#: a body not arrived this long after its head is late (a client's second segment comes within
#: milliseconds, even to a busy worker): only a late body holds one of its token's slots
BODY_GRACE_S = 1.0


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


def _requested_config(path: str, data: Any) -> Any:
    """The config a request's body names, as sent (None when it names none)."""
    if not isinstance(data, dict):
        return None
    if path == EVENTS_PATH or path in GATEWAY_PATHS:
        return data.get("config_id")
    guardrails = data.get("guardrails")  # the chat path
    config_id = guardrails.get("config_id") if isinstance(guardrails, dict) else None
    return config_id if config_id is not None else data.get("config_id")


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
        gateway: Gateway | None = None,
    ) -> None:
        self.app = app
        self.gateway = gateway  # None: the gateway paths reach the app (which answers 404)
        self.tokens = tokens
        self.admin = admin  # None: the admin routes are not installed
        self.hosts = hosts
        self.limits = limits
        self.configs = configs
        self.transport = transport or Transport()
        # per tenant (the token's): its bodies late past BODY_GRACE_S, and the bytes its bodies
        # on their way hold
        self.late_bodies: dict[str, int] = {}
        self.body_bytes: dict[str, int] = {}
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
        pairs = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope.get("headers", ())]
        headers = dict(pairs)
        if len(headers) < len(pairs) and (twice := sorted(_SINGLE_HEADERS & _repeated(pairs))):
            # which of two would count depends on who reads them: a proxy may check one, we the other
            await _reply(send, 400, f"the {', '.join(twice)} header may be sent once")
            return
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
        path = _route_path(scope)
        if self.admin is not None and _is_admin_path(path):
            # the admin token alone opens the admin routes: an API token (a tenant's, or `*`) does not
            if presented is None:
                await _reply(send, 401, "the admin routes need 'Authorization: Bearer <admin token>'", _CHALLENGE)
                return
            if self.admin.tenant_of(presented) is None:
                await _reply(send, 403, f"this token is not the admin token (${ADMIN_TOKEN_ENV})")
                return
            if not scope.get("path", "").isprintable():
                # a line break in the tool name ends the router's match: a bare 404 would hide why
                await _reply(send, 422, BAD_ID if path.startswith(ESCALATIONS_PATH) else BAD_TOOL)
                return
            scope.setdefault("state", {})[ADMIN_GRANTED] = True
        elif self.tokens is not None:
            found = None if presented is None else self.tokens.scope_of(presented)
            if found is None:
                await _reply(send, 401, "a valid 'Authorization: Bearer <token>' header is required", _CHALLENGE)
                return
            granted, tenant = found, found.tenant
            if granted.hooks and path not in HOOK_PATHS:
                await _reply(send, 403, "this token answers the hook endpoints only")
                return
            operator = granted.metrics or (tenant == ALL_TENANTS and granted.configs is None and not granted.hooks)
            if path == METRICS_PATH and not operator:
                # the registry names every tenant, feature and tool, with their spend
                await _reply(send, 403, f"/metrics answers an all-tenant token or ${METRICS_TOKEN_ENV} only")
                return
        if self.gateway is not None and path in self.gateway.PATHS:
            await self._answer_gateway(scope, receive, send, headers, path, tenant, granted)
            return
        read = await self._checked_body(scope, receive, headers, path, tenant, granted)
        if isinstance(read, Refused):
            await read.send(send)
            return
        body, data = read
        if body:
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
        # NeMo calls the actions itself: the caller goes to them in the request's context
        caller = CALLER.set(granted.caller)
        try:
            await self.app(scope, replay, send)
        finally:
            CALLER.reset(caller)

    async def _answer_gateway(
        self,
        scope: dict[str, Any],
        receive: Receive,
        send: Send,
        headers: Mapping[str, str],
        path: str,
        tenant: str,
        granted: TokenScope,
    ) -> None:
        """A gateway or hook request, answered here (see `server._gateway`): no route runs."""
        assert self.gateway is not None
        if scope.get("method") != "POST":
            await _reply(send, 405, "Method Not Allowed", {"Allow": "POST"})
            return
        hook = path in HOOK_PATHS
        # a hook's body is the agent's own: its config and fail policy are named in the query
        config_id, fail_closed = _hook_query(scope) if hook else (None, False)
        if config_id is not None and granted.configs is not None and config_id not in granted.configs:
            await _reply(send, 403, f"this API token may not use config {config_id!r}")
            return
        since = time.perf_counter()
        # the body is read before a place is taken: a body on its way (or a late one, which holds
        # a slot of its own token's) holds none of the places every tenant's calls are decided in
        if hook:
            # the hook input is read as the hook command reads it (hooks.read): its limit, and
            # its answer to what cannot be read
            read = await self._checked_body(scope, receive, headers, path, tenant, granted, hook_input=True)
            if isinstance(read, Refused) and read.status == 413:  # refused unread: taken for a call
                await _send_answer(send, Answer(200, oversized(b"").output))
                return
            if isinstance(read, Refused) and read.status in (408, 503):
                # an agent runs a call whose HTTP hook answered an error: the hook's fail policy
                # answers a server too busy to read it instead
                await _send_answer(send, Answer(200, undecided(read.reason, fail_closed=fail_closed).output))
                return
        else:
            read = await self._checked_body(scope, receive, headers, path, tenant, granted)
        if isinstance(read, Refused):
            await read.send(send)
            return
        refused = self.gateway.admit(tenant)
        if refused is not None:
            if hook:  # as a body too late to read: the hook's fail policy, not a 503 the agent runs on
                why = str(refused.content["error"]["message"])
                refused = Answer(200, undecided(why, fail_closed=fail_closed, hook=hook_of(HOOK_PATHS[path], read[0])).output)
            await _send_answer(send, refused)
            return
        try:
            try:
                if hook:
                    assert config_id is not None
                    answer = await self.gateway.hook(
                        HOOK_PATHS[path], read[0], config_id, granted.caller, fail_closed, prompts_count=not granted.hooks
                    )
                else:
                    answer = await self.gateway.answer(path, read[1], granted.caller)
            except Exception as exc:
                log.exception("agent-breaker: the gateway failed to answer %s", path)
                if hook:  # the hook command's answer when its guard crashes: the fail policy
                    why, agent = f"{type(exc).__name__}: {exc}", HOOK_PATHS[path]
                    answer = Answer(200, undecided(why, fail_closed=fail_closed, hook=hook_of(agent, read[0])).output)
                else:
                    answer = problem(500, "the guard failed to decide this request (the server's log says why)")
            await _send_answer(send, answer)
        finally:
            self.gateway.release(tenant, path, since)

    async def _checked_body(
        self,
        scope: dict[str, Any],
        receive: Receive,
        headers: Mapping[str, str],
        path: str,
        tenant: str,
        granted: TokenScope,
        *,
        hook_input: bool = False,
    ) -> tuple[bytes, Any] | Refused:
        """(the body, its JSON) once read and checked (b"" and None without one), or the refusal.
        A hook input is read up to the hook limit and left unparsed (None): `hooks.read` reads it."""
        if scope.get("method") not in ("POST", "PUT", "PATCH"):
            return b"", None
        if headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return Refused(415, "the request body must be JSON, sent as Content-Type: application/json")
        limit = MAX_INPUT_BYTES if hook_input else self.limits.max_request_bytes
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            return Refused(413, f"the request is over the limit of {limit} bytes")
        read = await self._body(receive, limit, tenant)
        if isinstance(read, tuple):
            return Refused(*read, RETRY_SOON) if read[0] == 503 else Refused(*read)
        if hook_input or not read:
            return read, None
        problem, data = self.check_json(path, read)
        if problem is None and granted.configs is not None and path in (EVENTS_PATH, *GATEWAY_PATHS, CHAT_PATH):
            config_id = _requested_config(path, data)
            if config_id is None:
                config_id = self.configs.resolve(None) if self.configs else DEFAULT_CONFIG_ID
            if not isinstance(config_id, str) or config_id not in granted.configs:
                # the caller's value is echoed only when it is a plausible name (the body may be 1 MiB)
                shown = repr(config_id) if isinstance(config_id, str) and len(config_id) <= 256 else "it names"
                problem = (403, f"this API token may not use the config {shown}")
        return Refused(*problem) if problem is not None else (read, data)

    async def _body(self, receive: Receive, limit: int, tenant: str) -> bytes | tuple[int, str]:
        """The request body, up to `limit` bytes, read within `body_timeout_s`; else (status,
        reason), or (0, "") when the client went away. A body on its way holds no slot: one
        that has not arrived within BODY_GRACE_S is late, and takes one of the token's
        `max_bodies_per_tenant` slots (503 past them: busy, not a refused call; a gateway
        retries); the bytes of the token's bodies on their way are bounded by as many bodies'
        worth, so one tenant's stalled bodies hold its own slots and memory, not another's."""
        chunks: list[bytes] = []
        size, late = 0, False
        slots = self.transport.max_bodies_per_tenant
        budget = slots * self.limits.max_request_bytes
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + self.transport.body_timeout_s
        try:
            while True:
                try:
                    message = await _received_by(receive, deadline if late else min(deadline, started + BODY_GRACE_S))
                except asyncio.TimeoutError:
                    if late or loop.time() >= deadline:
                        return 408, f"the request body did not arrive within {self.transport.body_timeout_s:g} s"
                    if self.late_bodies.get(tenant, 0) >= slots:
                        return 503, f"{slots} request bodies of this token are late already"
                    self.late_bodies[tenant] = self.late_bodies.get(tenant, 0) + 1
                    late = True
                    continue
                if message["type"] == "http.disconnect":
                    return 0, ""
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    return 413, f"the request is over the limit of {limit} bytes"
                self.body_bytes[tenant] = self.body_bytes.get(tenant, 0) + len(chunk)
                chunks.append(chunk)
                if not message.get("more_body"):
                    return b"".join(chunks)
                if self.body_bytes[tenant] > budget:
                    return 503, f"this token's request bodies on their way hold {budget} bytes already"
        finally:
            _give_back(self.body_bytes, tenant, sum(len(c) for c in chunks))
            if late:
                _give_back(self.late_bodies, tenant, 1)

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
            elif path in GATEWAY_PATHS:
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


def _hook_query(scope: Mapping[str, Any]) -> tuple[str, bool]:
    """A hook endpoint's `?config_id=` (the coding agents' config when it names none) and
    `?fail=closed` (the hook command's `--fail closed`: an input the guard cannot decide is
    refused; open, the default, lets it through)."""
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    config_ids = query.get("config_id")
    return (config_ids[-1] if config_ids else DEFAULT_HOOK_CONFIG_ID), query.get("fail", ["open"])[-1] == "closed"


def _bearer(headers: Mapping[str, str]) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, if the request has one."""
    scheme, _, presented = headers.get("authorization", "").partition(" ")
    return presented.strip() if scheme.lower() == "bearer" and presented.strip() else None


def _route_path(scope: Mapping[str, Any]) -> str:
    """The path the router matches: behind a root path (a proxy mount, `--root-path`) the
    request's path starts with it."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
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


async def _reply(send: Send, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
    await _send_answer(send, problem(status, message, headers))


async def _send_answer(send: Send, answer: Answer) -> None:
    # as Starlette's JSONResponse encodes, without its machinery
    body = json.dumps(answer.content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in answer.headers.items()]
    await send({"type": "http.response.start", "status": answer.status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


#: a busy server's answer: come back in a second
RETRY_SOON = {"Retry-After": "1"}


@dataclass(frozen=True)
class Refused:
    """A request turned away before any route: status 0 when the client went away (no answer)."""

    status: int
    reason: str
    headers: Mapping[str, str] = field(default_factory=dict)

    async def send(self, send: Send) -> None:
        if self.status:
            await _reply(send, self.status, self.reason, self.headers)


#: headers a request may carry once
_SINGLE_HEADERS = frozenset({"host", "authorization", "content-type", "content-length", "origin"})


def _repeated(pairs: list[tuple[str, str]]) -> set[str]:
    """The header names sent more than once."""
    seen: set[str] = set()
    twice: set[str] = set()
    for name, _ in pairs:
        (twice if name in seen else seen).add(name)
    return twice


def _give_back(held: dict[str, int], tenant: str, amount: int) -> None:
    held[tenant] = held.get(tenant, 0) - amount
    if held[tenant] <= 0:
        del held[tenant]


async def _received_by(receive: Receive, deadline: float) -> dict[str, Any]:
    """The next ASGI message, by the loop time `deadline` (else TimeoutError). A body already
    buffered comes back without the task yielding (asyncio.timeout_at wraps no task, where
    wait_for makes one): the token's body slot taken around it is given back before any other
    request can see it taken, so only a body that is still on its way holds a slot."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout_at(deadline):
            return await receive()
    return await asyncio.wait_for(receive(), max(0.0, deadline - asyncio.get_running_loop().time()))
