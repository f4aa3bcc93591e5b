"""The escalation queue on Redis (issue 12, items 3 and 4, the fleet side): one contract suite run
on both stores (SQLite and Redis), then what only Redis has: one script per write (the record,
its indexes and its stream entry, or none of them), stores of several workers on one prefix,
relays side by side and taking over a dead one's entries, the stream trimmed only below what
was delivered, a relay killed with -9 mid-batch (RabbitMQ and a deduplicating consumer), a Redis
that is down, no payload in Redis, and the choice of store (`escalations.store`, the CLI).
Real SQLite files, a real Redis (its own key prefix, deleted after) and a real RabbitMQ."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REDIS_URL, redis_or_skip
from test_escalations import NOW, TRIP, cli, escalation

from agent_breaker._sinks import Undeliverable
from agent_breaker.config import DEFAULT_MAX_OPEN_PER_TENANT, ConfigError, parse_config
from agent_breaker.escalations import (
    DEFAULT_LIST_LIMIT,
    AlreadyResolved,
    EscalationStorageError,
    InvalidEscalation,
    RedisEscalations,
    RedisLocation,
    Relay,
    SqliteEscalations,
    UnknownEscalation,
    db_path,
    store_for,
    store_location,
)
from agent_breaker.escalations.outbox import capped_message
from agent_breaker.escalations.redis import GROUP

redis_lib = pytest.importorskip("redis")

Store = SqliteEscalations | RedisEscalations


def raw_redis() -> Any:
    return redis_lib.Redis.from_url(REDIS_URL)


def drop_prefix(prefix: str) -> None:
    client = raw_redis()
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture(params=["sqlite", "redis"])
def opener(request, tmp_path) -> Iterator[Callable[..., Store]]:
    """Opens stores on one place of the test's own (a SQLite file; a Redis key prefix, deleted
    after): each call is another worker's store, seeing what the others wrote."""
    opened: list[Store] = []
    prefix = f"abesc-{uuid.uuid4().hex[:12]}"
    if request.param == "redis":
        redis_or_skip()

    def open_one(**kw: Any) -> Store:
        store: Store
        if request.param == "sqlite":
            store = SqliteEscalations(tmp_path / "escalations.db", **kw)
        else:
            store = RedisEscalations(REDIS_URL, prefix=prefix, timeout_s=5.0, **kw)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()
    if request.param == "redis":
        drop_prefix(prefix)


@pytest.fixture
def store(opener) -> Store:
    return opener()


@pytest.fixture
def redis_store() -> Iterator[RedisEscalations]:
    """A Redis store on a prefix of its own (deleted after); its raw keys under `head`."""
    redis_or_skip()
    prefix = f"abesc-{uuid.uuid4().hex[:12]}"
    store = RedisEscalations(REDIS_URL, prefix=prefix, timeout_s=5.0)
    yield store
    store.close()
    drop_prefix(prefix)


def head(store: RedisEscalations) -> str:
    return f"{store.prefix}:{{esc}}:"


def outbox(store: Store) -> list[tuple[str, str]]:
    """(kind, idempotency key) of every undelivered message, oldest first."""
    return [(row.kind, row.key) for row in store.pending(1000)]


def where(store: Store) -> list[str]:
    """The CLI's options naming this store."""
    if isinstance(store, SqliteEscalations):
        return ["--db", str(store.path)]
    return ["--redis", REDIS_URL, "--prefix", store.prefix]


def everything_stored(store: Store) -> bytes:
    """Every byte the store holds: the SQLite files (with the WAL), or every key under the
    prefix with its value read as its type (not DUMP: RDB compresses long strings)."""
    if isinstance(store, SqliteEscalations):
        return b"".join(p.read_bytes() for p in store.path.parent.iterdir() if p.name.startswith(store.path.name))
    client = raw_redis()
    out: list[bytes] = []
    try:
        for key in client.scan_iter(match=f"{store.prefix}:*"):
            out.append(key)
            kind = client.type(key)
            if kind == b"string":
                out.append(client.get(key))
            elif kind == b"hash":
                out.extend(b for pair in client.hgetall(key).items() for b in pair)
            elif kind == b"zset":
                out.extend(member for member, _ in client.zrange(key, 0, -1, withscores=True))
            elif kind == b"stream":
                out.extend(b for _, fields in client.xrange(key) for pair in fields.items() for b in pair)
            else:
                raise AssertionError(f"unexpected {kind!r} at {key!r}")
    finally:
        client.close()
    return b"\n".join(out)


# ----------------------------------------------------------------------------- the contract, on both stores


def test_escalate_is_idempotent_per_tenant_session_and_heuristic(store):
    first = store.escalate(escalation())
    assert store.escalate(escalation(reason="the same trip, decided again by another worker")) == first
    other_heuristic = store.escalate(escalation(heuristic="step_limit"))
    other_tenant = store.escalate(escalation(tenant="globex"))
    no_tenant = store.escalate(escalation(tenant=None))
    assert len({first.id, other_heuristic.id, other_tenant.id, no_tenant.id}) == 4
    assert len(store.list()) == 4
    assert outbox(store) == [("escalation", f"escalation:{e.id}") for e in (first, other_heuristic, other_tenant, no_tenant)]
    store.resolve(first.id, "resume")
    later = store.escalate(escalation(now=NOW + 60))  # a later trip of the resumed session: a new escalation
    assert later.id != first.id and later in store.list(status="open")
    with pytest.raises(InvalidEscalation, match="only an open escalation"):
        store.escalate(store.get(first.id))


