"""Redis Cluster (issue: scale out): the store and the escalation queue on a 3-master cluster,
started once per test run (conftest's `redis_cluster`, tests/_cluster.py) on free loopback
ports: `redis-server --cluster-enabled yes`, then `redis-cli --cluster create`, no replicas;
stopped by PID. The contract suite runs on it too (conftest's `store_kind` "cluster").

Every key carries a hash tag and every script's keys share one slot; a `redis+cluster://` URL
gives the store and the escalation queue a cluster client (agent_breaker/store/redis_client.py).
Each test uses keys under its own prefix and deletes them."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("redis")

from _cluster import Cluster
from _ports import free_port
from conftest import CALL_ERROR, OUTAGE, REDIS_URL, redis_or_skip

from agent_breaker import Engine, ReceiptKeys
from agent_breaker.config import BreakerConfig, parse_config
from agent_breaker.store import StorageError, store_from_uri
from agent_breaker.store.base import without_password
from agent_breaker.store.redis import CHANNEL, RedisStore
from agent_breaker.store.redis_client import LazyCluster, node_urls, register_script, subscriber_client


def prefix() -> str:
    return f"abcl{uuid.uuid4().hex[:8]}"


def test_a_config_on_a_cluster_url_guards_a_fleet(redis_cluster: Cluster):
    """Two engines (two workers) built from a config naming the cluster: a loop alternating
    between them is warned at the fourth call by one and cut at the fifth by the other, a tool
    failing on both opens one breaker, a spend
    ceiling holds across both; the keys land on every master, and no decision fell back to
    in-process state."""
    keys = prefix()
    config = {
        "storage": {"url": redis_cluster.url(), "key_prefix": keys},
        "breaker": {"consecutive_failures": 4},
        "global_budget": {"max_cost_usd": 1.0, "window_s": 3600},
    }
    engines = [Engine(config, listeners=[], receipt_keys=ReceiptKeys.ephemeral()) for _ in range(2)]
    stores = [e.store for e in engines]
    assert all(isinstance(s, RedisStore) and isinstance(s.redis, LazyCluster) for s in stores)
    try:
        # a loop: call i on one engine, its failure on the other
        cut, warned = None, []
        for i in range(1, 7):
            first, other = engines[i % 2], engines[(i + 1) % 2]
            v = first.check_tool_call({"session": "loop", "tool": "run_sql", "args": {"q": "SELECT 1"}})
            if not v.allowed:
                cut = (i, v.heuristic)
                break
            if v.advisory:
                warned.append((i, v.heuristic))
            other.record_tool_result(
                {"session": "loop", "tool": "run_sql", "ok": False, "error": CALL_ERROR, "call_id": v.call_id}
            )
        # the warning one engine gave is spent for the other: the cut comes at the next call
        assert (warned, cut) == ([(4, "identical_failure")], (5, "identical_failure"))
        # a breaker: failures from both engines, separate sessions and args
        refused = None
        for i in range(1, 10):
            first, other = engines[i % 2], engines[(i + 1) % 2]
            v = first.check_tool_call({"session": f"b{i}", "tool": "dead_api", "args": {"i": i}})
            if not v.allowed:
                refused = (i, v.heuristic)
                break
            other.record_tool_result({"session": f"b{i}", "tool": "dead_api", "ok": False, "error": OUTAGE, "call_id": v.call_id})
        assert refused == (5, "circuit_open")
        # listed by SCAN over every master (a caller's error, the loop's, opens nothing)
        assert {k: s.state.value for k, s in stores[1].breaker_list()} == {":dead_api": "open", ":run_sql": "closed"}
        # spend: 0.4 USD a step, from both engines; the third step is over the 1.0 USD ceiling
        spent = []
        for i in range(1, 4):
            v = engines[i % 2].check_tool_call({"session": f"g{i}", "tool": "llm", "args": {"i": i}, "cost_usd": 0.4})
            spent.append((v.allowed, v.heuristic))
        assert spent[:2] == [(True, None), (True, None)] and spent[2] == (False, "global_budget")
        assert all(s.failures == 0 for s in stores)  # every operation ran on the cluster
        assert all(n > 0 for n in redis_cluster.keys_per_node(f"{keys}:*")), redis_cluster.keys_per_node(f"{keys}:*")
    finally:
        deleted = stores[0].delete_all()  # one DEL, which the cluster client splits by slot
        for s in stores:
            s.close()
    assert deleted > 0 and redis_cluster.keys_per_node(f"{keys}:*") == [0, 0, 0]


def test_two_served_workers_on_the_shipped_redis_config_guard_one_run_on_the_cluster(redis_cluster: Cluster):
    """`agent-breaker serve --workers 2` with the shipped Redis config and $REDIS_URL naming the
    cluster: the loop is warned at the 4th call and cut at the 5th, whichever worker takes each
    request."""
    pytest.importorskip("nemoguardrails")
    from _server import call, result, start

    config = Path(__file__).resolve().parents[1] / "config" / "agent_breaker_redis"
    server = start({"REDIS_URL": redis_cluster.url()}, args=("--config", str(config), "--workers", "2"))
    client = redis_cluster.client()
    session = f"serve-{uuid.uuid4().hex[:8]}"
    try:
        cut, warned = None, []
        for i in range(1, 7):
            verdict = server.events(session, call(i), config_id="agent_breaker_redis").json()["events"][0]
            if not verdict["allowed"]:
                cut = (i, verdict["heuristic"])
                break
            if verdict["heuristic"] is not None:  # allowed with a heuristic: the warning, its observation says so
                assert (verdict["severity"], verdict["observation"]["warning"]) == ("warn", "IDENTICAL_FAILURE")
                warned.append((i, verdict["heuristic"]))
            server.events(session, result(i, error=CALL_ERROR), config_id="agent_breaker_redis")
        assert (warned, cut) == ([(4, "identical_failure")], (5, "identical_failure"))
        assert sum(redis_cluster.keys_per_node("ab:*")) > 0
    finally:
        server.stop()
        for key in client.scan_iter(match="ab:*"):
            client.delete(key)
        client.close()


def test_a_transition_reaches_every_worker_through_the_cluster(redis_cluster: Cluster):
    """A breaker opened through one store is published on the cluster; another store's listener,
    subscribed to the node its URL names, hears it and drops the closed state it had cached, so
    its next call is refused at once instead of after its near-cache expires."""
    keys = prefix()
    cfg = BreakerConfig(consecutive_failures=2, open_s=600.0)
    opener = RedisStore(redis_cluster.url(), prefix=keys, listen=False)
    listener = RedisStore(redis_cluster.url(), prefix=keys, listen=True, near_cache_s=3600.0)
    heard = threading.Event()
    take = listener.on_broadcast

    def on_broadcast(payload: bytes | str) -> None:
        take(payload)
        heard.set()

    listener.on_broadcast = on_broadcast  # type: ignore[method-assign]
    try:
        node = redis_cluster.node(0)
        redis_cluster.wait(lambda: node.pubsub_numsub(CHANNEL)[0][1] >= 1, "the listener to subscribe")
        node.close()
        now = time.time()
        assert listener.breaker_acquire("api", cfg, now).allowed  # cached: closed for an hour
        for _ in range(2):
            assert opener.breaker_acquire("api", cfg, now).allowed
            opener.breaker_record("api", cfg, now, failed=True, slow=False, probe=None)
        assert heard.wait(10), "no transition was heard through the cluster"
        refused = listener.breaker_acquire("api", cfg, now)
        assert (refused.allowed, refused.state.value) == (False, "open")
    finally:
        opener.delete_all()
        opener.close()
        listener.close()


def test_the_escalation_queue_and_outbox_on_a_cluster(redis_cluster: Cluster):
    """From a cluster URL and from a caller's cluster client: every key in one slot ({esc})."""
    from agent_breaker.escalations import RedisEscalations
    from agent_breaker.escalations.records import Escalation

    client = redis_cluster.client()
    for source in (redis_cluster.url(), client):
        keys = prefix()
        store = RedisEscalations(source, prefix=keys)
        assert ("Redis Cluster, node 127.0.0.1:" in store.where) == (source is client)
        try:
            record = store.escalate(Escalation.new(session="S", heuristic="identical_failure", reason="loop", now=time.time()))
            assert store.frozen(None, "S") == record
            rows = store.pending(10)
            assert [r.kind for r in rows] == ["escalation"]
            store.mark_delivered([r.position for r in rows])
            assert store.resolve(record.id, "resume").status == "resumed"
            assert store.frozen(None, "S") is None
            assert [e.id for e in store.list()] == [record.id]
            assert sum(1 for n in redis_cluster.keys_per_node(f"{keys}:*") if n) == 1  # one slot: {esc}
        finally:
            for k in list(client.scan_iter(match=f"{keys}:*", count=1000)):
                client.delete(k)
            store.close()
    client.close()


