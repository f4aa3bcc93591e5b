"""The transactional outbox under failure (issue 12, item 4), with real services only: a writer
killed with -9 before any relay ran, a relay killed with -9 mid-batch and restarted, the broker
connection cut mid-delivery (through a proxy the test owns: the shared broker is never
restarted), and no payload text in the SQLite file or the queue's messages unless opted in.
Each test has a queue of its own (a uuid), deleted after it; each prints its counts."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _proxy import TcpProxy

from agent_breaker._sinks import json_lines
from agent_breaker.escalations import Escalation, InvalidEscalation, Relay, Spend, SqliteEscalations, ToolOutcome
from agent_breaker.escalations.relay import with_key

pika = pytest.importorskip("pika")

from agent_breaker.escalations.rabbitmq import DedupConsumer, RabbitPublisher  # noqa: E402

RABBIT_URL = os.environ.get("AGENT_BREAKER_TEST_QUEUE_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
ROOT = Path(__file__).resolve().parents[1]


def rabbit_or_skip() -> None:
    """A real RabbitMQ, or skip (fail instead under CI, where the machine runs one)."""
    try:
        pika.BlockingConnection(pika.URLParameters(RABBIT_URL)).close()
    except pika.exceptions.AMQPError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"RabbitMQ at {RABBIT_URL} does not answer under CI: {exc!r}")
        pytest.skip(f"no RabbitMQ at {RABBIT_URL}: {exc!r}")


@pytest.fixture
def queue() -> Iterator[str]:
    """A queue name of the test's own; the queue is deleted after the test."""
    rabbit_or_skip()
    name = f"agent-breaker-test-{uuid.uuid4().hex}"
    yield name
    connection = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
    try:
        connection.channel().queue_delete(name)
    finally:
        connection.close()


def depth(queue: str) -> int:
    """Messages waiting in the queue, as the broker counts them (a connection of its own)."""
    connection = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
    try:
        return connection.channel().queue_declare(queue, passive=True).method.message_count
    except pika.exceptions.ChannelClosedByBroker:
        return 0  # not declared yet
    finally:
        if connection.is_open:
            connection.close()


def wait_for(ready: Callable[[], bool], timeout_s: float = 60.0, every_s: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            return False
        time.sleep(every_s)
    return True


def seed(path: Path, n: int, prefix: str) -> set[str]:
    """n open escalations (and their outbox rows); their outbox keys."""
    store = SqliteEscalations(path, synchronous="NORMAL", max_open_per_tenant=n)  # speed only: the relay is tested
    try:
        made = [
            store.escalate(Escalation.new(session=f"{prefix}{i}", heuristic="step_limit", reason="500 steps", now=time.time()))
            for i in range(n)
        ]
    finally:
        store.close()
    return {f"escalation:{e.id}" for e in made}


def drained(queue: str) -> tuple[DedupConsumer, dict[str, int]]:
    """Everything the queue holds, through a deduplicating consumer: (the consumer, times each
    key reached its handler)."""
    handled: dict[str, int] = {}
    consumer = DedupConsumer(RABBIT_URL, queue)
    try:
        consumer.drain(lambda message, key: handled.__setitem__(key, handled.get(key, 0) + 1), idle_s=1.5)
    finally:
        consumer.close()
    return consumer, handled


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_BREAKER_")}
    return {**env, **extra}


# ----------------------------------------------------------------------------- (a) the writer killed


WRITER = """
import sys, time
from agent_breaker.escalations import Escalation, SqliteEscalations
store = SqliteEscalations(sys.argv[1], max_open_per_tenant=1000)
i = 0
while True:
    e = store.escalate(Escalation.new(session=f"w{i}", heuristic="step_limit", reason="500 steps", now=time.time()))
    print(e.id, flush=True)  # after the commit: every printed id is on disk
    i += 1
"""


def test_escalations_written_by_a_process_killed_with_minus_9_are_all_relayed(tmp_path, capsys):
    path = tmp_path / "escalations.db"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True, env=clean_env())
    assert writer.stdout is not None
    printed = []
    while len(printed) < 300:
        line = writer.stdout.readline()
        assert line, "the writer died on its own"
        printed.append(line.strip())
    os.kill(writer.pid, signal.SIGKILL)  # mid-write: it was escalating the next one
    # the rest through the same reader: readline may have buffered lines already, which
    # communicate() (raw reads of the pipe) would miss
    printed += writer.stdout.read().split()
    assert writer.wait(timeout=30) == -signal.SIGKILL

    store = SqliteEscalations(path)  # a restart: the killed writer's WAL is recovered
    in_file = {e.id for e in store.list(limit=1000)}
    assert store.pending_count() == len(in_file)  # nothing was delivered before the kill
    out = tmp_path / "delivered.jsonl"
    relay = Relay(store, {"file": with_key(json_lines(str(out)))})
    try:
        while relay.run_once():
            pass
    finally:
        relay.close()
        store.close()
    delivered = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    with capsys.disabled():
        print(
            f"\n[outbox] sqlite, writer killed -9: {len(printed)} escalations acknowledged, {len(in_file)} committed, "
            f"{len(delivered)} delivered after the restart, {len(delivered) - len(set(delivered))} twice"
        )
    assert set(printed) <= in_file and len(in_file) - len(printed) <= 1  # at most the one it was writing
    assert sorted(delivered) == sorted(in_file)