def test_a_frozen_session_stays_frozen_until_resumed(store):
    assert store.frozen("acme", "s1") is None
    e = store.escalate(escalation())
    assert store.frozen("acme", "s1") == e
    assert store.frozen(None, "s1") is None and store.frozen("globex", "s1") is None and store.frozen("acme", "s2") is None
    done = store.resolve(e.id, "resume", "the transfer was checked by hand")
    assert (done.status, done.decision, done.note) == ("resumed", "resume", "the transfer was checked by hand")
    assert done.resolved_at is not None and done.resolved_at >= done.created_at
    assert store.frozen("acme", "s1") is None
    assert store.get(e.id) == done
    assert outbox(store) == [("escalation", f"escalation:{e.id}"), ("resolution", f"resolution:{e.id}")]
    assert store.pending(10)[1].message == {"kind": "resolution", **done.to_dict()}


def test_the_oldest_open_escalation_freezes_first_then_the_latest_aborted_one(store):
    late = store.escalate(escalation(heuristic="step_limit", now=NOW + 5))
    early = store.escalate(escalation(now=NOW))
    assert store.frozen("acme", "s1") == early
    aborted_early = store.resolve(early.id, "abort")
    assert store.frozen("acme", "s1") == late  # an open one is what the session waits on first
    aborted_late = store.resolve(late.id, "abort", "stop it")
    assert store.frozen("acme", "s1") == aborted_late != aborted_early


def test_resolving_twice_names_the_status_and_changes_nothing(store):
    e = store.escalate(escalation())
    store.resolve(e.id, "abort")
    with pytest.raises(AlreadyResolved, match="already aborted") as caught:
        store.resolve(e.id, "resume", "second thoughts")
    assert caught.value.status == "aborted"
    assert (store.get(e.id).decision, store.get(e.id).note) == ("abort", None)
    assert [kind for kind, _ in outbox(store)] == ["escalation", "resolution"]
    with pytest.raises(UnknownEscalation):
        store.resolve("esc_0000000000000000", "resume")
    assert store.get("esc_0000000000000000") is None


@pytest.mark.parametrize("hostile", ["esc_' OR 1=1 --", "../../etc/passwd", "esc_0123456789ABCDEF", "esc_*", "", None, 7])
def test_hostile_ids_are_refused_before_the_store_is_reached(store, hostile):
    store.escalate(escalation())
    for act in (lambda: store.get(hostile), lambda: store.resolve(hostile, "abort")):
        with pytest.raises(InvalidEscalation, match="escalation id"):
            act()
    assert store.list(status="open")


def test_decisions_notes_and_listing_limits_are_checked(store):
    e = store.escalate(escalation())
    for decision, note, match in [
        ("delete", None, "decision"),
        ("resume", "n" * 2001, "note"),
        ("resume", "a bell \x07", "note"),
    ]:
        with pytest.raises(InvalidEscalation, match=match):
            store.resolve(e.id, decision, note)
    assert store.get(e.id).status == "open"
    for bad in ({"limit": 0}, {"limit": 1001}, {"limit": True}, {"status": "closed"}, {"tenant": ""}, {"tenant": "a\u2029b"}):
        with pytest.raises(InvalidEscalation):
            store.list(**bad)


def test_the_listing_is_newest_first_filters_by_status_and_orders_equal_times_by_arrival(store):
    made = [store.escalate(escalation(session=f"s{i}", now=NOW + i)) for i in range(5)]
    store.resolve(made[1].id, "resume")
    store.resolve(made[2].id, "abort")
    assert [e.id for e in store.list()] == [e.id for e in reversed(made)]
    assert [e.id for e in store.list(status="open", limit=2)] == [made[4].id, made[3].id]
    assert [e.id for e in store.list(status="resumed")] == [made[1].id]
    assert [e.id for e in store.list(status="aborted")] == [made[2].id]
    assert [e.status for e in store.list(limit=5)] == ["open", "open", "aborted", "resumed", "open"]
    same_time = [store.escalate(escalation(session=f"t{i}", now=NOW + 100)) for i in range(3)]
    assert [e.id for e in store.list(limit=3)] == [e.id for e in reversed(same_time)]


