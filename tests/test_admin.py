"""Breaker admin (issue 11, item 5): listing breakers on both stores, the admin routes of the
real server (free loopback port, stopped by PID) on the in-memory and the Redis config, and
`agent-breaker breakers` against the server and straight against Redis."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import OUTAGE, REDIS_URL, redis_or_skip, run

from agent_breaker._admin import breaker_rows, format_breakers
from agent_breaker.breaker import BreakerStateName as S

httpx = pytest.importorskip("httpx")
pytest.importorskip("nemoguardrails")

from _server import TOKEN, Server, call, child_env, db_url, result, served_with_tenants, start  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BREAKERS = "/v1/agent-breaker/breakers"
CHECK = "/v1/agent-breaker/check"
CONFIGS = ["agent_breaker", "agent_breaker_redis"]
ADMIN = "breaker-admin-" + "e" * 24
ACME = "acme-token-" + "f" * 24
REDIS_DB = 11


def tool_name() -> str:
    return f"flaky_{uuid.uuid4().hex[:8]}"


# ----------------------------------------------------------------------------- listing, both stores


def test_a_breaker_opened_by_failures_is_listed_with_its_counters(make_engine, clock):
    engine = make_engine()
    assert engine.operator.breakers() == []
    run(engine, clock, "search_docs", {"q": 1}, True, {"hits": []})
    for i in range(5):  # two sessions failing: an outage (one alone opens only its own breaker)
        run(engine, clock, "warehouse", {"n": i}, False, None, error=OUTAGE, session=f"s{i % 2}")
    listed = {tool: (tenant, st) for tenant, tool, st in engine.operator.breakers()}
    assert sorted(listed) == ["search_docs", "warehouse"]
    tenant, st = listed["warehouse"]
    assert (tenant, st.state, st.consecutive_failures) == (None, S.OPEN, 5)
    row = next(r for r in breaker_rows(engine) if r["tool"] == "warehouse")
    assert row == {
        "tool": "warehouse",
        "tenant": None,
        "state": "open",
        "failures": 5,
        "consecutive_failures": 5,
        "open_until": pytest.approx(clock.now() + 30.0, abs=0.01),
        "changed_at": pytest.approx(clock.now(), abs=0.01),
    }
    assert next(r for r in breaker_rows(engine) if r["tool"] == "search_docs")["changed_at"] is None  # never moved


def test_tenant_and_tool_names_survive_the_key_escaping(make_engine):
    engine = make_engine()
    names = [(None, "zähler_ss"), ("50%", "{x}"), ("a:b", "run:sql"), ("acme", "a/b")]  # as listed: sorted, normalized
    for tenant, tool in names:
        engine.operator.force_breaker(tool, "forced_open", tenant=tenant)
    assert [(t, tool) for t, tool, _ in engine.operator.breakers()] == names
    assert {st.state for _, _, st in engine.operator.breakers()} == {S.FORCED_OPEN}
    assert [r["tool"] for r in breaker_rows(engine, "acme")] == ["a/b"]


def test_a_breaker_every_tenant_shares_is_listed_without_a_tenant(make_engine):
    engine = make_engine({"breaker": {"key_by_tenant": False}})
    engine.operator.force_breaker("run_sql", "disabled", tenant="acme")
    assert [(t, tool, st.state) for t, tool, st in engine.operator.breakers()] == [(None, "run_sql", S.DISABLED)]


def test_the_listing_is_a_copy_that_changes_nothing(make_engine, clock):
    engine = make_engine()
    for i in range(5):
        run(engine, clock, "warehouse", {"n": i}, False, None, error=OUTAGE, session=f"s{i % 2}")
    [(_, _, st)] = engine.operator.breakers()
    st.state = S.CLOSED
    st.failures_in_window(clock.now() + 3600)  # evicts the copy's window
    assert engine.operator.breaker_state("warehouse") is S.OPEN
    assert engine.operator.breakers()[0][2].failures_in_window(clock.now()) == 5


def test_a_redis_store_lists_its_own_breakers_only(redis_store):
    from agent_breaker.config import BreakerConfig
    from agent_breaker.store.redis import RedisStore

    cfg = BreakerConfig()
    # a prefix with glob characters must not match another prefix's keys
    globby = RedisStore(REDIS_URL, prefix=redis_store.prefix + "?", listen=False)
    other = RedisStore(REDIS_URL, prefix=redis_store.prefix + "x", listen=False)
    try:
        globby.breaker_force("mine", cfg, 1.0, S.FORCED_OPEN)
        other.breaker_force("theirs", cfg, 1.0, S.FORCED_OPEN)
        redis_store.breaker_force("t", cfg, 1.0, S.DISABLED)
        # a write-back marker shares the breaker key's start: it is no breaker
        redis_store.redis.set(redis_store.breaker_key("t") + ":merged:0123", "1")
        assert [(k, st.state) for k, st in globby.breaker_list()] == [("mine", S.FORCED_OPEN)]
        assert [(k, st.state) for k, st in redis_store.breaker_list()] == [("t", S.DISABLED)]
        for i in range(1200):  # more than one SCAN step and one pipeline
            other.breaker_force(f"bulk-{i}", cfg, 1.0, S.DISABLED)
        assert len(other.breaker_list()) == 1201
    finally:
        for store in (globby, other):
            store.delete_all()
            store.close()


def test_a_worker_cut_off_from_redis_lists_what_it_holds():
    redis_or_skip()
    from agent_breaker import Engine, FakeClock, ReceiptKeys
    from agent_breaker.store.redis import RedisStore

    # a port nothing listens on: every command fails at once
    store = RedisStore("redis://127.0.0.1:1/0", prefix="abdown", listen=False, timeout_s=0.05, retry_s=0.0)
    engine = Engine(store=store, clock=FakeClock(), listeners=[], receipt_keys=ReceiptKeys.ephemeral())
    engine.operator.force_breaker("t", "forced_open")
    assert [(t, tool, st.state) for t, tool, st in engine.operator.breakers()] == [(None, "t", S.FORCED_OPEN)]
    store.close()


def test_the_table_shows_times_in_utc():
    rows = [
        {
            "tool": "warehouse",
            "tenant": None,
            "state": "open",
            "failures": 5,
            "consecutive_failures": 5,
            "open_until": 86400.0,
            "changed_at": 86370.0,
        }
    ]
    line = format_breakers(rows).splitlines()[2]
    assert line.split() == ["warehouse", "-", "open", "5", "5", "1970-01-02T00:00:00Z", "1970-01-01T23:59:30Z"]


# ----------------------------------------------------------------------------- the server's routes


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    """Every shipped config, API tokens for all tenants and for acme, and the admin token."""
    env = {"AGENT_BREAKER_ADMIN_TOKEN": ADMIN}
    with served_with_tenants({TOKEN: "*", ACME: "acme"}, tmp_path_factory.mktemp("tokens"), REDIS_DB, env) as srv:
        yield srv


@pytest.fixture(scope="module")
def lone() -> Iterator[Server]:
    """One config, no API token (loopback), the admin token."""
    srv = start({"AGENT_BREAKER_ADMIN_TOKEN": ADMIN}, args=("--config", str(ROOT / "config" / "agent_breaker")))
    try:
        yield srv
    finally:
        srv.stop()


def admin(token: str = ADMIN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def listed(server: Server, config_id: str | None, **params: str) -> httpx.Response:
    query = {**params, **({"config_id": config_id} if config_id else {})}
    return httpx.get(server.base + BREAKERS, params=query, headers=admin(), timeout=30)


def forced(server: Server, tool: str, state: Any, config_id: str | None, token: str = ADMIN, **params: str) -> httpx.Response:
    query = {**params, **({"config_id": config_id} if config_id else {})}
    return server.post(f"{BREAKERS}/{tool}", {"state": state}, headers=admin(token), params=query)


def check(server: Server, tool: str, config_id: str, token: str = TOKEN) -> httpx.Response:
    event = {k: v for k, v in call(1, tool).items() if k != "type"}
    body = {"config_id": config_id, "session_id": f"a-{uuid.uuid4().hex[:10]}", "event": event}
    return server.post(CHECK, body, headers={"Authorization": f"Bearer {token}"})


def fail_until_open(server: Server, tool: str, config_id: str) -> None:
    """Five calls through the gateway check, each failing with an outage (the breaker's threshold),
    from two sessions (one alone opens only its own breaker)."""
    sessions = [f"a-{uuid.uuid4().hex[:10]}" for _ in range(2)]
    for i in range(5):
        session = sessions[i % 2]
        r = server.post(CHECK, {"config_id": config_id, "session_id": session, "event": call(i, tool, {"n": i})})
        assert r.status_code == 200, r.text
        server.verdicts(session, result(i, tool, error=OUTAGE), config_id=config_id)


@pytest.mark.slow  # a subprocess or a server
def test_the_admin_routes_are_off_without_an_admin_token():
    srv = start(args=("--config", str(ROOT / "config" / "agent_breaker")))
    try:
        # an API token passes the request guard; no route answers it
        assert httpx.get(srv.base + BREAKERS, headers=srv.headers, timeout=30).status_code == 404
        assert srv.post(f"{BREAKERS}/run_sql", {"state": "forced_open"}).status_code == 404
    finally:
        srv.stop()


def test_the_admin_routes_take_the_admin_token_only(server):
    url = server.base + BREAKERS + "?config_id=agent_breaker"
    r = httpx.get(url, timeout=30)
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    for token in ("not-the-admin-token-at-all", TOKEN, ACME):  # a wrong one, the `*` API token, a tenant's
        assert httpx.get(url, headers=admin(token), timeout=30).status_code == 403
        assert forced(server, "run_sql", "closed", "agent_breaker", token=token).status_code == 403
    assert httpx.get(url, headers=admin(), timeout=30).status_code == 200
    # and the admin token is no API token
    assert check(server, "run_sql", "agent_breaker", token=ADMIN).status_code == 401


def test_the_admin_token_is_long_and_its_own():
    from agent_breaker.server import ServeError, Tokens, admin_token

    env = "AGENT_BREAKER_ADMIN_TOKEN"
    assert admin_token(Tokens({TOKEN: "*"}), {}) is None  # unset: the routes are off
    with pytest.raises(ServeError, match="at least 16 characters"):
        admin_token(None, {env: "short"})
    with pytest.raises(ServeError, match="also an API token"):
        admin_token(Tokens({ADMIN: "acme"}), {env: ADMIN})
    assert admin_token(Tokens({TOKEN: "*"}), {env: ADMIN}).tenant_of(ADMIN) is not None


def test_an_admin_route_reached_past_the_guards_path_check_still_refuses():
    from fastapi import FastAPI

    from agent_breaker.server import Limits, RequestGuard, Tokens, install_admin_endpoints

    app = FastAPI()
    install_admin_endpoints(app, configs=None)  # never reached: the endpoint refuses first
    guard = RequestGuard(app, tokens=Tokens({TOKEN: "*"}), hosts=None, limits=Limits(), admin=Tokens({ADMIN: "*"}))

    # the router strips a root path the guard's check does not know: only the API token is checked
    async def get() -> httpx.Response:
        transport = httpx.ASGITransport(app=guard, root_path="/base")
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await client.get("/base" + BREAKERS, headers=admin(TOKEN))

    r = asyncio.run(get())
    assert r.status_code == 403 and "admin token" in r.text


@pytest.mark.parametrize("config_id", CONFIGS)
def test_the_listing_shows_a_breaker_opened_by_failing_calls(server, config_id):
    tool = tool_name()
    fail_until_open(server, tool, config_id)
    r = listed(server, config_id)
    assert r.status_code == 200, r.text
    assert r.json()["config_id"] == config_id
    [row] = [b for b in r.json()["breakers"] if b["tool"] == tool]
    assert (row["tenant"], row["state"], row["failures"], row["consecutive_failures"]) == (None, "open", 5, 5)
    assert row["open_until"] == pytest.approx(row["changed_at"] + 30.0, abs=0.01)


@pytest.mark.parametrize("config_id", CONFIGS)
def test_forced_open_refuses_the_tool_and_closed_lets_it_run_again(server, config_id):
    tool = tool_name()
    assert check(server, tool, config_id).status_code == 200
    r = forced(server, tool, "forced_open", config_id)
    assert r.status_code == 200, r.text
    assert r.json() == {"config_id": config_id, "tool": tool, "tenant": None, "state": "forced_open"}
    assert forced(server, tool, "forced_open", config_id).status_code == 200  # repeating it moves nothing
    refused = check(server, tool, config_id)
    assert (refused.status_code, refused.headers["x-agent-breaker-heuristic"]) == (429, "circuit_open")
    assert forced(server, tool, "closed", config_id).json()["state"] == "closed"
    assert check(server, tool, config_id).status_code == 200


def test_a_tenant_breaker_is_forced_for_that_tenant_only(server):
    tool = tool_name()
    r = forced(server, tool, "forced_open", "agent_breaker", tenant="acme")
    assert r.status_code == 200 and r.json()["tenant"] == "acme", r.text
    assert check(server, tool, "agent_breaker", token=ACME).status_code == 429
    assert check(server, tool, "agent_breaker").status_code == 200  # calls without a tenant
    rows = listed(server, "agent_breaker", tenant="acme").json()["breakers"]
    assert {(b["tool"], b["tenant"], b["state"]) for b in rows} == {(tool, "acme", "forced_open")}


def test_bad_admin_input_gets_a_4xx_that_says_why_and_changes_nothing(server):
    r = forced(server, "run_sql", "open", "agent_breaker")
    assert r.status_code == 422 and "['closed', 'disabled', 'forced_open', 'metrics_only']" in r.text
    r = listed(server, "nope")
    assert r.status_code == 404 and "agent_breaker_redis" in r.text
    r = listed(server, None)  # this server serves several configs
    assert r.status_code == 422 and "config_id is required" in r.text
    for tool in ("x" * 300, "a%01b", "a%0Ab", "a%0D%0Ab", "%E2%80%8B", "", "%20"):
        r = forced(server, tool, "forced_open", "agent_breaker")
        assert r.status_code == 422 and "tool" in r.json()["error"]["message"], (tool, r.text)
    assert listed(server, "agent_breaker", tenant="a\x01b").status_code == 422
    assert forced(server, "t", ["forced_open"], "agent_breaker").status_code == 422
    r = server.post(f"{BREAKERS}/t", {"state": "closed", "x": 1}, headers=admin(), params={"config_id": "agent_breaker"})
    assert r.status_code == 422
    r = server.post_raw(f"{BREAKERS}/t?config_id=agent_breaker", b"", Authorization=f"Bearer {ADMIN}")
    assert r.status_code == 422
    rows = listed(server, "agent_breaker").json()["breakers"]
    assert not [b for b in rows if b["tool"] in ("run_sql", "t", "x" * 300)]


@pytest.mark.slow  # a subprocess or a server
def test_one_served_config_needs_no_config_id(lone):
    tool = tool_name()
    assert forced(lone, tool, "metrics_only", None).json() == {
        "config_id": "agent_breaker",
        "tool": tool,
        "tenant": None,
        "state": "metrics_only",
    }
    assert [b["state"] for b in listed(lone, None).json()["breakers"] if b["tool"] == tool] == ["metrics_only"]


# ----------------------------------------------------------------------------- the CLI


def cli(*args: str, token: str | None = ADMIN, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    extra = {**({"AGENT_BREAKER_ADMIN_TOKEN": token} if token else {}), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "agent_breaker.cli", "breakers", *args],
        env=child_env(extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


def json_rows(proc: subprocess.CompletedProcess) -> list[dict]:
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_the_cli_lists_and_forces_through_the_server(server):
    tool = tool_name()
    where = ("--url", server.base, "--config-id", "agent_breaker")
    proc = cli("force", tool, "forced_open", *where)
    assert (proc.returncode, proc.stdout.strip()) == (0, f"{tool}: forced_open"), proc.stderr
    assert check(server, tool, "agent_breaker").status_code == 429
    [row] = [r for r in json_rows(cli("list", "--json", *where)) if r["tool"] == tool]
    assert (row["state"], row["tenant"], row["open_until"]) == ("forced_open", None, None)
    table = cli("list", *where)
    assert table.returncode == 0 and any(line.split()[:3] == [tool, "-", "forced_open"] for line in table.stdout.splitlines())
    assert cli("force", tool, "closed", *where).returncode == 0
    assert check(server, tool, "agent_breaker").status_code == 200


def test_the_cli_says_what_went_wrong_and_exits_2(server):
    where = ("--url", server.base, "--config-id", "agent_breaker")
    cases = [
        (cli("list", "--url", "http://127.0.0.1:1"), "cannot reach the server"),
        (cli("list", *where, token=None), "AGENT_BREAKER_ADMIN_TOKEN"),
        (cli("list", *where, token="not-the-admin-token-at-all"), "answered 403"),
        (cli("list", *where, token=TOKEN), "answered 403"),
        (cli("list", "--url", server.base), "config_id is required"),
        (cli("force", "run_sql", "open", *where), "invalid choice"),
        (cli("force", "a\x01b", "closed", *where), "answered 422"),
        (cli("list", "--url", server.base, "--redis", db_url(REDIS_DB)), "not both"),
        (cli("list", "--redis", "redis://127.0.0.1:1/0"), "Redis at redis://127.0.0.1:1/0"),
        (cli("list", "--config", str(ROOT / "config" / "agent_breaker" / "config.yml")), "keeps its state in memory"),
    ]
    for proc, says in cases:
        assert proc.returncode == 2 and says in proc.stderr, (says, proc.stdout, proc.stderr)


def test_the_cli_on_redis_and_the_server_see_each_others_forced_states(server):
    redis_or_skip()
    tool = tool_name()
    fleet = ("--redis", db_url(REDIS_DB))
    assert cli("force", tool, "forced_open", *fleet, token=None).returncode == 0
    # the server's worker reads the breaker another process forced
    assert check(server, tool, "agent_breaker_redis").status_code == 429
    assert check(server, tool, "agent_breaker").status_code == 200  # the memory config has its own
    assert forced(server, tool, "disabled", "agent_breaker_redis").status_code == 200
    rows = json_rows(cli("list", "--json", *fleet, token=None))
    assert [r["state"] for r in rows if r["tool"] == tool] == ["disabled"]
    # --config takes the fleet's storage from the Redis config (its URL from $REDIS_URL)
    config = str(ROOT / "config" / "agent_breaker_redis" / "config.yml")
    proc = cli("force", tool, "closed", "--config", config, token=None, env={"REDIS_URL": db_url(REDIS_DB)})
    assert proc.returncode == 0, proc.stderr
    assert [b["state"] for b in listed(server, "agent_breaker_redis").json()["breakers"] if b["tool"] == tool] == ["closed"]
    assert check(server, tool, "agent_breaker_redis").status_code == 200


def test_behind_a_root_path_the_admin_routes_are_still_admin_routes():
    from agent_breaker.server import _is_admin_path, _route_path

    mounted = {"path": "/guard/v1/agent-breaker/breakers/run_sql", "root_path": "/guard"}
    assert _is_admin_path(_route_path(mounted))
    assert _route_path({"path": "/v1/agent-breaker/breakers"}) == "/v1/agent-breaker/breakers"