# ----------------------------------------------------------------------------- (b) the relay killed


def test_a_relay_killed_mid_batch_and_restarted_loses_nothing_and_dedup_sees_each_once(tmp_path, queue, capsys):
    path = tmp_path / "escalations.db"
    n = 2000
    expected = seed(path, n, "r")
    config = tmp_path / "config.yml"
    config.write_text(f"escalations:\n  queue: {queue}\n")
    env = clean_env(AGENT_BREAKER_QUEUE_URL=RABBIT_URL)
    command = [sys.executable, "-m", "agent_breaker.cli", "relay", "--db", str(path), "--config", str(config)]

    relay = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: depth(queue) >= 250), "the relay published nothing"
    finally:
        os.kill(relay.pid, signal.SIGKILL)
        relay.wait(30)
    store = SqliteEscalations(path)
    marked_before = n - store.pending_count()
    store.close()
    assert marked_before < n, "the relay finished before it was killed: nothing was tested"

    again = subprocess.run([*command, "--once"], env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    consumer, handled = drained(queue)
    with capsys.disabled():
        print(
            f"\n[outbox] rabbitmq, relay killed -9 mid-batch: {n} escalations, {marked_before} marked delivered before "
            f"the kill; after the restart the consumer got {consumer.delivered + consumer.duplicates} messages: "
            f"{consumer.delivered} delivered, {consumer.duplicates} duplicates dropped (published but not yet marked)"
        )
    assert set(handled) == expected and set(handled.values()) == {1}
    # the restart republishes what the killed relay published but had not marked: at most its batch
    assert consumer.delivered == n and consumer.duplicates <= 100


# ----------------------------------------------------------------------------- (c) the connection cut


def test_a_broker_connection_cut_mid_delivery_loses_nothing_and_dedup_sees_each_once(tmp_path, queue, capsys):
    path = tmp_path / "escalations.db"
    n, k = 300, 120
    expected = seed(path, n, "c")
    broker = pika.URLParameters(RABBIT_URL)
    proxy = TcpProxy((broker.host, broker.port))
    publisher = RabbitPublisher(f"amqp://guest:guest@127.0.0.1:{proxy.port}/%2F", queue)
    calls = {"n": 0}

    def through_the_proxy(message: dict[str, Any], key: str) -> None:
        calls["n"] += 1
        if calls["n"] == k:
            # the k-th message reaches the broker, its confirm does not: the connection is cut while
            # the publisher waits for it, and the broker stays unreachable for the retry
            before = depth(queue)
            proxy.mute()

            def cut_once_it_arrived() -> None:
                wait_for(lambda: depth(queue) > before, timeout_s=30)
                proxy.refusing = True
                proxy.cut()

            threading.Thread(target=cut_once_it_arrived, daemon=True).start()
        publisher(message, key)

    store = SqliteEscalations(path)
    relay = Relay(store, {"rabbitmq": through_the_proxy}, batch_size=50)
    passes = failed_passes = 0
    try:
        while store.pending_count():
            passes += 1
            relay.run_once()
            if relay.failures:
                failed_passes += 1
                proxy.refusing = False  # the broker is back for the next pass
            assert passes < 100
    finally:
        relay.close()
        store.close()
        publisher.close()
        proxy.close()
    consumer, handled = drained(queue)
    with capsys.disabled():
        print(
            f"\n[outbox] rabbitmq, connection cut mid-delivery at message {k} of {n}: {failed_passes} failed pass(es), "
            f"{publisher.connections} connections; the consumer got {consumer.delivered + consumer.duplicates} messages: "
            f"{consumer.delivered} delivered, {consumer.duplicates} duplicates dropped"
        )
    assert failed_passes >= 1 and publisher.connections >= 2
    assert set(handled) == expected and set(handled.values()) == {1}
    assert consumer.delivered == n and consumer.duplicates >= 1  # the message whose confirm was lost came twice


def test_a_publisher_reconnects_after_the_broker_dropped_an_idle_connection(queue):
    broker = pika.URLParameters(RABBIT_URL)
    proxy = TcpProxy((broker.host, broker.port))
    publisher = RabbitPublisher(f"amqp://guest:guest@127.0.0.1:{proxy.port}/%2F", queue)
    try:
        publisher({"kind": "trip"}, "k1")
        proxy.cut()  # while idle: the next publish finds the connection dead
        publisher({"kind": "trip"}, "k2")  # no error: it published on a new connection
        assert publisher.connections == 2
    finally:
        publisher.close()
        proxy.close()
    consumer, handled = drained(queue)
    assert handled == {"k1": 1, "k2": 1}


# ----------------------------------------------------------------------------- (d) no payload


def test_no_payload_text_in_the_file_or_the_queue_unless_opted_in(tmp_path, queue, capsys):
    payload = f"SECRET-ARGS-{uuid.uuid4().hex}"  # what a tool call's arguments held
    excerpt = f"OPTED-IN-EXCERPT-{uuid.uuid4().hex}"  # what one tenant allowed to be kept
    path = tmp_path / "escalations.db"
    store = SqliteEscalations(path)
    common: dict[str, Any] = {
        "heuristic": "unverified_claim",
        "reason": "the answer claims wire_transfer ran; no receipt for it",
        "now": time.time(),
        "counters": {"claims": 1, "args_hash": hashlib.sha256(payload.encode()).hexdigest()},  # the engine's hashes
        "spend": Spend(tokens=4200, usd=0.05),
        "tools": [ToolOutcome("wire_transfer", "blocked", 1)],
    }
    plain = store.escalate(Escalation.new(session="p1", tenant="plain", **common))
    store.escalate(Escalation.new(session="o1", tenant="optin", excerpts=[excerpt], **common))
    store.resolve(plain.id, "abort", "the agent invented a transfer")
    store.add_incident({"kind": "trip", "session": "p1", "tenant": "plain", "heuristic": "unverified_claim", "counters": {}})
    with pytest.raises(InvalidEscalation):  # payload text cannot ride in as a counter
        Escalation.new(session="p2", heuristic="step_limit", reason="r", now=0.0, counters={"args": f"{payload} and more"})
    publisher = RabbitPublisher(RABBIT_URL, queue)
    relay = Relay(store, {"rabbitmq": publisher})
    try:
        while relay.run_once():
            pass
    finally:
        relay.close()
        publisher.close()
    on_disk = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("escalations.db"))
    store.close()
    bodies: list[bytes] = []
    connection = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
    try:
        channel = connection.channel()
        while True:
            method, _, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                break
            bodies.append(body)
    finally:
        connection.close()
    in_queue = b"\n".join(bodies)
    with capsys.disabled():
        print(f"\n[outbox] payload search: {len(on_disk)} bytes of SQLite files, {len(bodies)} queue messages")
    assert len(bodies) == 4
    assert payload.encode() not in on_disk and payload.encode() not in in_queue
    # the search works: the opted-in excerpt is found in both, and only for its tenant
    assert excerpt.encode() in on_disk and excerpt.encode() in in_queue
    assert [json.loads(b).get("excerpts") for b in bodies if json.loads(b).get("tenant") == "plain"] == [None, None, None]