def test_a_tenants_flood_is_collapsed_past_its_cap_counted_alerted_once_and_hides_no_other_tenant(opener):
    """The measured attack: 2,000 escalations of one tenant's sessions in a row. Past its cap (20
    by default) each is collapsed onto the tenant's newest open escalation, which counts it; one
    alert for the crossing; every flooding session stays frozen; another tenant's case stays on
    the first page of the default listing (newest first, 100)."""
    store = opener(clock=lambda: NOW)
    cap, n = DEFAULT_MAX_OPEN_PER_TENANT, 2000
    assert cap * 5 == DEFAULT_LIST_LIMIT  # one tenant fills a fifth of the default listing at most
    victim = store.escalate(escalation(session="real", tenant="bank", now=NOW))
    flood = [store.escalate(escalation(session=f"junk-{i}", tenant="mallory", now=NOW + 1 + i / 1000)) for i in range(n)]
    opened, newest = flood[:cap], flood[cap - 1]
    assert [e.session for e in opened] == [f"junk-{i}" for i in range(cap)]
    assert {e.id for e in flood[cap:]} == {newest.id}
    assert [e.collapsed for e in flood[cap:]] == list(range(1, n - cap + 1))  # each counted once, in order

    assert victim in store.list(status="open") and victim in store.list()  # the default listings
    assert [e.id for e in store.list(status="open", tenant="bank")] == [victim.id]
    mallorys = store.list(status="open", tenant="mallory", limit=1000)
    assert len(mallorys) == cap and {e.id: e.collapsed for e in mallorys} == {e.id: 0 for e in opened} | {newest.id: n - cap}
    assert store.get(newest.id).collapsed == n - cap

    # one alert on the outbox, not one per escalation: the flood cannot flood on-call either
    assert outbox(store) == [("escalation", f"escalation:{e.id}") for e in (victim, *opened)] + [
        ("incident", f"capped:{newest.id}")
    ]
    crossed = escalation(session=f"junk-{cap}", tenant="mallory")
    assert store.pending(1000)[-1].message == {**capped_message(crossed, cap, NOW), "escalation_id": newest.id}

    # every flooding session is frozen: those collapsed by the escalation they were collapsed onto
    assert store.frozen("mallory", "junk-0") == opened[0]
    assert store.frozen("mallory", f"junk-{n - 1}") == store.get(newest.id)
    # a collapsed session escalated again (another heuristic, another worker) is not counted again
    again = store.escalate(escalation(session=f"junk-{n - 1}", tenant="mallory", heuristic="step_limit"))
    assert (again.id, again.collapsed) == (newest.id, n - cap)
    # the other tenant is at none of mallory's cap
    assert store.escalate(escalation(session="real-2", tenant="bank")).collapsed == 0
    assert len(store.list(status="open", tenant="bank")) == 2


def test_the_decision_on_an_escalation_is_the_decision_on_the_sessions_collapsed_onto_it(opener):
    store = opener(max_open_per_tenant=2)
    first, second = (store.escalate(escalation(session=s, now=NOW + i)) for i, s in enumerate(("a", "b")))
    c = store.escalate(escalation(session="c", now=NOW + 2))
    d = store.escalate(escalation(session="d", now=NOW + 3))
    assert (c.id, d.id, d.collapsed) == (second.id, second.id, 2)
    assert store.frozen("acme", "c") == store.frozen("acme", "d") == store.get(second.id)
    # the sessions without a tenant have a cap of their own, and other tenants theirs
    untenanted = [store.escalate(escalation(session=s, tenant=None)) for s in ("a", "b", "c")]
    assert [e.collapsed for e in untenanted] == [0, 0, 1] and untenanted[2].id == untenanted[1].id
    assert store.frozen(None, "c").id == untenanted[1].id and store.frozen("acme", "c").id == second.id

    resumed = store.resolve(second.id, "resume", "checked the flood by hand")
    assert resumed.collapsed == 2 and store.pending(100)[-1].message["collapsed"] == 2  # the resolution says so
    assert store.frozen("acme", "b") is None and store.frozen("acme", "c") is None and store.frozen("acme", "d") is None
    assert store.frozen("acme", "a") == first  # not collapsed onto it: still waiting
    # below the cap again: the next escalation is a record of its own, the one after crosses again
    late = store.escalate(escalation(session="c", now=NOW + 10))
    onto = store.escalate(escalation(session="e", now=NOW + 11))
    assert (late.session, late.collapsed, onto.id, onto.collapsed) == ("c", 0, late.id, 1)
    assert [key for kind, key in outbox(store) if kind == "incident"] == [
        f"capped:{second.id}",
        f"capped:{untenanted[1].id}",
        f"capped:{late.id}",
    ]
    store.resolve(late.id, "abort")
    assert store.frozen("acme", "e").status == "aborted"  # closed for good, with what it was collapsed onto


def test_workers_racing_past_a_tenants_cap_open_exactly_the_cap_and_alert_once(opener):
    workers = [opener(max_open_per_tenant=5), opener(max_open_per_tenant=5)]  # two engines' stores on one place
    start = threading.Barrier(40)
    returned: list[Any] = []

    def worker(i: int) -> None:
        start.wait()
        returned.append(workers[i % 2].escalate(escalation(session=f"s{i}", now=NOW + i)))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    listed = workers[0].list(status="open")
    assert len(listed) == 5 and sum(e.collapsed for e in listed) == 35
    assert all(workers[0].frozen("acme", f"s{i}") is not None for i in range(40))
    assert [kind for kind, _ in outbox(workers[1])].count("incident") == 1


def collapsed_left(store: Store) -> int:
    """What the store holds of sessions collapsed onto escalations: rows, or Redis keys."""
    if isinstance(store, SqliteEscalations):
        return int(store._read_one("SELECT count(*) FROM collapsed_sessions", ())[0])
    client = raw_redis()
    try:
        return sum(1 for pattern in ("collapsed:*", "c:*") for _ in client.scan_iter(match=head(store) + pattern))
    finally:
        client.close()


def test_sessions_collapsed_onto_an_escalation_go_with_it_after_the_retention(opener):
    now = [NOW]
    store = opener(retain_resolved_s=3600, max_open_per_tenant=1, clock=lambda: now[0])
    onto = store.escalate(escalation(session="first"))
    n = 1100  # past what one write deletes on Redis (1,000): the record waits for the next write
    for i in range(n):
        store.escalate(escalation(session=f"s{i}"))
    assert collapsed_left(store) > 0
    store.resolve(onto.id, "abort")
    assert store.frozen("acme", "s7").id == onto.id
    now[0] += 3601
    for i in range(2):
        store.escalate(escalation(session="later", tenant=f"other-{i}"))
    assert store.get(onto.id) is None and store.frozen("acme", "s7") is None
    assert collapsed_left(store) == 0


