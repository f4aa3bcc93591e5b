"""The red team's attacks on `agent-breaker serve`, replayed against the real server (a free
loopback port, stopped by PID), on the in-memory config and on the Redis config. Each attack
used to work; each must now fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("nemoguardrails")

from _server import TOKEN, Server, call, child_env, free_port, result, served_with_tenants, start  # noqa: E402
from conftest import OUTAGE  # noqa: E402

ACME = "acme-token-" + "b" * 24
GLOBEX = "globex-token-" + "c" * 24
CONFIGS = ["agent_breaker", "agent_breaker_redis"]
SCOPED = "scoped-token-" + "d" * 24
SCRAPER = "scraper-token-" + "e" * 24
SCOPE = {"tenant": "acme", "configs": ["agent_breaker_redis"], "agents": ["planner"], "features": ["billing"]}


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    tokens = {TOKEN: "*", ACME: "acme", GLOBEX: "globex", SCOPED: SCOPE}
    env = {"AGENT_BREAKER_METRICS_TOKEN": SCRAPER}
    with served_with_tenants(tokens, tmp_path_factory.mktemp("tokens"), 13, env) as srv:
        yield srv


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


def as_tenant(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def chat(
    server: Server,
    events: list[dict],
    *,
    model: str = "any",
    headers: dict[str, str] | None = None,
    config_id: str = "agent_breaker",
) -> list[dict]:
    body = {
        "model": model,
        "guardrails": {"config_id": config_id},
        "messages": [{"role": "context", "content": {"agent_breaker_events": events}}],
    }
    r = server.post("/v1/chat/completions", body, headers=headers)
    assert r.status_code == 200, r.text
    return json.loads(r.json()["choices"][0]["message"]["content"])["events"]


# ----------------------------------------------------------------------------- authentication


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/agent-breaker/configs"),
        ("POST", "/v1/agent-breaker/events"),
        ("POST", "/v1/chat/completions"),
        ("GET", "/docs"),
        ("GET", "/openapi.json"),
        ("GET", "/"),
    ],
)
def test_every_route_needs_the_bearer_token(server, method, path):
    for headers in ({}, {"Authorization": "Bearer wrong-token-000000000000"}, {"Authorization": TOKEN}):
        r = httpx.request(method, server.base + path, headers=headers, json={} if method == "POST" else None, timeout=10)
        assert r.status_code == 401, (headers, r.status_code)
        assert r.headers["www-authenticate"].startswith("Bearer")
    assert httpx.get(server.base + "/v1/agent-breaker/configs", headers=server.headers, timeout=10).status_code == 200


def test_a_foreign_host_header_is_refused(server):
    r = httpx.get(server.base + "/v1/agent-breaker/configs", headers={**server.headers, "Host": "evil.example:8000"}, timeout=10)
    assert r.status_code == 400


@pytest.mark.parametrize(
    "extra",
    [b"Host: evil.example\r\n", b"Host: 127.0.0.1\r\n", b"Authorization: Bearer wrong-token-000000000000\r\n"],
    ids=["a foreign host", "the same host", "another token"],
)
def test_a_header_that_counts_once_sent_twice_is_refused(server, extra):
    """Which of two Host (or Authorization) headers counts depends on who reads them: a proxy in
    front may check one, and the server read the other."""
    import socket
    from urllib.parse import urlsplit

    address = urlsplit(server.base)
    auth = server.headers["Authorization"]
    head = f"GET /v1/agent-breaker/configs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {auth}\r\n".encode()
    with socket.create_connection((address.hostname, address.port), timeout=10) as s:
        s.sendall(head + extra + b"Connection: close\r\n\r\n")
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"may be sent once" in answer


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/models"),
        ("GET", "/v1/challenges"),
        ("POST", "/v1/checks"),
        ("GET", "/v1/rails/configs"),
        ("GET", "/docs"),
        ("GET", "/openapi.json"),
        ("GET", "/"),
    ],
)
def test_nemo_routes_the_guard_does_not_serve_are_not_mounted(server, method, path):
    r = httpx.request(method, server.base + path, headers=server.headers, json={} if method == "POST" else None, timeout=10)
    assert r.status_code in (404, 405), (path, r.status_code)


def test_the_callers_token_reaches_no_route(tmp_path):
    """What the app behind the request guard sees of a request: never its Authorization."""
    import asyncio

    from agent_breaker.server import Limits, RequestGuard, Tokens

    seen = []

    async def app(scope, receive, send):
        seen.append(dict(scope["headers"]))

    guard = RequestGuard(app, tokens=Tokens({ACME: "acme"}), hosts=None, limits=Limits())

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        pass

    headers = [(b"authorization", f"Bearer {ACME}".encode()), (b"x-other", b"1")]
    asyncio.run(guard({"type": "http", "method": "GET", "path": "/v1/agent-breaker/configs", "headers": headers}, receive, send))
    assert seen == [{b"x-other": b"1"}]


@pytest.mark.parametrize("config_id", CONFIGS)
def test_a_tenant_token_cannot_halt_another_tenants_session(server, config_id):
    session = sid()
    # globex burns 10^12 tokens in "its" session S: its own session is halted ...
    [turn] = server.verdicts(
        session, {"type": "AssistantTurn", "text": "hi", "input_tokens": 10**12}, config_id=config_id, headers=as_tenant(GLOBEX)
    )
    assert turn["allowed"] is False and turn["heuristic"] == "token_budget"
    # ... and acme's session of the same id is untouched
    [verdict] = server.verdicts(session, call(1, "search"), config_id=config_id, headers=as_tenant(ACME))
    assert verdict["allowed"] is True, verdict


def test_a_tenant_token_cannot_name_another_tenant(server):
    r = server.events(sid(), {**call(1), "tenant": "acme"}, headers=as_tenant(GLOBEX))
    assert r.status_code == 403
    [verdict] = chat(server, [{**call(1), "session_id": sid(), "tenant": "acme"}], headers=as_tenant(GLOBEX))
    assert verdict["allowed"] is False and verdict["heuristic"] == "invalid_event"


# ----------------------------------------------------------------------------- the clock


@pytest.mark.parametrize("config_id", CONFIGS)
def test_an_event_stamped_far_in_the_future_frees_no_halted_session(server, config_id):
    victim, attacker = sid(), sid()
    for i in range(3):
        server.verdicts(victim, call(i), result(i), config_id=config_id)
    # identical_failure warns first: the warned repeat runs (and fails), the next one is cut
    [warned, _] = server.verdicts(victim, call(3), result(3), config_id=config_id)
    assert warned["allowed"] is True and warned["severity"] == "warn" and warned["heuristic"] == "identical_failure"
    [blocked] = server.verdicts(victim, call(4), config_id=config_id)
    assert blocked["allowed"] is False and blocked["heuristic"] == "identical_failure"
    server.verdicts(attacker, {**call(1, "search"), "ts": 1e12}, config_id=config_id)
    [still] = server.verdicts(victim, call(5), config_id=config_id)
    assert still["allowed"] is False, still


@pytest.mark.parametrize("config_id", CONFIGS)
def test_failures_stamped_far_ahead_cannot_hold_a_breaker_open_for_ages(server, config_id):
    tool = f"flaky_{uuid.uuid4().hex[:6]}"
    for i in range(5):  # five real failures in a row: the breaker opens, on the server's clock
        s = sid()
        server.verdicts(
            s, {**call(i, tool, {"n": i}), "ts": 1e11}, {**result(i, tool, error=OUTAGE), "ts": 1e11}, config_id=config_id
        )
    [refused] = server.verdicts(sid(), {**call(9, tool), "ts": 1e11}, config_id=config_id)
    assert refused["heuristic"] == "circuit_open"
    assert 0 < refused["observation"]["retry_after_s"] <= 30


@pytest.mark.parametrize("config_id", CONFIGS)
def test_a_probe_stamped_in_the_future_cannot_close_an_open_breaker(server, config_id):
    tool = f"flaky_{uuid.uuid4().hex[:6]}"
    for i in range(5):
        server.verdicts(sid(), call(i, tool, {"n": i}), result(i, tool, error=OUTAGE), config_id=config_id)
    future = time.time() + 40
    for i in range(2):
        [v] = server.verdicts(sid(), {**call(10 + i, tool), "ts": future}, config_id=config_id)
        assert v["allowed"] is False and v["heuristic"] == "circuit_open", v


# ----------------------------------------------------------------------------- results pair with calls


@pytest.mark.parametrize("config_id", CONFIGS)
def test_fabricated_failures_of_calls_never_made_open_no_breaker(server, config_id):
    tool = f"victim_{uuid.uuid4().hex[:6]}"
    for i in range(8):
        [v] = server.verdicts(sid(), result(i, tool), config_id=config_id)
        assert v["accepted"] is False and v["heuristic"] == "invalid_event"
    [allowed] = server.verdicts(sid(), call(1, tool), config_id=config_id)
    assert allowed["allowed"] is True


@pytest.mark.parametrize("config_id", CONFIGS)
def test_a_made_up_result_mints_no_receipt_and_the_false_answer_is_refused(server, config_id):
    s = sid()
    [v] = server.verdicts(
        s, result("never", "wire_transfer", ok=True, payload={"status": "done", "ref": "TX-99482"}), config_id=config_id
    )
    assert v["accepted"] is False and v["receipt"] is None and v["heuristic"] == "invalid_event"
    [answer] = server.verdicts(
        s, {"type": "FinalAnswerProposed", "text": "The transfer is done, reference TX-99482."}, config_id=config_id
    )
    assert answer["accepted"] is False and answer["heuristic"] == "unverified_claim"


# ----------------------------------------------------------------------------- bad input fails closed


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize("path", ["/v1/agent-breaker/events", "/v1/chat/completions"])
def test_deeply_nested_input_gets_a_400_not_a_verdictless_200(server, path):
    for levels in (100, 900, 100_000):
        args = '{"q": ' + _deep(levels) + "}"
        if path.endswith("events"):
            body = (
                '{"session_id": "deep", "events": [{"type": "ToolCallRequested", "call_id": "c1", "tool_name": "t", "tool_args": '
                + args
                + "}]}"
            )
        else:
            body = (
                '{"model": "m", "guardrails": {"config_id": "agent_breaker"}, "messages": [{"role": "context", "content": '
                '{"agent_breaker_events": [{"type": "ToolCallRequested", "session_id": "deep", "tool_name": "t", "tool_args": '
                + args
                + "}]}}]}"
            )
        r = server.post_raw(path, body)
        assert r.status_code == 400, (levels, r.status_code, r.text[:200])
        assert "nested deeper" in r.text


def test_brackets_inside_strings_neither_hide_nor_fake_depth(server):
    hide = (
        '{"session_id": "d", "events": [{"type": "ToolCallRequested", "call_id": "c1", "tool_name": "t", "tool_args": {"a": "'
        + "]" * 500
        + '", "b": '
        + _deep(200)
        + "}}]}"
    )
    r = server.post_raw("/v1/agent-breaker/events", hide)
    assert r.status_code == 400 and "nested deeper" in r.text
    fake = {"session_id": sid(), "events": [call(1, "search", {"q": "[" * 500 + '\\"[[['})]}
    assert server.events(fake["session_id"], *fake["events"]).status_code == 200


def test_an_oversized_request_is_refused_before_it_is_read(server):
    big = json.dumps({"session_id": "big", "events": [call(1, args={"blob": "x" * 10_000_000})]})
    t0 = time.monotonic()
    r = server.post_raw("/v1/agent-breaker/events", big)
    assert r.status_code == 413
    # the same body without a Content-Length (chunked) is cut off once it passes the limit
    chunks = (big[i : i + 65536].encode() for i in range(0, len(big), 65536))
    r = server.post_raw("/v1/agent-breaker/events", chunks)
    assert r.status_code == 413
    assert time.monotonic() - t0 < 20


def test_an_event_over_its_own_limit_is_refused(server):
    r = server.events(sid(), call(1, args={"blob": "y" * 300_000}))
    assert r.status_code == 413 and "events[0]" in r.text


def test_the_events_per_request_are_capped_on_every_path(server):
    many = [{**call(i, "search", {"i": i}), "session_id": "many"} for i in range(5000)]
    r = server.post(
        "/v1/chat/completions",
        {
            "model": "m",
            "guardrails": {"config_id": "agent_breaker"},
            "messages": [{"role": "context", "content": {"agent_breaker_events": many}}],
        },
    )
    assert r.status_code == 413
    r = server.events("many", *[call(i, "search", {"i": i}) for i in range(101)])
    assert r.status_code == 413


def test_lone_surrogates_are_refused_before_any_state_changes(server):
    s = sid()
    body = (
        '{"session_id": "'
        + s
        + '", "events": [{"type": "ToolCallRequested", "call_id": "c1", "tool_name": "t", "tool_args": {"q": "\\ud800"}}]}'
    )
    r = server.post_raw("/v1/agent-breaker/events", body)
    assert r.status_code == 400 and "surrogate" in r.text
    body = '{"session_id": "' + s + '\\udc00", "events": [{"type": "ToolCallRequested", "call_id": "c1", "tool_name": "t"}]}'
    r = server.post_raw("/v1/agent-breaker/events", body)
    assert r.status_code == 400


@pytest.mark.parametrize("config_id", ["", "nope", "../agent_breaker"])
def test_an_unknown_config_id_gets_a_4xx_naming_the_served_ones_and_no_path(server, config_id):
    r = server.events(sid(), call(1), config_id=config_id)
    assert 400 <= r.status_code < 500, r.text
    assert "agent_breaker" in r.text and "/" not in r.json()["error"]["message"].replace("agent_breaker", "")
    r = server.post(
        "/v1/chat/completions",
        {"model": "m", "guardrails": {"config_id": config_id}, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert 400 <= r.status_code < 500, r.text
    assert str(Path.cwd()) not in r.text and "site-packages" not in r.text


def test_events_to_the_colang_1_config_get_a_4xx(server):
    r = server.events(sid(), call(1), config_id="agent_breaker_v1")
    assert r.status_code == 400 and "Colang 1.0" in r.text


# ----------------------------------------------------------------------------- one engine per config


def test_one_engine_serves_a_config_whatever_the_model_string(server):
    tool = f"flaky_{uuid.uuid4().hex[:6]}"
    for i in range(5):
        server.verdicts(sid(), call(i, tool, {"n": i}), result(i, tool, error=OUTAGE))
    for model in ("gpt-4o", "another-model", ""):
        [v] = chat(server, [{**call(1, tool), "session_id": sid()}], model=model)
        assert v["allowed"] is False and v["heuristic"] == "circuit_open", (model, v)


def test_new_model_strings_cost_no_thread_and_no_engine(server):
    def threads() -> int:
        status = Path(f"/proc/{server.proc.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))

    chat(server, [{**call(1, "search"), "session_id": sid()}], model="warm-up")
    before = threads()
    for i in range(40):
        chat(server, [{**call(1, "search", {"i": i}), "session_id": sid()}], model=f"model-{uuid.uuid4().hex}")
    assert threads() <= before + 1


# ----------------------------------------------------------------------------- start-up and the context path


def test_a_non_loopback_bind_without_a_token_refuses_to_start():
    proc = subprocess.run(
        [sys.executable, "-m", "agent_breaker.cli", "serve", "--host", "0.0.0.0", "--port", str(free_port())],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "AGENT_BREAKER_API_TOKEN" in proc.stderr


def test_serve_without_a_receipt_key_exits_naming_the_variable():
    env = {k: v for k, v in child_env().items() if k != "AGENT_BREAKER_RECEIPT_KEYS"}
    proc = subprocess.run(
        [sys.executable, "-m", "agent_breaker.cli", "serve", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "AGENT_BREAKER_RECEIPT_KEYS" in proc.stderr, proc.stderr[-2000:]


def test_without_a_token_the_server_generates_one_and_says_where_it_writes(tmp_path):
    # a working directory holding an actions.py that would leave a mark if it were imported
    mark = tmp_path / "imported"
    (tmp_path / "actions.py").write_text(f"open({str(mark)!r}, 'w').write('x')\n")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        srv = start({"AGENT_BREAKER_ESCALATIONS_DB": str(tmp_path / "queue.db")})
    finally:
        os.chdir(cwd)
    try:
        assert "bearer token required: it is in " in srv.log()
        assert f"escalations in {tmp_path / 'queue.db'}" in srv.log()
        # the agent's own HTTP tool, holding no token, cannot post into a session (a user turn
        # would reset its streaks)
        r = httpx.post(
            srv.base + "/v1/agent-breaker/events", json={"session_id": "s", "events": [{"type": "UserTurn", "text": "go on"}]}
        )
        assert r.status_code == 401
        assert srv.verdicts(sid(), call(1, "search"))[0]["allowed"] is True
        assert not mark.exists(), "serve imported code from its working directory"
    finally:
        srv.stop()


def test_every_context_message_of_a_request_reaches_the_guard(server):
    s = sid()
    body = {
        "model": "m",
        "guardrails": {"config_id": "agent_breaker"},
        "messages": [
            {"role": "context", "content": {"agent_breaker_events": [{**call(1, "search", {"q": 1}), "session_id": s}]}},
            {"role": "context", "content": {"agent_breaker_events": [{**call(2, "search", {"q": 2}), "session_id": s}]}},
        ],
    }
    r = server.post("/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    verdicts = json.loads(r.json()["choices"][0]["message"]["content"])["events"]
    assert [v["call_id"] for v in verdicts] == ["c1", "c2"]


# ----------------------------------------------------------------------------- a second reader's findings


def test_an_unterminated_string_costs_one_scan_not_one_per_quote(server):
    body = '"' + '\\"' * 32_000  # 64 KB: each quote used to start a scan to the end
    t0 = time.monotonic()
    r = server.post_raw("/v1/agent-breaker/events", body)
    assert r.status_code == 400
    assert time.monotonic() - t0 < 3


@pytest.mark.parametrize("config_id", CONFIGS)
def test_a_surrogate_in_raw_bytes_is_refused_with_the_whole_request(server, config_id):
    s = sid()
    good = json.dumps(call(1, "wire_transfer", {"to": "x", "amount": 1})).encode()
    bad = b'{"type": "ToolCallRequested", "call_id": "c\xed\xa0\x80", "tool_name": "t", "tool_args": {}}'
    body = (
        b'{"config_id": "'
        + config_id.encode()
        + b'", "session_id": "'
        + s.encode()
        + b'", "events": ['
        + good
        + b", "
        + bad
        + b"]}"
    )
    r = server.post_raw("/v1/agent-breaker/events", body)
    assert r.status_code == 400
    [v] = server.verdicts(s, result(1, "wire_transfer", ok=True, payload={"ref": "TX-12345"}), config_id=config_id)
    assert v["accepted"] is False and v["receipt"] is None  # c1 was never recorded


def test_pages_of_other_sites_and_bodies_that_are_not_json_are_refused(server):
    body = json.dumps({"session_id": sid(), "events": [call(1, "search")]})
    path = "/v1/agent-breaker/events"
    assert server.post_raw(path, body, Origin="https://evil.example").status_code == 403
    assert server.post_raw(path, body, **{"Content-Type": "text/plain"}).status_code == 415
    r = server.post_raw(path, body, Origin="http://127.0.0.1:1234")
    assert r.status_code == 200


@pytest.mark.parametrize("config_id", CONFIGS)
def test_one_tenants_failures_do_not_open_a_tool_for_another(server, config_id):
    tool = f"payments_{uuid.uuid4().hex[:6]}"
    for i in range(6):
        server.verdicts(
            sid(), call(i, tool, {"n": i}), result(i, tool, error=OUTAGE), config_id=config_id, headers=as_tenant(ACME)
        )
    [refused] = server.verdicts(sid(), call(9, tool), config_id=config_id, headers=as_tenant(ACME))
    assert refused["heuristic"] == "circuit_open"
    [v] = server.verdicts(sid(), call(9, tool), config_id=config_id, headers=as_tenant(GLOBEX))
    assert v["allowed"] is True, v


@pytest.mark.parametrize("config_id", CONFIGS)
def test_one_sessions_failures_stop_that_session_and_open_the_tool_for_nobody_else(server, config_id):
    """However many outages one session reports (made up, or a host of its own choosing), its
    own breaker stops it and the tenant's shared one stays closed; a second session failing
    too is an outage, and opens the tool for everyone."""
    tool, alone, other = f"crm_{uuid.uuid4().hex[:6]}", sid(), sid()
    for i in range(12):
        verdicts = server.verdicts(alone, call(i, tool, {"n": i}), result(i, tool, error=OUTAGE), config_id=config_id)
        if verdicts[0]["allowed"] is False:
            break
    assert verdicts[0]["heuristic"] == "circuit_open", verdicts  # the failing session is stopped
    [v] = server.verdicts(other, call(50, tool, {"n": 50}), config_id=config_id)
    assert v["allowed"] is True, v  # everyone else still reaches the tool
    server.verdicts(other, result(50, tool, error=OUTAGE), config_id=config_id)
    [v] = server.verdicts(sid(), call(60, tool, {"n": 60}), config_id=config_id)
    assert (v["allowed"], v["heuristic"]) == (False, "circuit_open"), v  # two sessions failing: an outage


@pytest.mark.parametrize("config_id", CONFIGS)
def test_calls_that_fail_on_their_own_open_the_tool_for_nobody(server, config_id):
    """Bad calls (a missing table, a failing command) are the caller's, not an outage: however
    many a tenant makes, the tool stays closed, for it and for everyone else."""
    tool = f"run_sql_{uuid.uuid4().hex[:6]}"
    for i in range(12):
        _, r = server.verdicts(sid(), call(i, tool, {"n": i}), result(i, tool), config_id=config_id, headers=as_tenant(ACME))
        assert r["accepted"] is True, r
    for tenant in (ACME, GLOBEX):
        [v] = server.verdicts(sid(), call(99, tool), config_id=config_id, headers=as_tenant(tenant))
        assert v["allowed"] is True and v["heuristic"] is None, v


def test_ids_that_would_reach_colang_state_are_checked_first(server):
    for field, value in (("call_id", "c" * 240_000), ("tool_name", "t\x00"), ("tenant", ["x"])):
        r = server.events(sid(), {**call(1, "search"), field: value})
        assert r.status_code in (413, 422), (field, r.status_code)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (
            {
                "model": "m",
                "stream": True,
                "guardrails": {"config_id": "agent_breaker"},
                "messages": [{"role": "context", "content": {"agent_breaker_events": []}}],
            },
            "stream",
        ),
        (
            {"model": "m", "guardrails": {"config_id": "agent_breaker"}, "messages": [{"role": "assistant", "content": "hi"}]},
            "assistant",
        ),
        (
            {"model": "m", "guardrails": {"config_id": "agent_breaker_v1"}, "messages": [{"role": "user", "content": "hi"}]},
            "no model",
        ),
    ],
)
def test_chat_requests_these_configs_cannot_answer_get_a_400_not_a_500(server, body, fragment):
    r = server.post("/v1/chat/completions", body)
    assert r.status_code == 400 and fragment in r.text, r.text


def test_serve_on_one_config_folder_serves_its_events_endpoint():
    from agent_breaker.configs import config_path

    srv = start({"AGENT_BREAKER_API_TOKEN": TOKEN}, args=("--config", str(config_path("agent_breaker_observe"))), token=TOKEN)
    try:
        [v] = srv.verdicts(sid(), call(1, "search"), config_id="agent_breaker_observe")
        assert v["allowed"] is True
        r = srv.events(sid(), call(1), config_id="agent_breaker")
        assert r.status_code == 404 and "agent_breaker_observe" in r.text
    finally:
        srv.stop()


def test_a_token_file_others_may_read_or_another_users_is_refused(tmp_path):
    from agent_breaker.server import ServeError, generated_token

    path = tmp_path / "state" / "api-token"
    token = generated_token(path)
    assert len(token) >= 32 and (path.stat().st_mode & 0o777) == 0o600
    assert generated_token(path) == token  # kept across starts
    path.chmod(0o644)
    with pytest.raises(ServeError, match="only it may read"):
        generated_token(path)
    link = tmp_path / "link-token"
    link.symlink_to(path)
    with pytest.raises(ServeError, match="only it may read"):
        generated_token(link)


# ----------------------------------------------------------------------------- scoped tokens


def test_a_scoped_token_may_use_only_its_configs(server):
    ok = server.events(sid(), call(1, "search"), config_id="agent_breaker_redis", headers=as_tenant(SCOPED))
    assert ok.status_code == 200, ok.text
    for config_id in ("agent_breaker", "agent_breaker_observe"):
        r = server.events(sid(), call(1, "search"), config_id=config_id, headers=as_tenant(SCOPED))
        assert r.status_code == 403 and config_id in r.text
    body = {"model": "m", "guardrails": {"config_id": "agent_breaker_observe"}, "messages": [{"role": "user", "content": "hi"}]}
    assert server.post("/v1/chat/completions", body, headers=as_tenant(SCOPED)).status_code == 403


@pytest.mark.parametrize(("field", "value"), [("agent", "reviewer"), ("feature", "free-tier")])
def test_a_scoped_token_may_not_name_another_agent_or_feature(server, field, value):
    r = server.events(sid(), {**call(1, "search"), field: value}, config_id="agent_breaker_redis", headers=as_tenant(SCOPED))
    assert r.status_code == 403 and field in r.text
    ok = server.events(
        sid(), {**call(1, "search"), field: SCOPE[f"{field}s"][0]}, config_id="agent_breaker_redis", headers=as_tenant(SCOPED)
    )
    assert ok.status_code == 200 and ok.json()["events"][0]["allowed"] is True
    # the check endpoint and the chat path refuse it too (as an invalid event)
    check = server.post(
        "/v1/agent-breaker/check",
        {"config_id": "agent_breaker_redis", "session_id": sid(), "event": {**call(1, "search"), field: value}},
        headers=as_tenant(SCOPED),
    )
    assert check.status_code in (403, 422) and check.json().get("heuristic", "invalid_event") == "invalid_event"


def test_metrics_answer_the_scraper_and_all_tenant_tokens_not_a_tenants(server):
    for token in (ACME, SCOPED):
        r = httpx.get(server.base + "/metrics", headers=as_tenant(token), timeout=10)
        assert r.status_code == 403, token
    for token in (SCRAPER, TOKEN):
        assert httpx.get(server.base + "/metrics", headers=as_tenant(token), timeout=10).status_code == 200
    # the scraper's token sends no events
    assert server.events(sid(), call(1, "search"), headers=as_tenant(SCRAPER)).status_code == 403