def test_a_script_a_node_lacks_gets_all_its_arguments(redis_cluster: Cluster):
    """After NOSCRIPT the script is sent again with EVAL: with every argument, even when the
    caller passed them as an iterator (consumed by the first attempt)."""
    client = redis_cluster.client()
    try:
        script = register_script(client, "return #KEYS + #ARGV")
        assert client.script_flush()
        assert script(keys=[f"{prefix()}:{{k}}"], args=iter(["a", "b"])) == 3
    finally:
        client.close()


def test_a_one_server_url_to_a_cluster_node_falls_back(redis_cluster: Cluster):
    """redis:// names one server: a cluster answers MOVED for the slots other masters serve,
    and those operations fall back to in-process state (hence the redis+cluster:// scheme)."""
    keys = prefix()
    store = RedisStore(f"redis://127.0.0.1:{redis_cluster.ports[0]}/0", prefix=keys, listen=False, retry_s=0.001)
    engine = Engine({}, store=store, listeners=[], receipt_keys=ReceiptKeys.ephemeral())
    try:
        for i in range(30):
            engine.check_tool_call({"session": f"s{i}", "tool": "search", "args": {"q": i}})
        assert store.failures > 0
    finally:
        store.close()
        client = redis_cluster.client()
        for k in list(client.scan_iter(match=f"{keys}:*", count=1000)):
            client.delete(k)
        client.close()


