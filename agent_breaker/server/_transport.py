"""The HTTP transport's own defences, for `agent-breaker serve` (uvicorn's httptools protocol, extended).

A connection holds a file descriptor from its first byte, before any token is read, so the
transport bounds what a connection may hold without one:

- a complete request head within `head_timeout_s` of opening, or of its last response: a
  half-sent head, or an idle keep-alive connection, is closed; and at most MAX_HEAD_BYTES of it;
- at most `max_connections` open: a new connection past it first closes the oldest one still
  waiting for a request head (one that is sending or awaiting a response is never closed),
  and is itself closed when every connection is busy. The default stays under the process's
  file-descriptor limit, which `serve` raises to its hard limit at start.

Request bodies are bounded in time and per token by the request guard (`server.RequestGuard`),
and gateway requests per worker by `max_in_flight` (`server._gateway`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._errors import AgentBreakerError
from ._errors import error_body

log = logging.getLogger("agent_breaker")

DEFAULT_HEAD_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 30.0
DEFAULT_MAX_BODIES_PER_TENANT = 16
#: gateway requests a worker holds at once; at about 0.3 ms each, the last waits under 0.1 s
DEFAULT_MAX_IN_FLIGHT = 256
#: descriptors kept for everything else than client connections (Redis, files, logs, the listener)
RESERVED_FDS = 128
MAX_DEFAULT_CONNECTIONS = 4096


class TransportError(AgentBreakerError, ValueError):
    """A transport setting in the environment is not valid; the message names it."""


@dataclass(frozen=True)
class Transport:
    """How long a connection may take to send its head and body, and how many may be open.
    Each has an environment variable; `from_env` reads them."""

    head_timeout_s: float = DEFAULT_HEAD_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    max_connections: int = MAX_DEFAULT_CONNECTIONS
    max_bodies_per_tenant: int = DEFAULT_MAX_BODIES_PER_TENANT
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, *, fd_limit: int | None = None) -> Transport:
        values: dict[str, Any] = {"max_connections": default_max_connections(fd_limit if fd_limit is not None else _fd_limit())}
        for name, var, kind in (
            ("head_timeout_s", "AGENT_BREAKER_HEAD_TIMEOUT_S", float),
            ("body_timeout_s", "AGENT_BREAKER_BODY_TIMEOUT_S", float),
            ("max_connections", "AGENT_BREAKER_MAX_CONNECTIONS", int),
            ("max_bodies_per_tenant", "AGENT_BREAKER_MAX_BODIES_PER_TOKEN", int),
            ("max_in_flight", "AGENT_BREAKER_MAX_IN_FLIGHT", int),
        ):
            raw = environ.get(var)
            if raw is None:
                continue
            try:
                value = kind(raw)
            except ValueError:
                raise TransportError(f"${var} must be a number, but was {raw!r}") from None
            if not 0 < value < float("inf"):
                raise TransportError(f"${var} must be a positive finite number, but was {raw}")
            values[name] = value
        return cls(**values)

    def uvicorn_options(self) -> dict[str, Any]:
        """What `uvicorn.Config` takes to serve with these bounds."""
        return {"http": guarded_protocol(self)}


def default_max_connections(fd_limit: int) -> int:
    """Connections that fit in the descriptor limit beside RESERVED_FDS, at most
    MAX_DEFAULT_CONNECTIONS (each costs a descriptor and a little memory)."""
    return max(1, min(MAX_DEFAULT_CONNECTIONS, fd_limit - RESERVED_FDS))


def _fd_limit() -> int:
    try:
        import resource
    except ImportError:  # not on POSIX: the runtime's own limit applies
        return MAX_DEFAULT_CONNECTIONS + RESERVED_FDS
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else MAX_DEFAULT_CONNECTIONS + RESERVED_FDS


def raise_fd_limit() -> int:
    """Raise this process's open-file limit to its hard limit (a server's usual start); returns
    the soft limit in force."""
    try:
        import resource
    except ImportError:
        return _fd_limit()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):  # a hard limit the kernel caps lower: keep the soft one
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return _fd_limit()


#: a request line and headers; a head still unfinished past it is refused (431)
MAX_HEAD_BYTES = 65_536


def guarded_protocol(transport: Transport) -> type[Any]:
    """uvicorn's httptools protocol (its C parser: a gateway request costs about half of what
    it did with h11) with the head timeout, the head size bound and the connection cap of
    `transport`."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedProtocol(HttpToolsProtocol):
        head_timeout_s = transport.head_timeout_s
        max_connections = transport.max_connections

        def connection_made(self, transport: Any) -> None:
            self._head_timer: Any = None
            self._waiting_since = 0.0
            self._head_bytes = 0
            super().connection_made(transport)
            self._await_head()
            if len(self.connections) > self.max_connections:
                self._make_room()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_head_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.waiting():
                self._head_bytes += len(data)  # the parser keeps a head in memory until it ends
            super().data_received(data)
            if self.transport.is_closing():
                return
            if not self.waiting():
                self._stop_head_timer()  # the head is in: the request guard bounds the body
            elif self._head_bytes > MAX_HEAD_BYTES:
                self._refuse_head()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.transport.is_closing():
                return
            if self.cycle is not None and self.cycle.more_body:
                # answered before its body was read (a refusal): reading the rest to reuse the
                # connection would take in whatever an unauthorized client sends
                self.transport.close()
            elif self.waiting():
                self._await_head()  # idle keep-alive, or the next head arriving slowly

        def waiting(self) -> bool:
            """Waiting for a request head: nothing is being read, run or answered."""
            return self.cycle is None or bool(self.cycle.response_complete)

        def _await_head(self) -> None:
            self._stop_head_timer()
            self._head_bytes = 0
            self._waiting_since = self.loop.time()
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

        def _stop_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.waiting() and not self.transport.is_closing():
                self.transport.close()

        def _refuse_head(self) -> None:
            body = json.dumps(error_body(431, f"the request head is over {MAX_HEAD_BYTES} bytes")).encode()
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            self.transport.close()

        def _make_room(self) -> None:
            live = [c for c in self.connections if not c.transport.is_closing()]
            excess = len(live) - self.max_connections
            if excess <= 0:
                return
            idle = sorted(
                (c for c in live if c is not self and isinstance(c, GuardedProtocol) and c.waiting()),
                key=lambda c: c._waiting_since,
            )
            for c in idle[:excess]:
                c.transport.close()
            if len(idle) < excess:
                log.warning("agent-breaker: %d connections, all busy: a new one is closed", len(live) - 1)
                self.transport.close()

    return GuardedProtocol
