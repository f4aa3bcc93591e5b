"""Shared fixtures: a fake clock, an engine on it, and event builders."""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from _cluster import Cluster
from hypothesis import settings

os.environ.setdefault("NEMO_GUARDRAILS_NO_USAGE_STATS", "1")
# The caller's shell may hold anything the docs tell users to export (a receipt key, a token, a
# state file, a webhook): every test starts from none of it and sets what it needs itself. Only
# the suite's own knobs (AGENT_BREAKER_TEST_*) are read from it.
for _name in [n for n in os.environ if n.startswith("AGENT_BREAKER_") and not n.startswith("AGENT_BREAKER_TEST_")]:
    del os.environ[_name]
# shared (Redis) configs need one fingerprint secret per fleet; worker processes inherit it
os.environ["AGENT_BREAKER_FINGERPRINT_SECRET"] = "test-fingerprint-secret"
# escalations of the tests' engines go to a file of this run's own, never to the user's state folder
os.environ["AGENT_BREAKER_ESCALATIONS_DB"] = os.path.join(tempfile.mkdtemp(prefix="agent-breaker-tests-"), "escalations.db")
os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
os.environ.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)

from agent_breaker import Engine, FakeClock, ReceiptKeys  # noqa: E402
from agent_breaker.verdicts import BreakerIncident, Incident  # noqa: E402

# pytest rewrites each test module's asserts when it imports it, and keeps the result as
# bytecode; with PYTHONDONTWRITEBYTECODE set (as on our CI machines) it redid that, and compiled
# every module again, on each run: a fifth of the fast tier. Bytecode goes to __pycache__ (ignored).
sys.dont_write_bytecode = False

#: Hypothesis profiles, chosen by $HYPOTHESIS_PROFILE: `quick` (the default, for every change) runs
#: each property test's own example count (Hypothesis's 100 where it names none) under the 200 ms
#: deadline; `ci` runs EXAMPLES_SCALE["ci"] times as many, with no deadline (a loaded CI machine is
#: slow, not wrong). A test names its quick count through `examples(n)`, so both scale alike.
EXAMPLES_SCALE = {"quick": 1, "ci": 2}
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or "quick"
settings.register_profile("quick", max_examples=100)
settings.register_profile("ci", max_examples=100 * EXAMPLES_SCALE["ci"], deadline=None)
settings.load_profile(HYPOTHESIS_PROFILE)  # an unknown name fails here, naming the profiles


def examples(quick: int) -> int:
    """A property test's example count under the loaded profile: `quick` runs, scaled."""
    return quick * EXAMPLES_SCALE.get(HYPOTHESIS_PROFILE, 1)


#: a property test running more examples than this (quick profile) is in the slow tier
SLOW_EXAMPLES = 100

SESSION = "s1"
#: the Redis the contract suite runs on (.ci/run starts one on loopback if none answers)
REDIS_URL = os.environ.get("AGENT_BREAKER_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def redis_or_skip():
    """A real Redis, or skip (fail instead under CI, where .ci/run has started one)."""
    redis = pytest.importorskip("redis")
    try:
        redis.Redis.from_url(REDIS_URL, socket_timeout=1).ping()
    except redis.RedisError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"Redis at {REDIS_URL} does not answer under CI: {exc}")
        pytest.skip(f"no Redis at {REDIS_URL}: {exc}")


@pytest.fixture(params=["memory", "sqlite", "redis", "cluster"])
def store_kind(request) -> str:
    """The contract suite: every engine test runs on each storage backend (an embedded SQLite
    file; Redis: one server, and a 3-master Redis Cluster)."""
    return request.param


#: the slowest size tests: on memory in the fast tier, on one Redis server in the full suite (a
#: cluster runs the very same store code, and their cluster copies would add ~20 s)
size_test = pytest.mark.parametrize("store_kind", ["memory", pytest.param("redis", marks=pytest.mark.slow)])


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory) -> Iterator[Cluster]:
    """A 3-master Redis Cluster of the run's own (tests/_cluster.py), started on first use."""
    pytest.importorskip("redis")
    cluster = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def shared_store(store_kind, request):
    """None for the in-memory default; a RedisStore under its own key prefix, cleaned up after."""
    if store_kind == "memory":
        yield None
        return
    if store_kind == "sqlite":
        from agent_breaker.store.sqlite import SQLiteStore

        store = SQLiteStore(f"sqlite:///{request.getfixturevalue('tmp_path')}/state.db")
        yield store
        store.close()
        return
    if store_kind == "cluster":
        url = request.getfixturevalue("redis_cluster").url()
    else:
        redis_or_skip()
        url = REDIS_URL
    from agent_breaker.store.redis import RedisStore

    store = RedisStore(url, prefix=f"abtest-{uuid.uuid4().hex[:12]}", listen=False)
    try:
        yield store
        # the test ran on Redis, not on the in-process fallback (on_error local)
        assert store.failures == 0, f"{store.failures} store operations fell back to in-process state"
    finally:
        store.delete_all()
        store.close()


