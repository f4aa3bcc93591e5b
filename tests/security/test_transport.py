"""Attacks on the transport of `agent-breaker serve`, before any token is read or while a body is
being read: half-sent request heads, idle connections, stalled bodies. A real server on a free
loopback port (short timeouts and a small connection cap, so the attack reaches them), stopped
by PID. Authorized clients keep answering within a second throughout."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Iterator

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("nemoguardrails")

from _server import TOKEN, Server, call, served_with_tenants  # noqa: E402

from agent_breaker.server._transport import (  # noqa: E402
    MAX_HEAD_BYTES,
    MAX_PIPELINED,
    Transport,
    TransportError,
    default_max_connections,
)

ACME = "acme-token-" + "b" * 24
GLOBEX = "globex-token-" + "c" * 24
HEAD_TIMEOUT_S = 2
BODY_TIMEOUT_S = 3
MAX_CONNECTIONS = 64
BODIES_PER_TOKEN = 4
MAX_IN_FLIGHT = 2 * BODIES_PER_TOKEN  # two tokens' stalled bodies fill it
WRITE_TIMEOUT_S = 3
CHECK = "/v1/agent-breaker/check"


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    env = {
        "AGENT_BREAKER_HEAD_TIMEOUT_S": str(HEAD_TIMEOUT_S),
        "AGENT_BREAKER_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
        "AGENT_BREAKER_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
        "AGENT_BREAKER_MAX_BODIES_PER_TOKEN": str(BODIES_PER_TOKEN),
        "AGENT_BREAKER_MAX_IN_FLIGHT": str(MAX_IN_FLIGHT),
        "AGENT_BREAKER_WRITE_TIMEOUT_S": str(WRITE_TIMEOUT_S),
    }
    tokens = {TOKEN: "*", ACME: "acme", GLOBEX: "globex"}
    with served_with_tenants(tokens, tmp_path_factory.mktemp("tokens"), 9, env) as srv:
        yield srv


def _address(server: Server) -> tuple[str, int]:
    host, port = server.base.removeprefix("http://").split(":")
    return host, int(port)


def _open(server: Server, first_bytes: bytes) -> socket.socket:
    s = socket.create_connection(_address(server), timeout=5)
    if first_bytes:
        s.sendall(first_bytes)
    return s


def _answers_fast(server: Server, token: str = GLOBEX) -> float:
    """One authorized check on a new connection; its latency in seconds."""
    started = time.monotonic()
    r = httpx.post(
        server.base + CHECK,
        json={"session_id": f"s-{uuid.uuid4().hex[:8]}", "event": call(1)},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    return time.monotonic() - started


def _closed_within(s: socket.socket, seconds: float) -> bytes | None:
    """What the server sent before closing the connection, or None if it still holds it."""
    s.settimeout(seconds)
    got = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return got
            got += chunk
    except TimeoutError:
        return None
    except ConnectionResetError:
        return got


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


HALF_HEAD = b"POST /v1/agent-breaker/check HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


@pytest.mark.parametrize("first", [b"", HALF_HEAD], ids=["silent", "half_sent_head"])
def test_connections_that_never_finish_a_head_do_not_lock_out_authorized_clients(server, first):
    attackers = [_open(server, first) for _ in range(5 * MAX_CONNECTIONS)]
    try:
        latencies = [_answers_fast(server) for _ in range(10)]
        assert max(latencies) < 1.0, latencies
        assert _open_fds(server.proc.pid) < MAX_CONNECTIONS + 128
    finally:
        for s in attackers:
            s.close()


def test_a_slow_head_is_closed_after_the_head_timeout(server):
    s = _open(server, HALF_HEAD)
    try:
        s.sendall(b"x")  # a byte now and then does not extend it
        assert _closed_within(s, HEAD_TIMEOUT_S + 2) is not None
    finally:
        s.close()


def test_an_idle_keep_alive_connection_is_closed(server):
    body = b'{"session_id": "s-idle", "event": {"tool_name": "search", "tool_args": {}}}'
    head = (
        f"POST {CHECK} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {GLOBEX}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    s = _open(server, head + body)
    try:
        answered = _closed_within(s, HEAD_TIMEOUT_S + 3)
        assert answered is not None and answered.startswith(b"HTTP/1.1 200"), answered
    finally:
        s.close()


def _stalled_body(server: Server, token: str, path: str = CHECK) -> socket.socket:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
    ).encode()
    return _open(server, head + b'{"session_id": "' + b"x" * 60_000)


@pytest.mark.parametrize("token", [None, "not-a-token-of-this-server-at-all"], ids=["no_token", "wrong_token"])
def test_a_body_refused_before_it_is_read_closes_its_connection_at_once(server, token):
    """A refusal answered before the body is read (401 here) closes the connection: kept open for
    the next request, the server would buffer whatever the client goes on sending until the
    head timeout, about a body's worth per connection."""
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    head = (
        f"POST {CHECK} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
    ).encode()
    refused = [_open(server, head + b"x" * 200_000) for _ in range(20)]
    try:
        answers = [_closed_within(s, HEAD_TIMEOUT_S / 2) for s in refused]  # long before the head timeout
        assert all(a is not None and a.startswith(b"HTTP/1.1 401") for a in answers), answers
    finally:
        for s in refused:
            s.close()