def test_a_url_whose_first_node_is_down_reaches_the_cluster_through_the_next(redis_cluster: Cluster):
    keys = prefix()
    url = f"redis+cluster://127.0.0.1:{free_port()},127.0.0.1:{redis_cluster.ports[1]}"
    store = RedisStore(url, prefix=keys, listen=False, on_error="raise")
    try:
        assert store.breaker_acquire("api", BreakerConfig(), time.time()).allowed
        assert store.failures == 0
    finally:
        store.delete_all()
        store.close()


def test_a_stopped_master_fails_only_its_own_keys_and_only_for_the_command_timeout(redis_cluster: Cluster):
    """One master stopped (SIGSTOP: it holds its connections and never answers), and no node
    has the scripts yet (SCRIPT FLUSH: a restarted node, a new release). A breaker whose key
    another master serves still decides; one on the stopped master fails after the command
    timeout, not after redis-py's retries (10 by default, each re-reading the slot map)."""
    keys = prefix()
    store = RedisStore(redis_cluster.url(), prefix=keys, listen=False, timeout_s=0.2, on_error="raise", near_cache_s=0.0)
    cfg = BreakerConfig()
    client = redis_cluster.client()
    stopped = redis_cluster.procs[2]
    by_port: dict[int, str] = {}
    for i in range(200):
        by_port.setdefault(client.get_node_from_key(store.breaker_key(f"t{i}")).port, f"t{i}")
    alive, dead = by_port[redis_cluster.ports[1]], by_port[redis_cluster.ports[2]]
    assert client.script_flush()
    os.kill(stopped.pid, signal.SIGSTOP)
    try:
        assert store.breaker_acquire(alive, cfg, time.time()).allowed  # EVAL on its own node, not SCRIPT LOAD on all
        start = time.monotonic()
        with pytest.raises(StorageError):
            store.breaker_acquire(dead, cfg, time.time())
        waited = time.monotonic() - start
        # one timeout (0.2 s) and a slot-map read from the nodes that answer; 10 retries take >= 2 s
        assert waited < 1.5, waited
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
        nodes = [redis_cluster.node(i) for i in range(3)]
        redis_cluster.wait(lambda: all(n.cluster("info")["cluster_state"] == "ok" for n in nodes), "cluster_state:ok again")
        for n in nodes:
            n.close()
        store.delete_all()
        store.close()
        client.close()


# ----------------------------------------------------------------------------- without a cluster


def test_a_cluster_that_is_down_at_start_gets_the_failure_policy():
    """The cluster client reads the slot map when it is made: a cluster that does not answer
    must not fail the store's construction (a one-server store connects on first use too).
    Decisions then follow `on_error`, and each later use tries the cluster again."""
    url = f"redis+cluster://127.0.0.1:{free_port()}"  # nothing listens there
    local = RedisStore(url, prefix=prefix(), listen=False, timeout_s=0.2, retry_s=0.0)
    engine = Engine({}, store=local, listeners=[], receipt_keys=ReceiptKeys.ephemeral())
    try:
        assert engine.check_tool_call({"session": "s", "tool": "search", "args": {}}).allowed
        first = local.failures
        assert engine.check_tool_call({"session": "s", "tool": "search", "args": {"q": 1}}).allowed
        assert 0 < first < local.failures  # tried again: retry_s is 0
    finally:
        local.close()
    strict = RedisStore(url, prefix=prefix(), listen=False, timeout_s=0.2, on_error="raise")
    try:
        with pytest.raises(StorageError, match="Redis at redis\\+cluster://127.0.0.1"):
            strict.breaker_state("api")
    finally:
        strict.close()


