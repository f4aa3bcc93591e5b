"""The HTTP transport's own defences, for `agent-breaker serve` (uvicorn's httptools protocol, extended).

A connection holds a file descriptor from its first byte, before any token is read, so the
transport bounds what a connection may hold without one:

- a complete request head within `head_timeout_s` of opening, of its last response, or (for a
  head pipelined behind a request being answered) of its first byte: a half-sent head, or an
  idle keep-alive connection, is closed; and at most MAX_HEAD_BYTES of it, pipelined or first;
- its answers taken in: one the client has not read for `write_timeout_s` (its socket buffers
  full) closes the connection, and frees the gateway place the request held;
- requests pipelined behind one whose body is still arriving are answered in order, each;
  at most MAX_PIPELINED waiting behind the one being answered (past it, the connection goes);
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
#: an answer the client has not taken in for this long closes its connection: the answers it
#: left unread would hold the request's place, and its memory, for as long as it stays
DEFAULT_WRITE_TIMEOUT_S = 10.0
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
    write_timeout_s: float = DEFAULT_WRITE_TIMEOUT_S
    max_connections: int = MAX_DEFAULT_CONNECTIONS
    max_bodies_per_tenant: int = DEFAULT_MAX_BODIES_PER_TENANT
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, *, fd_limit: int | None = None) -> Transport:
        values: dict[str, Any] = {"max_connections": default_max_connections(fd_limit if fd_limit is not None else _fd_limit())}
        for name, var, kind in (
            ("head_timeout_s", "AGENT_BREAKER_HEAD_TIMEOUT_S", float),
            ("body_timeout_s", "AGENT_BREAKER_BODY_TIMEOUT_S", float),
            ("write_timeout_s", "AGENT_BREAKER_WRITE_TIMEOUT_S", float),
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
#: requests a connection may have waiting behind the one being answered: uvicorn parses every
#: request of a read at once, and a client that does not wait for its answers could queue
#: thousands (gigabytes across connections) in one
MAX_PIPELINED = 16


class PipelineTooDeep(AgentBreakerError):
    """Raised from the parser's callback to stop a read that queues past MAX_PIPELINED."""


def guarded_protocol(transport: Transport) -> type[Any]:
    """uvicorn's httptools protocol (its C parser: a gateway request costs about half of what
    it did with h11) with the head timeout, the head size bound, the write deadline and the
    connection cap of `transport`."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedProtocol(HttpToolsProtocol):
        head_timeout_s = transport.head_timeout_s
        write_timeout_s = transport.write_timeout_s
        max_connections = transport.max_connections

        def connection_made(self, transport: Any) -> None:
            self._head_timer: Any = None
            self._write_timer: Any = None
            self._waiting_since = 0.0
            self._head_bytes = 0
            self._in_head = False  # from a request's first byte to the end of its head
            self._ended = 0  # requests whose last byte came, for the head count of a chunk
            self._running: Any = None  # the request being answered (a pipelined one waits)
            self._too_deep = False
            super().connection_made(transport)
            self._await_head()
            if len(self.connections) > self.max_connections:
                self._make_room()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_head_timer()
            self._stop_write_timer()
            running = self._running
            super().connection_lost(exc)
            if running is not None and not running.response_complete:
                # uvicorn marks only the newest request gone: the one answering, behind a
                # pipelined one, would go on writing to a closed connection
                running.disconnected = True
                running.message_event.set()

        def data_received(self, data: bytes) -> None:
            ended = self._ended
            super().data_received(data)
            if self.transport.is_closing() or not self._in_head:
                return
            # the parser keeps an unfinished head in memory, pipelined or first. A chunk that
            # also ended an earlier request is left out (most of it was that request's): the
            # bound is MAX_HEAD_BYTES and one read
            if self._ended == ended:
                self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse_head()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_head = True
            self._head_bytes = 0
            if self._head_timer is None:
                # a head pipelined behind a request being answered is timed from its first
                # byte; an idle connection's head, from the last answer (its timer runs)
                self._start_head_timer()

        def on_headers_complete(self) -> None:
            if len(self.pipeline) >= MAX_PIPELINED:
                self._too_deep = True
                raise PipelineTooDeep  # the parser stops; uvicorn answers its error with send_400_response
            self._in_head = False
            self._stop_head_timer()  # the head is in: the request guard bounds the body
            queued = len(self.pipeline)
            super().on_headers_complete()
            if len(self.pipeline) == queued:  # not queued behind another: it runs now
                self._running = self.cycle

        def on_message_complete(self) -> None:
            self._ended += 1
            super().on_message_complete()

        def on_response_complete(self) -> None:
            answered = self._running
            if answered is not None and answered.more_body and not self.transport.is_closing():
                # answered before its body was read (a refusal): reading the rest to reuse the
                # connection would take in whatever an unauthorized client sends. No request
                # can be pipelined behind it: its body is still arriving
                self.close()
                return
            self._running = self.pipeline[-1][0] if self.pipeline else None  # uvicorn starts it next
            super().on_response_complete()
            if self.transport.is_closing():
                self._write_deadline()  # uvicorn closed it (no keep-alive): its answer may wait
            elif self._running is None and not self._in_head:
                self._await_head()  # idle keep-alive, or the next head arriving slowly

        def send_400_response(self, msg: str) -> None:
            if not self._too_deep:
                super().send_400_response(msg)
                return
            # written now, it could land inside an answer being sent: the connection just goes
            log.warning("agent-breaker: a client queued more than %d requests ahead of its answers: closed", MAX_PIPELINED)
            self.close()

        def pause_writing(self) -> None:
            super().pause_writing()
            self._write_deadline()

        def resume_writing(self) -> None:
            super().resume_writing()
            self._stop_write_timer()

        def waiting(self) -> bool:
            """Waiting for a request head: nothing is being read, run or answered."""
            return self.cycle is None or bool(self.cycle.response_complete)

        def _await_head(self) -> None:
            self._waiting_since = self.loop.time()
            self._start_head_timer()

        def _start_head_timer(self) -> None:
            self._stop_head_timer()
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

        def _stop_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def close(self) -> None:
            """Close after the answers written are sent, within the write deadline."""
            self.transport.close()
            self._write_deadline()

        def _write_deadline(self) -> None:
            # a closed connection's descriptor stays until its answers are sent: one the client
            # does not read would hold it, past the connection cap, which counts open ones
            if self._write_timer is None and (self.flow.write_paused or self.transport.get_write_buffer_size()):
                self._write_timer = self.loop.call_later(self.write_timeout_s, self._write_timed_out)

        def _stop_write_timer(self) -> None:
            if self._write_timer is not None:
                self._write_timer.cancel()
                self._write_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if (self._in_head or self.waiting()) and not self.transport.is_closing():
                self.close()

        def _write_timed_out(self) -> None:
            # the client reads no answer: its connection goes (the request answering on it,
            # and the gateway place it holds, with it); close() would wait for the buffer
            self._write_timer = None
            log.warning("agent-breaker: a client read no answer for %g s: its connection is closed", self.write_timeout_s)
            self.transport.abort()

        def _refuse_head(self) -> None:
            body = json.dumps(error_body(431, f"the request head is over {MAX_HEAD_BYTES} bytes")).encode()
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            self.close()

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
                c.close()
            if len(idle) < excess:
                log.warning("agent-breaker: %d connections, all busy: a new one is closed", len(live) - 1)
                self.close()

    return GuardedProtocol