def test_resolved_escalations_are_deleted_after_the_retention_and_open_ones_never(opener):
    now = [NOW]
    store = opener(retain_resolved_s=3600, clock=lambda: now[0])
    resumed, aborted, waiting = (store.escalate(escalation(session=s, now=NOW)) for s in ("a", "b", "c"))
    store.resolve(resumed.id, "resume")
    store.resolve(aborted.id, "abort")
    now[0] += 3599  # within the retention: all kept, the aborted session still closed
    store.escalate(escalation(session="d", now=now[0]))
    assert {e.session for e in store.list()} == {"a", "b", "c", "d"}
    assert store.frozen("acme", "b").status == "aborted"
    now[0] += 2  # past it: the next write deletes the resolved ones, records and listings
    late = store.escalate(escalation(session="e", now=now[0]))
    assert {e.session for e in store.list()} == {"c", "d", "e"}
    assert store.get(resumed.id) is None and store.get(aborted.id) is None
    assert store.list(tenant="acme", status="aborted") == [] and store.list(status="resumed") == []
    assert store.frozen("acme", "b") is None
    assert store.frozen("acme", "c").id == waiting.id  # open: kept however old
    store.resolve(late.id, "resume")  # resolving prunes too, and keeps what it just resolved
    assert store.get(late.id).status == "resumed"
    with pytest.raises(ValueError, match="retain_resolved_s"):
        opener(retain_resolved_s=0)


def test_a_full_disk_still_lets_an_operator_resolve(tmp_path, caplog):
    """The file cannot grow (SQLite's page ceiling stands in for a full disk): new escalations
    fail, but resolving one writes into the reserve the file kept for it."""
    store = SqliteEscalations(tmp_path / "escalations.db")
    frozen = store.escalate(escalation(session="frozen"))
    conn = store._conn()  # this thread's connection: the ceiling holds for every write below
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(EscalationStorageError, match="full"):
        for i in range(10_000):  # until the file would have to grow past its free pages
            store.escalate(escalation(session=f"flood-{i}", reason="x" * 400))
    note = "the disk was full; " * 100  # a resolution the full file has no room for, whatever room its pages have left
    done = store.resolve(frozen.id, "resume", note)
    assert done.status == "resumed" and store.frozen("acme", "frozen") is None
    assert "is full: resolving" in caplog.text
    assert conn.execute("PRAGMA page_count").fetchone()[0] <= pages  # no page past the ceiling
    store.close()
    reopened = SqliteEscalations(tmp_path / "escalations.db")  # room again: the reserve is back
    assert reopened._read_one("SELECT count(*) FROM reserve", ())[0] > 0
    assert reopened.get(frozen.id).status == "resumed"
    reopened.close()


def test_every_worker_sees_the_others_moves_at_once(opener):
    engine_side, operator_side = opener(), opener()
    e = engine_side.escalate(escalation())
    engine_side.add_incident(TRIP)
    assert operator_side.frozen("acme", "s1") == e and operator_side.pending_count() == 2
    operator_side.resolve(e.id, "resume")
    assert engine_side.frozen("acme", "s1") is None
    assert engine_side.escalate(escalation(now=NOW + 1)).id != e.id