def test_a_cluster_url_to_a_server_that_is_no_cluster_says_why_in_the_log(caplog):
    """A redis+cluster:// URL naming a one-server Redis never works: the log says why, the
    cluster client's message (nodes only), not just a type."""
    redis_or_skip()
    url = "redis+cluster://" + REDIS_URL.removeprefix("redis://").split("/")[0]
    store = RedisStore(url, prefix=prefix(), listen=False, timeout_s=0.5)
    try:
        with caplog.at_level("WARNING", logger="agent_breaker.store"):
            assert store.breaker_acquire("api", BreakerConfig(), time.time()).allowed  # in-process state
        assert store.failures == 1
        assert "ClusterUnreachable: " in caplog.text and "luster" in caplog.text.split("ClusterUnreachable: ", 1)[1]
    finally:
        store.close()


def test_an_escalation_queue_on_a_cluster_that_is_down_says_so():
    from agent_breaker.escalations import EscalationStorageError, RedisEscalations

    store = RedisEscalations(f"redis+cluster://127.0.0.1:{free_port()}", timeout_s=0.2)
    with pytest.raises(EscalationStorageError, match="Redis at redis\\+cluster://127.0.0.1"):
        store.frozen(None, "S")
    store.close()


@pytest.mark.parametrize(
    ("url", "nodes"),
    [
        ("redis+cluster://h:7000", ["redis://h:7000"]),
        ("rediss+cluster://user:pw@h:7000/0", ["rediss://user:pw@h:7000/0"]),
        (
            "REDIS+CLUSTER://h1:7000,[::1]:7001/?ssl_cert_reqs=none",
            ["redis://h1:7000/?ssl_cert_reqs=none", "redis://[::1]:7001/?ssl_cert_reqs=none"],
        ),
        ("redis://h:6379/3", ["redis://h:6379/3"]),  # one server: as it is
    ],
)
def test_a_cluster_url_names_its_nodes(url: str, nodes: list[str]):
    assert node_urls(url) == nodes


def test_the_listener_tries_the_nodes_of_the_url_in_turn():
    hosts = [subscriber_client("redis+cluster://h1:7000,h2:7001", timeout_s=1, attempt=i) for i in range(3)]
    assert [c.connection_pool.connection_kwargs["host"] for c in hosts] == ["h1", "h2", "h1"]


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis+cluster://user:s3cret@h:7000/2", "only database 0"),
        ("redis+cluster://user:s3cret@h:7000?db=2", "only database 0"),
        ("redis+cluster://user:s3c/ret@h:7000/9", "only database 0"),  # a password that looks like a path
        ("redis+cluster://user:s3cret@h:7000,h2", "node 2 of the Redis Cluster URL is not host:port"),
        ("redis+cluster://user:s3cret@h:99999", "node 1 of the Redis Cluster URL is not host:port"),
    ],
)
def test_a_bad_cluster_url_is_refused_without_its_password(url: str, problem: str):
    with pytest.raises(ValueError, match=problem) as err:
        store_from_uri(url)
    assert "s3c" not in str(err.value)


def test_logs_show_no_password_in_the_address_or_the_query():
    assert without_password("rediss+cluster://u:s3cret@h1:1,h2:2/0?password=s3cret&db=0") == (
        "rediss+cluster://u:***@h1:1,h2:2/0?password=***&db=0"
    )
    assert without_password("unix:///run/redis.sock?db=1&Password=s3cret") == "unix:///run/redis.sock?db=1&Password=***"
    assert without_password("redis://h:6379/0?pass%77ord=s3cret") == "redis://h:6379/0?pass%77ord=***"
    assert without_password("redis://h:6379/0") == "redis://h:6379/0"


def test_a_cluster_url_with_a_bad_option_is_refused_when_the_store_is_made():
    """As a one-server URL is: not at the first decision, where it would escape `on_error`."""
    with pytest.raises(ValueError, match="socket_timeout") as err:
        RedisStore("redis+cluster://u:s3cret@127.0.0.1:1?socket_timeout=abc", listen=False)
    assert "s3cret" not in str(err.value)


def test_configs_take_cluster_urls_and_name_no_password_when_they_refuse_one():
    assert parse_config({"storage": {"url": "rediss+cluster://h:7000"}}).storage.url == "rediss+cluster://h:7000"
    for bad in ("redis+sentinel://user:s3cret@h:26379", "user:s3cret@h:6379"):
        with pytest.raises(Exception, match="redis\\+cluster://") as err:
            parse_config({"storage": {"url": bad}})
        assert "s3cret" not in str(err.value)
        with pytest.raises(ValueError, match="unsupported store URI") as err:
            store_from_uri(bad)
        assert "s3cret" not in str(err.value)