def test_stalled_bodies_hold_only_their_own_tokens_slots_and_time_out(server):
    stalled = [_stalled_body(server, ACME) for _ in range(3 * BODIES_PER_TOKEN)]
    try:
        # the other tenant is served at once
        assert max(_answers_fast(server, GLOBEX) for _ in range(5)) < 1.0
        # the stalling token's bodies past its slots are refused at once, the others time out
        answers = [_closed_within(s, BODY_TIMEOUT_S + 3) for s in stalled]
        statuses = sorted(a.split(b" ", 2)[1].decode() for a in answers if a)
        assert len(statuses) == len(stalled), answers
        # past the slots: 503 (busy, retry), never 429, which a gateway reads as a refused call
        assert statuses.count("408") == BODIES_PER_TOKEN and statuses.count("503") == len(stalled) - BODIES_PER_TOKEN
        # and once they are gone, the token is served again
        assert _answers_fast(server, ACME) < 1.0
    finally:
        for s in stalled:
            s.close()


def _metric(server: Server, name: str) -> float:
    r = httpx.get(server.base + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert r.status_code == 200, r.text
    values = [float(line.split()[-1]) for line in r.text.splitlines() if line.startswith(name + " ")]
    assert len(values) == 1, (name, values)
    return values[0]


def test_stalled_bodies_hold_no_gateway_place(server):
    """Bodies that never arrive, as many as the worker's gateway places, from two tokens: a
    place is taken once a body is read, so a third token's check is answered at once."""
    stalled = [_stalled_body(server, token) for token in (ACME, GLOBEX) for _ in range(BODIES_PER_TOKEN)]
    try:
        assert len(stalled) == MAX_IN_FLIGHT
        assert _answers_fast(server, TOKEN) < 1.0
        assert _metric(server, "agent_breaker_gateway_in_flight") == 0
        # the stalled bodies time out (408): each held a late slot of its own token's
        assert all(
            a is not None and a.startswith(b"HTTP/1.1 408") for a in (_closed_within(s, BODY_TIMEOUT_S + 3) for s in stalled)
        )
    finally:
        for s in stalled:
            s.close()


def test_gateway_requests_past_the_in_flight_limit_get_503_at_once_and_are_counted():
    from agent_breaker.metrics import REGISTRY
    from agent_breaker.server._gateway import Gateway

    gateway = Gateway(None, max_in_flight=16)  # type: ignore[arg-type]  # places only: no config decides here
    shed_before = REGISTRY.get_sample_value("agent_breaker_gateway_shed_total") or 0.0
    # one token alone takes all but the last sixteenth: a gateway's one token is not held to half
    assert all(gateway.admit("acme") is None for _ in range(15))
    refused = gateway.admit("acme")
    # busy, not a refusal of the call: 503 with Retry-After, answered without waiting for a place
    assert refused is not None and refused.status == 503 and refused.headers == {"Retry-After": "1"}
    assert "kept for other tokens" in refused.content["error"]["message"]
    # the reserve is another token's, which then fills the worker
    assert gateway.admit("globex") is None
    full = gateway.admit("initech")
    assert full is not None and full.status == 503 and "holds 16 gateway requests" in full.content["error"]["message"]
    assert REGISTRY.get_sample_value("agent_breaker_gateway_shed_total") == shed_before + 2
    gateway.release("globex", CHECK, time.perf_counter())
    # a place given back: a token under its share takes it; one past its share does not
    assert gateway.admit("acme") is not None and gateway.admit("initech") is None
    for _ in range(8):
        gateway.release("acme", CHECK, time.perf_counter())
    assert gateway.admit("globex") is None and gateway.admit("acme") is None  # 8 free: over the reserve


def test_one_tenants_store_calls_do_not_queue_another_tenants_behind_them():
    """On a remote store (Redis) each decision waits in a worker thread, and the threads take
    calls first come, first served: 100 of one tenant's checks, then one of another's. The other
    tenant's call runs after at most STORE_CALLS_PER_TENANT of the first's, not after all 100."""
    import asyncio
    import threading
    from types import SimpleNamespace

    from agent_breaker.dispatch import Caller
    from agent_breaker.server._gateway import STORE_CALLS_PER_TENANT, Gateway

    ran: list[str] = []
    store_answers = threading.Event()  # the store holds every call until the other tenant's is queued
    engine = SimpleNamespace(store=SimpleNamespace(remote=True))

    def decide(tenant: str) -> None:
        store_answers.wait(10)
        ran.append(tenant)

    async def scenario() -> None:
        gateway = Gateway(None, max_in_flight=256)  # type: ignore[arg-type]
        calls = [asyncio.create_task(gateway._store_call(Caller("acme"), engine, decide, "acme")) for _ in range(100)]
        await asyncio.sleep(0)  # each has queued or waits in its tenant's line
        calls.append(asyncio.create_task(gateway._store_call(Caller("globex"), engine, decide, "globex")))
        await asyncio.sleep(0)
        store_answers.set()
        await asyncio.gather(*calls)

    asyncio.run(scenario())
    assert len(ran) == 101
    assert ran.index("globex") <= STORE_CALLS_PER_TENANT, ran.index("globex")


@pytest.mark.parametrize("shape", ["many_headers", "one_long_header"])
def test_a_head_past_its_size_bound_is_refused_at_once_not_at_the_head_timeout(server, shape):
    """The parser keeps an unfinished head in memory: past MAX_HEAD_BYTES it is refused (431)
    and the connection closed, long before the head timeout would close it."""
    start = f"POST {CHECK} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
    if shape == "many_headers":
        flood = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"v" * 100) for i in range(MAX_HEAD_BYTES // 100 + 100))
    else:
        flood = b"X-Long: " + b"v" * (MAX_HEAD_BYTES + 10_000)
    started = time.monotonic()
    s = _open(server, start + flood)  # and no blank line: the head never ends
    try:
        answered = _closed_within(s, HEAD_TIMEOUT_S / 2)
    finally:
        s.close()
    assert answered is not None and answered.startswith(b"HTTP/1.1 431"), answered
    assert time.monotonic() - started < HEAD_TIMEOUT_S / 2
    assert _answers_fast(server) < 1.0


def test_a_large_head_within_the_bound_and_a_body_in_one_write_are_served(server):
    body = b'{"session_id": "s-big-head", "event": {"tool_name": "search", "tool_args": {}}}'
    head = (
        f"POST {CHECK} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {GLOBEX}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
        f"X-Pad: {'p' * (MAX_HEAD_BYTES // 2)}\r\n\r\n"
    ).encode()
    s = _open(server, head + body)
    try:
        answered = _closed_within(s, 5)
    finally:
        s.close()
    assert answered is not None and answered.startswith(b"HTTP/1.1 200"), answered[:200] if answered else answered


def test_the_connection_cap_follows_the_descriptor_limit():
    assert default_max_connections(1024) == 1024 - 128
    assert default_max_connections(100) == 1  # never zero, even under a tiny limit
    assert Transport.from_env({}, fd_limit=1_000_000).max_connections == 4096


@pytest.mark.parametrize("raw", ["0", "-1", "nan", "inf", "ten"])
def test_a_bad_transport_setting_is_refused_naming_it(raw):
    with pytest.raises(TransportError, match="AGENT_BREAKER_HEAD_TIMEOUT_S"):
        Transport.from_env({"AGENT_BREAKER_HEAD_TIMEOUT_S": raw})


def test_bodies_on_their_way_from_a_pooled_client_hold_no_slot(server):
    """A gateway's pooled httpx client, one token, 50 sessions at once: httpx writes a request's
    head and its body in two segments, so 50 bodies are on their way at once, against the
    token's 4 slots for late bodies. None is late: none is refused."""
    import asyncio

    async def session(client: httpx.AsyncClient, n: int) -> list[int]:
        codes = []
        for k in range(4):
            r = await client.post(CHECK, json={"session_id": f"s-pool-{n}", "event": call(k, args={"q": f"{n}-{k}"})})
            codes.append(r.status_code)
        return codes

    async def run() -> list[int]:
        limits = httpx.Limits(max_connections=50, max_keepalive_connections=50)
        headers = {"Authorization": f"Bearer {ACME}"}
        async with httpx.AsyncClient(base_url=server.base, headers=headers, limits=limits, timeout=30) as client:
            return [code for codes in await asyncio.gather(*(session(client, n) for n in range(50))) for code in codes]

    codes = asyncio.run(run())
    assert codes.count(200) == len(codes) == 200, sorted(set(codes))


def test_a_hook_the_server_is_too_busy_to_read_gets_its_fail_policy_not_an_error(server):
    """An agent runs a call whose HTTP hook answered an error: a hook body that comes too late
    (408), or past its token's late slots (503), is answered 200 by the hook's fail policy."""
    stalled = [_stalled_body(server, ACME, "/v1/hooks/claude-code?fail=closed") for _ in range(BODIES_PER_TOKEN + 2)]
    try:
        answers = [_closed_within(s, BODY_TIMEOUT_S + 3) for s in stalled]
        assert all(a is not None and a.startswith(b"HTTP/1.1 200") for a in answers), answers
        assert all(b'"decision":"block"' in a and b"could not check this call" in a for a in answers if a), answers
    finally:
        for s in stalled:
            s.close()


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def _unread_answers(server: Server, requests: int) -> socket.socket:
    """A connection that pipelines requests for large answers (/metrics) and reads none: once
    its socket buffers are full, the server's answer waits on the client."""
    s = socket.create_connection(_address(server), timeout=1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    request = f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
    s.sendall(request * requests)
    return s


def _keep_sending(s: socket.socket, chunk: bytes, seconds: float) -> int:
    """Bytes sent on `s` until the server closes it or `seconds` pass."""
    sent = 0
    s.settimeout(0.2)
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        try:
            sent += s.send(chunk)
        except TimeoutError:
            continue  # the buffers are full: the server reads no more
        except OSError:
            break  # closed
    return sent


def test_a_head_pipelined_behind_unread_answers_is_bounded_like_the_first(server):
    """The attack: answers left unread, and behind them a request head that never ends. The
    parser keeps an unfinished head in memory, pipelined or first: past MAX_HEAD_BYTES the
    connection is closed, and the server's memory does not follow what the client sends (the
    write deadline alone would let it read on at full speed until then)."""
    rss = _rss_bytes(server.proc.pid)
    s = _unread_answers(server, 400)
    try:
        s.sendall(f"POST {CHECK} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ".encode())
        sent = _keep_sending(s, b"v" * 65_536, 30)
    finally:
        s.close()
    # what the socket buffers take in before the server closes it: a few MiB
    assert sent < 16 * 2**20, sent
    assert _rss_bytes(server.proc.pid) - rss < 32 * 2**20
    assert _answers_fast(server) < 1.0


def test_a_client_that_reads_no_answers_loses_its_connection():
    """The transport alone, on a real socket: an answer larger than the socket buffers, to a
    client that reads nothing. The answer's next part waits on the client (uvicorn's send waits
    for the buffer to drain: a gateway request would hold its place) until the write deadline
    closes the connection; the request then ends."""
    import asyncio

    from uvicorn.config import Config
    from uvicorn.server import ServerState

    from agent_breaker.server._transport import guarded_protocol

    answer = b"x" * (16 * 2**20)  # past any socket buffer the kernel grows to (4 MiB here)
    deadline_s = 0.3

    async def scenario() -> tuple[float, int]:
        answered = asyncio.Event()

        async def app(scope: dict, receive: object, send: object) -> None:
            length = b"%d" % (2 * len(answer))
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", length)]})  # type: ignore[operator]
            await send({"type": "http.response.body", "body": answer, "more_body": True})  # type: ignore[operator]
            # the buffer is past its high-water mark: this send waits for the client
            await send({"type": "http.response.body", "body": answer})  # type: ignore[operator]
            answered.set()

        protocol = guarded_protocol(Transport(write_timeout_s=deadline_s))
        config = Config(app=app, lifespan="off", log_level="critical")
        config.load()
        state = ServerState()
        loop = asyncio.get_running_loop()
        listener = await loop.create_server(lambda: protocol(config=config, server_state=state, app_state={}), "127.0.0.1", 0)
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.setblocking(False)
        try:
            await loop.sock_connect(client, listener.sockets[0].getsockname())
            started = loop.time()
            await loop.sock_sendall(client, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            await asyncio.wait_for(answered.wait(), 10)  # never, without the deadline
            # the server let the connection go (its descriptor and buffer with it); the kernel
            # may still try to deliver what was written, which is no longer the server's
            return loop.time() - started, len(state.connections)
        finally:
            client.close()
            listener.close()

    waited, still_open = asyncio.run(scenario())
    assert waited >= deadline_s
    assert still_open == 0


def test_a_request_pipelined_behind_a_body_in_transit_is_answered_in_order(server):
    """Two checks on one connection, the second written behind the first before its own body
    is complete (as a pipelining client writes): both are answered, in order."""

    def check(session: str) -> tuple[bytes, bytes]:
        body = json.dumps({"session_id": session, "event": {"tool_name": "search", "tool_args": {}}}).encode()
        head = (
            f"POST {CHECK} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {GLOBEX}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        return head, body

    head1, body1 = check(f"s-pipe-{uuid.uuid4().hex[:8]}")
    head2, body2 = check(f"s-pipe-{uuid.uuid4().hex[:8]}")
    s = _open(server, head1 + body1 + head2 + body2[:10])
    try:
        s.settimeout(5)
        first = b""
        while b"}" not in first.partition(b"\r\n\r\n")[2]:
            chunk = s.recv(65536)
            assert chunk, f"closed before the first answer: {first!r}"
            first += chunk
        s.sendall(body2[10:])  # the second body completes after the first answer
        second = s.recv(65536)
    finally:
        s.close()
    assert first.startswith(b"HTTP/1.1 200"), first
    assert second.startswith(b"HTTP/1.1 200"), second


def _pipelined_checks(n: int, tag: str) -> bytes:
    out = []
    for k in range(n):
        body = json.dumps({"session_id": f"s-{tag}-{k}", "event": {"tool_name": "search", "tool_args": {"k": k}}}).encode()
        out.append(
            f"POST {CHECK} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {GLOBEX}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
    return b"".join(out)


def test_requests_pipelined_within_the_bound_are_each_answered_in_order(server):
    s = _open(server, _pipelined_checks(MAX_PIPELINED, uuid.uuid4().hex[:8]))
    try:
        got = b""
        s.settimeout(5)
        while got.count(b"HTTP/1.1 200") < MAX_PIPELINED:
            chunk = s.recv(65536)
            assert chunk, got
            got += chunk
    finally:
        s.close()
    assert got.count(b"HTTP/1.1 ") == MAX_PIPELINED


def test_a_connection_queueing_past_the_pipeline_bound_is_closed_and_memory_stays(server):
    """uvicorn parses every request of a read at once: thousands of checks pipelined in one
    write would each be queued, in memory, ahead of their answers. Past MAX_PIPELINED waiting,
    the connection goes; the server's memory does not follow."""
    rss = _rss_bytes(server.proc.pid)
    flood = _pipelined_checks(200, uuid.uuid4().hex[:8])
    s = _open(server, b"")
    try:
        sent = _keep_sending(s, flood, 10)
        answered = _closed_within(s, 5)
    finally:
        s.close()
    assert answered is not None, "the connection was never closed"
    assert answered.count(b"HTTP/1.1 ") <= MAX_PIPELINED + 1
    assert sent < 64 * 2**20, sent
    assert _rss_bytes(server.proc.pid) - rss < 32 * 2**20
    assert _answers_fast(server) < 1.0