def test_workers_racing_to_escalate_one_session_open_one_escalation_and_operators_resolve_it_once(opener):
    workers = [opener(), opener()]  # two engines' stores on one place
    start = threading.Barrier(40)
    opened: list[str] = []
    won: list[str] = []
    lost: list[int] = []

    def worker(i: int) -> None:
        start.wait()
        opened.append(workers[i % 2].escalate(escalation(now=NOW + i)).id)

    def operator(i: int) -> None:
        start.wait()
        try:
            won.append(workers[i % 2].resolve(opened[0], "resume" if i % 2 else "abort", f"operator {i}").status)
        except AlreadyResolved:
            lost.append(i)

    for job in (worker, operator):
        threads = [threading.Thread(target=job, args=(i,)) for i in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(set(opened)) == 1 and len(workers[0].list()) == 1
    assert (len(won), len(lost)) == (1, 39)
    assert [kind for kind, _ in outbox(workers[1])] == ["escalation", "resolution"]


@pytest.mark.slow  # a subprocess or a server
def test_operators_in_other_processes_resolve_once_through_the_cli(store):
    e = store.escalate(escalation())
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_BREAKER_")}
    command = [sys.executable, "-m", "agent_breaker.cli", "escalations", "resolve", e.id, "--decision", "abort", *where(store)]
    procs = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outputs = ["".join(p.communicate(timeout=120)).strip() for p in procs]
    results = sorted(zip((p.returncode for p in procs), outputs, strict=True))
    assert [code for code, _ in results] == [0, 2, 2, 2]
    assert results[0][1] == f"{e.id}: aborted" and all("already aborted" in text for _, text in results[1:])
    assert [kind for kind, _ in outbox(store)] == ["escalation", "resolution"]


def test_the_same_incident_is_one_message(store):
    incident = {"kind": "trip", "ts": NOW, "session": "s1", "heuristic": "identical_call", "counters": {"repeats": 4}}
    key = store.add_incident(incident)
    assert store.add_incident(dict(reversed(list(incident.items())))) == key
    assert store.add_incident({**incident, "ts": NOW + 1}) != key
    assert store.pending_count() == 2
    assert store.pending(10)[0].message == incident
    with pytest.raises(InvalidEscalation, match="JSON"):
        store.add_incident({"kind": "trip", "when": object()})
    with pytest.raises(InvalidEscalation, match="bytes"):
        store.add_incident({"kind": "trip", "counters": {"x": "y" * 70_000}})


@pytest.mark.parametrize(
    ("failures", "wait_s"), [(0, 0.5), (1, 0.5), (5, 8.0), (6, 16.0), (7, 30.0), (1_025, 30.0), (10**6, 30.0)]
)
def test_the_relays_backoff_doubles_to_its_cap_and_stays_there_through_a_long_outage(store, failures, wait_s):
    # a broker down for hours (~1,025 failures at the 30 s cap) once overflowed the float and
    # stopped the relay's thread
    relay = Relay(store, {"broker": lambda m, k: None}, backoff_s=0.5, max_backoff_s=30.0)
    relay.failures = failures
    assert relay.backoff() == wait_s


def test_the_relay_hands_every_target_each_message_in_order_with_its_key(store):
    e = store.escalate(escalation())
    store.add_incident(TRIP)
    store.resolve(e.id, "abort")
    seen: dict[str, list[tuple[str, str]]] = {"a": [], "b": []}
    relay = Relay(store, {name: (lambda m, k, name=name: seen[name].append((m["kind"], k))) for name in seen})
    try:
        assert relay.run_once() == 3
        assert relay.run_once() == 0
    finally:
        relay.close()
    assert (
        seen["a"]
        == seen["b"]
        == [("escalation", f"escalation:{e.id}"), ("trip", seen["a"][1][1]), ("resolution", f"resolution:{e.id}")]
    )
    assert store.pending_count() == 0


def test_a_failing_target_holds_its_message_and_those_after_it_and_the_others_are_not_repeated(store):
    for i in range(3):
        store.escalate(escalation(session=f"s{i}", now=NOW + i))
    healthy: list[str] = []
    down = {"now": True}

    def broker(message: dict[str, Any], key: str) -> None:
        if down["now"] and message["session_id"] == "s1":
            raise ConnectionError("broker unreachable")

    relay = Relay(store, {"healthy": lambda m, k: healthy.append(m["session_id"]), "broker": broker})
    try:
        assert relay.run_once() == 1  # s0 went; s1 is held up, and s2 waits behind it
        assert relay.run_once() == 0 and relay.failures == 2 and store.pending_count() == 2
        down["now"] = False
        assert relay.run_once() == 2 and relay.failures == 0
    finally:
        relay.close()
    assert healthy == ["s0", "s1", "s2"]
    assert store.pending_count() == 0


def test_a_message_a_receiver_refuses_does_not_hold_up_the_outbox(store):
    store.escalate(escalation(session="s0"))
    store.escalate(escalation(session="s1"))

    def picky(message: dict[str, Any], key: str) -> None:
        if message["session_id"] == "s0":
            raise Undeliverable("HTTP 400")

    relay = Relay(store, {"picky": picky})
    try:
        assert relay.run_once() == 2 and relay.refused == 1
    finally:
        relay.close()


def test_no_payload_text_in_the_store_or_the_messages_unless_opted_in(store, capsys):
    payload = f"SECRET-ARGS-{uuid.uuid4().hex}"
    excerpt = f"OPTED-IN-EXCERPT-{uuid.uuid4().hex}"
    common: dict[str, Any] = {"counters": {"claims": 1, "args_hash": "9f2c" * 16}}
    plain = store.escalate(escalation(tenant="plain", **common))
    store.escalate(escalation(tenant="optin", excerpts=[excerpt], **common))
    store.resolve(plain.id, "abort", "the agent invented a transfer")
    store.add_incident({"kind": "trip", "session": "s1", "tenant": "plain", "heuristic": "unverified_claim", "counters": {}})
    with pytest.raises(InvalidEscalation):  # payload text cannot ride in as a counter
        escalation(counters={"args": f"{payload} and more"})
    sent: list[bytes] = []
    relay = Relay(store, {"t": lambda m, k: sent.append(json.dumps(m).encode())})
    try:
        assert relay.run_once() == 4
    finally:
        relay.close()
    stored = everything_stored(store)
    with capsys.disabled():
        print(f"\n[escalations] payload search, {type(store).__name__}: {len(stored)} bytes stored, {len(sent)} messages")
    assert payload.encode() not in stored and not any(payload.encode() in m for m in sent)
    # the search works: the opted-in excerpt is found, for its tenant only
    assert excerpt.encode() in stored
    assert [json.loads(m)["tenant"] for m in sent if excerpt.encode() in m] == ["optin"]


# ----------------------------------------------------------------------------- Redis: one script per write


def test_escalate_writes_the_record_its_indexes_and_its_stream_entry_in_one_script(redis_store):
    client, h = raw_redis(), head(redis_store)
    e = redis_store.escalate(escalation())
    assert client.hget(h + "e:" + e.id, "status") == b"open"
    assert client.get(h + "key:" + e.key) == e.id.encode()
    assert client.zcard(h + "open:acme:s1") == client.zcard(h + "list:all") == client.zcard(h + "list:open") == 1
    [(_, entry)] = client.xrange(h + "outbox")
    assert (entry[b"key"], entry[b"kind"]) == (f"escalation:{e.id}".encode(), b"escalation")
    assert json.loads(entry[b"message"]) == {"kind": "escalation", **e.to_dict()}

    # a script that fails writes nothing: Redis does not roll back, so it checks before it writes
    client.set(h + "list:all", "a key of another type in the way")
    other = escalation(session="s2")
    with pytest.raises(EscalationStorageError, match="WRONGTYPE"):
        redis_store.escalate(other)
    assert client.exists(h + "e:" + other.id, h + "key:" + other.key, h + "open:acme:s2") == 0
    assert client.xlen(h + "outbox") == 1 and client.get(h + "seq") == b"1"

    client.set(h + "list:aborted", "in the way too")
    with pytest.raises(EscalationStorageError, match="WRONGTYPE"):
        redis_store.resolve(e.id, "abort")
    assert redis_store.get(e.id) == e and redis_store.frozen("acme", "s1") == e
    assert client.get(h + "key:" + e.key) == e.id.encode() and client.xlen(h + "outbox") == 1
    client.close()


def test_tenants_and_sessions_are_escaped_in_keys_and_no_tenant_is_not_an_empty_one(redis_store):
    tricky = redis_store.escalate(escalation(tenant="a:b", session="c"))
    other = redis_store.escalate(escalation(tenant="a", session="b:c"))
    braces = redis_store.escalate(escalation(tenant="}{x", session="%25"))
    assert redis_store.frozen("a:b", "c") == tricky and redis_store.frozen("a", "b:c") == other
    assert redis_store.frozen("}{x", "%25") == braces and redis_store.frozen("}{x", "%") is None
    assert redis_store.frozen("", "c") is None and redis_store.frozen(None, "c") is None
    # every key is in the one hash slot of {esc}
    client = raw_redis()
    keys = [k.decode() for k in client.scan_iter(match=f"{redis_store.prefix}:*")]
    client.close()
    assert keys and all(k.startswith(head(redis_store)) and k.count("{") == 1 and k.count("}") == 1 for k in keys)


def test_a_prefix_may_not_hold_a_hash_tag():
    with pytest.raises(ValueError, match="hash tags"):
        RedisEscalations(REDIS_URL, prefix="a{b}")


# ----------------------------------------------------------------------------- Redis: the relays' side


def test_relays_side_by_side_deliver_each_message_once(redis_store, capsys):
    n = 600  # of as many tenants: none at its cap of open escalations
    made = {f"escalation:{redis_store.escalate(escalation(session=f's{i}', tenant=f't{i}')).id}" for i in range(n)}
    got: list[str] = []
    per_relay: Counter[str] = Counter()
    start = threading.Barrier(2)

    def relay_of(name: str) -> None:
        store = RedisEscalations(REDIS_URL, prefix=redis_store.prefix, timeout_s=5.0)  # a relay on another machine
        relay = Relay(store, {"t": lambda m, k: (got.append(k), per_relay.update([name]))}, batch_size=10)
        start.wait()
        while store.pending_count():
            relay.run_once()
        store.close()

    threads = [threading.Thread(target=relay_of, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with capsys.disabled():
        print(f"\n[escalations] redis, two relays side by side: {n} messages, {dict(per_relay)} delivered, {len(got) - n} twice")
    assert sorted(got) == sorted(made) and min(per_relay.values()) > 0


def test_what_a_dead_relay_held_is_taken_over_after_the_idle_time_and_not_before(redis_store):
    for i in range(6):
        redis_store.escalate(escalation(session=f"s{i}", now=NOW + i))
    dead = RedisEscalations(REDIS_URL, prefix=redis_store.prefix)
    held = dead.pending(4)  # then it dies: never acknowledged
    assert [row.attempts for row in held] == [0] * 4
    patient = RedisEscalations(REDIS_URL, prefix=redis_store.prefix)  # the default idle time: the dead one may be busy
    rest = patient.pending(10)
    assert [row.message["session_id"] for row in rest] == ["s4", "s5"]
    patient.mark_delivered([row.position for row in rest])
    taker = RedisEscalations(REDIS_URL, prefix=redis_store.prefix, claim_idle_s=0.0)
    taken = taker.pending(10)
    assert [row.position for row in taken] == [row.position for row in held]
    assert [row.attempts for row in taken] == [1] * 4  # the group handed each out once before
    assert redis_store.pending_count() == 4
    taker.mark_delivered([row.position for row in taken])
    assert redis_store.pending_count() == 0
    for s in (dead, patient, taker):
        s.close()


def test_the_stream_is_trimmed_only_below_what_every_group_acknowledged(redis_store):
    client, stream = raw_redis(), head(redis_store) + "outbox"
    for i in range(5):
        redis_store.escalate(escalation(session=f"s{i}", now=NOW + i))
    assert redis_store.prune_delivered(time.time() + 3600) == 0  # no relay read it yet: nothing is known delivered
    down = {"now": True}

    def broker(message: dict[str, Any], key: str) -> None:
        if down["now"] and message["session_id"] == "s3":
            raise ConnectionError("down")

    relay = Relay(redis_store, {"broker": broker})
    assert relay.run_once() == 3
    assert redis_store.prune_delivered(0.0) == 0  # delivered, but not older than the retention
    assert redis_store.prune_delivered(time.time() + 3600) == 3
    assert client.xlen(stream) == 2 and redis_store.pending_count() == 2
    down["now"] = False
    assert relay.run_once() == 2 and redis_store.pending_count() == 0
    client.xgroup_create(stream, "audit", "0")  # someone else reads the stream too, and has read nothing
    assert redis_store.prune_delivered(time.time() + 3600) == 0 and client.xlen(stream) == 2
    client.xgroup_destroy(stream, "audit")
    assert redis_store.prune_delivered(time.time() + 3600) == 2 and client.xlen(stream) == 0
    assert [g["name"] for g in client.xinfo_groups(stream)] == [GROUP.encode()]
    client.close()


@pytest.mark.slow  # a subprocess or a server
def test_the_cli_lists_shows_resolves_and_relays_on_redis(redis_store, tmp_path):
    a = redis_store.escalate(escalation(session="s-a", now=NOW))
    b = redis_store.escalate(escalation(session="s-b", heuristic="step_limit", now=NOW + 1))
    listed = cli("escalations", "list", "--json", *where(redis_store))
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [b.id, a.id]
    shown = cli("escalations", "show", a.id, *where(redis_store))
    assert shown.returncode == 0 and "wire_transfer" in shown.stdout
    done = cli("escalations", "resolve", a.id, "--decision", "abort", "--note", "invented a transfer", *where(redis_store))
    assert (done.returncode, done.stdout) == (0, f"{a.id}: aborted\n")
    assert redis_store.frozen("acme", "s-a").status == "aborted"
    missing = cli("escalations", "show", "esc_0000000000000000", *where(redis_store))
    assert missing.returncode == 2 and "no escalation esc_0000000000000000 in Redis at" in missing.stderr
    # the config alone: its storage is this Redis, so its escalations are there too (auto)
    config = tmp_path / "config.yml"
    incidents = tmp_path / "incidents.jsonl"
    config.write_text(f"storage: {{url: '{REDIS_URL}', key_prefix: {redis_store.prefix}}}\nincidents: {{file: '{incidents}'}}\n")
    by_config = cli("escalations", "list", "--status", "open", "--json", "--config", str(config))
    assert [json.loads(line)["id"] for line in by_config.stdout.splitlines()] == [b.id], by_config.stderr
    redis_store.add_incident(TRIP)
    relayed = cli("relay", "--once", "--config", str(config))
    assert relayed.returncode == 0 and "relayed 4 message(s) to file; 0 pending" in relayed.stderr, relayed.stderr
    assert [json.loads(line)["kind"] for line in incidents.read_text().splitlines()] == ["trip"]
    both = cli("escalations", "list", "--db", str(tmp_path / "e.db"), "--redis", REDIS_URL)
    assert both.returncode == 2 and "one or the other" in both.stderr


# ----------------------------------------------------------------------------- Redis: a relay killed with -9

RELAY_AFTER_A_KILL = """
import sys
from agent_breaker.config import load_config
from agent_breaker.escalations import RedisEscalations, Relay, targets_for
url, prefix, config = sys.argv[1:4]
# the relay before this one was killed (the test knows): take over what it held at once
store = RedisEscalations(url, prefix=prefix, claim_idle_s=0.0)
targets, closers = targets_for(load_config(config))
relay = Relay(store, targets)
while store.pending_count():
    relay.run_once()
    if relay.failures:
        sys.exit(relay.last_error)
for close in closers:
    close()
print(relay.delivered)
"""


@pytest.fixture
def rabbit_queue() -> Iterator[tuple[Any, str]]:
    """The RabbitMQ helpers of the SQLite durability tests, and a queue of the test's own (deleted after)."""
    durability = pytest.importorskip("test_outbox_durability")  # skips without pika
    durability.rabbit_or_skip()
    name = f"agent-breaker-test-{uuid.uuid4().hex}"
    yield durability, name
    connection = durability.pika.BlockingConnection(durability.pika.URLParameters(durability.RABBIT_URL))
    try:
        connection.channel().queue_delete(name)
    finally:
        connection.close()


@pytest.mark.slow  # a subprocess or a server
def test_a_relay_killed_mid_batch_and_restarted_loses_nothing_and_dedup_sees_each_once(
    redis_store, rabbit_queue, tmp_path, capsys
):
    durability, queue = rabbit_queue
    n = 2000  # of as many tenants: none at its cap of open escalations
    expected = {f"escalation:{redis_store.escalate(escalation(session=f'r{i}', tenant=f't{i}')).id}" for i in range(n)}
    config = tmp_path / "config.yml"
    config.write_text(f"escalations:\n  queue: {queue}\n")
    env = durability.clean_env(AGENT_BREAKER_QUEUE_URL=durability.RABBIT_URL)
    command = [sys.executable, "-m", "agent_breaker.cli", "relay", *where(redis_store), "--config", str(config)]
    relay = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert durability.wait_for(lambda: durability.depth(queue) >= 250), "the relay published nothing"
    finally:
        os.kill(relay.pid, signal.SIGKILL)
        relay.wait(30)
    acknowledged_before = n - redis_store.pending_count()
    client = raw_redis()
    held = client.xpending(head(redis_store) + "outbox", GROUP)["pending"]
    client.close()
    assert acknowledged_before < n, "the relay finished before it was killed: nothing was tested"

    again = subprocess.run(
        [sys.executable, "-c", RELAY_AFTER_A_KILL, REDIS_URL, redis_store.prefix, str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    consumer, handled = durability.drained(queue)
    with capsys.disabled():
        print(
            f"\n[escalations] redis, relay killed -9 mid-batch: {n} escalations, {acknowledged_before} acknowledged before "
            f"the kill, {held} held unacknowledged by the dead relay; the restarted relay delivered {again.stdout.strip()}; "
            f"the consumer got {consumer.delivered + consumer.duplicates} messages: {consumer.delivered} delivered, "
            f"{consumer.duplicates} duplicates dropped (published but not yet acknowledged)"
        )
    assert set(handled) == expected and set(handled.values()) == {1}
    assert consumer.delivered == n and consumer.duplicates <= 100  # at most the batch it was publishing
    assert redis_store.pending_count() == 0


# ----------------------------------------------------------------------------- Redis: down


def test_a_redis_that_is_down_raises_escalation_storage_error_and_a_restarted_one_is_used_again(tmp_path):
    if shutil.which("redis-server") is None:
        pytest.skip("no redis-server to start")
    from _server import free_port

    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    argv += ["--requirepass", "s3cret", "--dir", str(tmp_path)]

    def start() -> subprocess.Popen:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        probe = redis_lib.Redis(port=port, password="s3cret", socket_timeout=1)
        deadline = time.monotonic() + 10
        while True:
            try:
                probe.ping()
                return proc
            except redis_lib.RedisError:
                assert time.monotonic() < deadline and proc.poll() is None, "redis-server did not start"
                time.sleep(0.02)

    own = start()
    store = RedisEscalations(f"redis://:s3cret@127.0.0.1:{port}/0", prefix="down", timeout_s=0.2)
    try:
        e = store.escalate(escalation())
        own.kill()  # only the server this test started
        own.wait(10)
        for act in (
            lambda: store.escalate(escalation(session="s2")),
            lambda: store.frozen("acme", "s1"),
            lambda: store.resolve(e.id, "abort"),
            lambda: store.list(),
            lambda: store.get(e.id),
            lambda: store.add_incident(TRIP),
            lambda: store.pending(10),
            lambda: store.pending_count(),
            lambda: store.mark_delivered(["1-0"]),
            lambda: store.prune_delivered(time.time()),
        ):
            with pytest.raises(EscalationStorageError, match=f"Redis at redis://:\\*\\*\\*@127.0.0.1:{port}/0") as caught:
                act()
            assert "s3cret" not in str(caught.value)
        own = start()  # a fresh server (no persistence): the same store object works again
        assert store.frozen("acme", "s1") is None and store.escalate(escalation()).status == "open"
    finally:
        store.close()
        own.kill()
        own.wait(10)


# ----------------------------------------------------------------------------- choosing the store


def test_auto_keeps_escalations_where_the_guard_state_is():
    assert store_location(parse_config({})) == db_path(parse_config({}).escalations)
    fleet = parse_config({"storage": {"url": "redis://:pw@10.0.0.5:6379/2", "key_prefix": "prod", "timeout_ms": 100}})
    assert store_location(fleet) == RedisLocation("redis://:pw@10.0.0.5:6379/2", "prod", 0.1)
    assert str(store_location(fleet)) == "Redis at redis://:***@10.0.0.5:6379/2, prefix prod"
    assert "pw" not in repr(store_location(fleet))
    pinned = parse_config({"storage": {"url": "redis://10.0.0.5/0"}, "escalations": {"store": "sqlite", "db": "/srv/e.db"}})
    assert isinstance(store_location(pinned), Path)
    cli_over = store_location(parse_config({}), redis_url="rediss://cache:6380/1", prefix="p")
    assert cli_over == RedisLocation("rediss://cache:6380/1", "p", 0.25)
    assert store_location(fleet, db="/tmp/e.db") == Path("/tmp/e.db")


@pytest.mark.parametrize(
    ("config", "kw", "message"),
    [
        ({"escalations": {"store": "redis"}}, {}, "storage.url (escalations.store is redis) must be a redis://"),
        ({}, {"redis_url": "http://user:s3cret@host/"}, "--redis must be a redis://"),
        ({}, {"db": "/tmp/e.db", "redis_url": "redis://h/0"}, "one or the other"),
        ({}, {"prefix": "p"}, "--prefix names keys on a Redis"),
    ],
)
def test_a_store_that_cannot_be_is_a_config_error_naming_why(config, kw, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as caught:
        store_location(parse_config(config), **kw)
    assert "s3cret" not in str(caught.value)


def test_where_escalations_live_is_process_level():
    with pytest.raises(ConfigError, match="process-level"):
        parse_config({"overrides": [{"tenant": "acme", "settings": {"escalations": {"store": "redis"}}}]})
    with pytest.raises(ConfigError, match="store"):
        parse_config({"escalations": {"store": "postgres"}})


def test_store_for_opens_the_store_a_config_names(tmp_path):
    redis_or_skip()
    prefix = f"abesc-{uuid.uuid4().hex[:12]}"
    fleet = store_for(parse_config({"storage": {"url": REDIS_URL, "key_prefix": prefix}}))
    local = store_for(parse_config({"escalations": {"db": str(tmp_path / "e.db"), "db_env": None, "max_open_per_tenant": 7}}))
    try:
        assert isinstance(fleet, RedisEscalations) and fleet.prefix == prefix
        assert isinstance(local, SqliteEscalations) and local.path == tmp_path / "e.db"
        assert (fleet.max_open_per_tenant, local.max_open_per_tenant) == (DEFAULT_MAX_OPEN_PER_TENANT, 7)
    finally:
        fleet.close()
        local.close()
        drop_prefix(prefix)