@pytest.fixture
def redis_store():
    """A bare RedisStore under its own key prefix (no listener, no near-cache), cleaned up after."""
    redis_or_skip()
    from agent_breaker.store.redis import RedisStore

    store = RedisStore(REDIS_URL, prefix=f"abunit-{uuid.uuid4().hex[:12]}", listen=False, near_cache_s=0.0)
    try:
        yield store
    finally:
        store.delete_all()
        store.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000_000.0)


@pytest.fixture
def keys() -> ReceiptKeys:
    return ReceiptKeys("k1", {"k1": b"k" * 32})


@pytest.fixture
def incidents() -> list:
    """The trips the engines of `make_engine` report."""
    return []


@pytest.fixture
def transitions() -> list:
    """The breaker incidents (moves between states) the engines of `make_engine` report."""
    return []


@pytest.fixture
def make_engine(clock: FakeClock, keys: ReceiptKeys, incidents: list, transitions: list, shared_store):
    def listen(incident: Incident | BreakerIncident) -> None:
        (transitions if isinstance(incident, BreakerIncident) else incidents).append(incident)

    def make(config: dict[str, Any] | None = None, **kwargs: Any) -> Engine:
        kwargs.setdefault("listeners", [listen])
        kwargs.setdefault("receipt_keys", keys)
        if shared_store is not None:
            kwargs.setdefault("store", shared_store)
        return Engine(config, clock=clock, **kwargs)

    return make


@pytest.fixture
def engine(make_engine) -> Engine:
    return make_engine()


def call(tool: str, args: dict | None = None, *, session: str = SESSION, **kw: Any) -> dict[str, Any]:
    return {"type": "tool_call", "session": session, "tool": tool, "args": args or {}, **kw}


def result(tool: str, ok: bool = True, payload: Any = None, *, session: str = SESSION, **kw: Any) -> dict[str, Any]:
    return {"type": "tool_result", "session": session, "tool": tool, "ok": ok, "result": payload, **kw}


def say(text: str, *, session: str = SESSION, **kw: Any) -> dict[str, Any]:
    return {"type": "assistant", "session": session, "text": text, **kw}


def user(text: str = "", *, session: str = SESSION) -> dict[str, Any]:
    return {"type": "user", "session": session, "text": text}


def final(text: str, *, session: str = SESSION) -> dict[str, Any]:
    return {"type": "final", "session": session, "text": text}


# a dependency's failure (the only kind a tool breaker counts); a bare `ok: false` is the call's own
OUTAGE = "HTTP 503 Service Unavailable"
# the call's own failure: it feeds the loop detectors, never a breaker
CALL_ERROR = 'relation "orders" does not exist'


def run(
    engine: Engine,
    clock: FakeClock,
    tool: str,
    args: dict | None,
    ok: bool,
    payload: Any,
    *,
    step_s: float = 2.0,
    error: str | None = None,
    **kw: Any,
):
    """One call and, if it is let through, its result (failing with `error`, if given); returns
    the call's verdict."""
    clock.advance(step_s)
    verdict = engine.check_tool_call(call(tool, args, **kw))
    if verdict.allowed:
        clock.advance(0.5)
        session = kw.get("session", SESSION)
        tenant = {"tenant": kw["tenant"]} if "tenant" in kw else {}
        failure = {"error": error} if error is not None else {}
        engine.record_tool_result(result(tool, ok, payload, call_id=verdict.call_id, session=session, **tenant, **failure))
    return verdict


#: modules whose tests each start a server or a worker process, run the NeMo runtime, a browser,
#: a notebook kernel or the CLI in a subprocess: the slow tier as a whole
SLOW_MODULES = frozenset(
    {
        "test_demo",
        "test_examples",
        "test_light_import",
        "test_native_tool_calls",
        "test_nemo_flows",
        "test_notebook",
        "test_operating_server",
        "test_outbox_durability",
        "test_payload",
        "test_redis_cluster",
        "test_redis_fleet",
        "test_report",
        "test_serve_concurrency",
        "test_serve_workers",
        "test_server_and_chat",
        "test_server_attacks",
        "test_tracing",
        "test_transport",
    }
)
#: fixtures that start a server process or a Redis Cluster
SLOW_FIXTURES = frozenset({"redis_cluster", "served", "server"})


def pytest_collection_modifyitems(config, items):
    """`slow`: servers, the NeMo runtime, clusters, browsers and long property runs; the rest is
    the fast tier (`pytest -m "not slow"`), which still runs every decider and store contract on
    memory and one Redis server."""
    slow = pytest.mark.slow
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        long_property = getattr(getattr(item, "obj", None), "_hypothesis_internal_use_settings", None)
        if (
            item.module.__name__.rpartition(".")[2] in SLOW_MODULES
            or SLOW_FIXTURES & set(item.fixturenames)
            or "cluster" in params.values()
            # judged by the quick count whatever the profile: the tiers hold the same tests
            or (long_property is not None and long_property.max_examples > examples(SLOW_EXAMPLES))
        ):
            item.add_marker(slow)
