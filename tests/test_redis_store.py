"""Redis store details that the engine-level contract suite does not reach."""

from __future__ import annotations

import uuid

import pytest
from conftest import REDIS_URL, redis_or_skip, run

from agent_breaker import Engine, FakeClock, MemoryStore, ReceiptKeys
from agent_breaker._state import SessionState
from agent_breaker.breaker import BreakerStateName as S
from agent_breaker.config import BreakerConfig
from agent_breaker.store import CorruptState


def test_each_new_breaker_config_is_honoured_by_a_long_lived_store(redis_store):
    # configs come and go (overrides, rebuilt engines): the store must never mistake one for another
    for n in range(1, 21):
        cfg = BreakerConfig(consecutive_failures=n, failure_rate_pct=None)
        key = f"tool-{n}"
        for _ in range(n - 1):
            redis_store.breaker_record(key, cfg, 1000.0, failed=True, slow=False, probe=None)
        before = redis_store.breaker_state(key)
        assert before is None or before.state is S.CLOSED
        assert redis_store.breaker_record(key, cfg, 1000.0, failed=True, slow=False, probe=None).state is S.OPEN
        del cfg


def test_window_buckets_are_cut_the_same_way_in_lua_and_python(redis_store):
    cfg = BreakerConfig(window_s=1.0, bucket_s=0.1, failure_threshold=2, consecutive_failures=None, failure_rate_pct=None)
    memory = MemoryStore()
    for store in (memory, redis_store):
        store.breaker_record("t", cfg, 0.0, failed=True, slow=False, probe=None)
        store.breaker_record("t", cfg, 0.95, failed=False, slow=False, probe=None)
        store.breaker_record("t", cfg, 1.0, failed=True, slow=False, probe=None)
    assert redis_store.breaker_state("t").state is memory.breaker_state("t").state


@pytest.mark.parametrize(
    "value",
    [b'[999,7,"from another version"]', b"not json at all", b"[3, 1, {}]", b'{"a": 1}', b"\xff\xfe"],
    ids=["other_format", "not_json", "missing_slices", "an_object", "not_utf8"],
)
def test_an_unreadable_stored_session_refuses_that_session_only(redis_store, value):
    engine = Engine(store=redis_store, clock=FakeClock(), listeners=[], receipt_keys=ReceiptKeys.ephemeral())
    halted = {"session": "s1", "tool": "t", "args": {}}
    redis_store.redis.set(redis_store.session_key("s1"), value)
    for _ in range(2):  # never replaced: a halt may be in it
        verdict = engine.check_tool_call(halted)
        assert (verdict.allowed, verdict.heuristic) == (False, "corrupt_state"), verdict
        assert redis_store.session_key("s1") in verdict.reason
    assert redis_store.redis.get(redis_store.session_key("s1")) == value
    # the rest of the fleet stays on Redis
    assert engine.check_tool_call({"session": "s2", "tool": "t", "args": {}}).allowed
    assert redis_store.failures == 0 and redis_store.peek_session("s2").spend.steps == 1
    # deleting the key, as the reason says, resets it
    redis_store.redis.delete(redis_store.session_key("s1"))
    assert engine.check_tool_call(halted).allowed


OTHER_TYPES = {
    "a list": lambda r, key: r.rpush(key, "x"),
    "a hash": lambda r, key: r.hset(key, "f", "x"),
    "a set": lambda r, key: r.sadd(key, "x"),
    "a sorted set": lambda r, key: r.zadd(key, {"x": 1.0}),
}


@pytest.mark.parametrize("kind", list(OTHER_TYPES))
def test_a_stored_session_of_another_type_refuses_that_session_only(redis_store, kind):
    """A key turned into a list (or a hash...) is that key's corrupt state, not Redis down: a
    fresh worker, which would fall back to in-process state, refuses it too."""
    engine = Engine(store=redis_store, clock=FakeClock(), listeners=[], receipt_keys=ReceiptKeys.ephemeral())
    halted = {"session": "s1", "tool": "t", "args": {}}
    OTHER_TYPES[kind](redis_store.redis, redis_store.session_key("s1"))
    for _ in range(2):
        verdict = engine.check_tool_call(halted)
        assert (verdict.allowed, verdict.heuristic) == (False, "corrupt_state"), verdict
    with pytest.raises(CorruptState):
        redis_store.peek_session("s1")
    assert engine.check_tool_call({"session": "s2", "tool": "t", "args": {}}).allowed
    assert redis_store.failures == 0
    redis_store.redis.delete(redis_store.session_key("s1"))
    assert engine.check_tool_call(halted).allowed


@pytest.mark.parametrize("kind", list(OTHER_TYPES))
def test_a_stored_breaker_of_another_type_refuses_that_tool_only(redis_store, kind):
    engine = Engine(store=redis_store, clock=FakeClock(), listeners=[], receipt_keys=ReceiptKeys.ephemeral())
    engine.operator.force_breaker("payments_api", "forced_open")
    key = engine.operator.breaker_key("payments_api")
    redis_store.redis.delete(redis_store.breaker_key(key))
    OTHER_TYPES[kind](redis_store.redis, redis_store.breaker_key(key))
    verdict = engine.check_tool_call({"session": "s1", "tool": "payments_api", "args": {}})
    assert (verdict.allowed, verdict.heuristic) == (False, "corrupt_state"), verdict
    assert engine.check_tool_call({"session": "s1", "tool": "search", "args": {}}).allowed
    assert redis_store.failures == 0


@pytest.mark.parametrize(
    "value",
    [b"{not json", b'{"state": "bogus", "probes": {}}', b'{"state": "forced_open"}', b"[]", b'"forced_open"'],
    ids=["not_json", "unknown_state", "missing_fields", "a_list", "a_string"],
)
def test_an_unreadable_stored_breaker_refuses_that_tool_only(redis_store, value):
    engine = Engine(store=redis_store, clock=FakeClock(), listeners=[], receipt_keys=ReceiptKeys.ephemeral())
    engine.operator.force_breaker("payments_api", "forced_open")
    key = engine.operator.breaker_key("payments_api")
    redis_store.redis.set(redis_store.breaker_key(key), value)
    verdict = engine.check_tool_call({"session": "s1", "tool": "payments_api", "args": {}})
    assert (verdict.allowed, verdict.heuristic) == (False, "corrupt_state"), verdict
    assert engine.check_tool_call({"session": "s1", "tool": "search", "args": {}}).allowed
    assert redis_store.failures == 0
    assert key not in [k for k, _ in redis_store.breaker_list()]  # listed by none, refused still
    with pytest.raises(CorruptState):
        redis_store.breaker_state(key)


def test_operator_reads_and_moves_do_not_leak_driver_errors_when_redis_is_down():
    redis_or_skip()
    from agent_breaker.store.redis import RedisStore

    # a port nothing listens on: every command fails at once
    store = RedisStore("redis://127.0.0.1:1/0", prefix="abdown", listen=False, timeout_s=0.05, retry_s=0.0)
    engine = Engine(store=store, clock=FakeClock(), listeners=[], receipt_keys=ReceiptKeys.ephemeral())
    assert engine.operator.breaker_state("t") is S.CLOSED
    engine.operator.force_breaker("t", "forced_open")
    assert engine.operator.breaker_state("t") is S.FORCED_OPEN  # held locally while Redis is away
    assert engine.store.peek_session("nobody") is None
    assert store.failures > 0
    store.close()


def test_a_workers_copies_of_fleet_sessions_stay_within_its_byte_budget():
    """The mirror a worker keeps of sessions it used (for an outage) holds at most a quarter of
    sessions.max_bytes, and the last written states it decides from (as objects) an eighth by
    weight, however many heavy sessions one tenant makes; the outage state the rest."""
    redis_or_skip()
    from agent_breaker.store.redis import RedisStore

    budget = 4 << 20
    store = RedisStore(REDIS_URL, prefix=f"abunit-{uuid.uuid4().hex[:12]}", listen=False, max_bytes=budget)
    clock = FakeClock(1_000_000.0)
    engine = Engine(store=store, clock=clock, listeners=[], receipt_keys=ReceiptKeys.parse("k1:" + "ab" * 32, source="test"))
    try:
        assert (store.mirror_bytes, store.written_bytes) == (budget // 4, budget // 8)
        assert store._local.max_bytes == budget - budget // 4 - budget // 8
        for i in range(150):  # each session cites 1,000 ids: about 20 KB encoded, 3 MB in all
            ids = " ".join(f"ORD-{i * 1000 + j}" for j in range(1000))
            run(engine, clock, "get_orders", {"page": i}, True, {"text": ids}, session=f"heavy-{i}")
        assert 0 < store._sessions_seen_bytes <= budget // 4
        assert len(store._sessions_seen) < 150  # the oldest went
        assert 0 < store._written_weight <= budget // 8
        assert store._written_weight == sum(weight for _, weight in store._written.values())
        assert len(store._written) < 128  # the weight bound, before the count
    finally:
        store.delete_all()
        store.close()


HALT = ("step_limit", "halted by another worker")


def halted(state):
    state.halted = HALT
    return state, None


def _counting_reads(store):
    reads = []
    get = store._get

    def counted(key):
        reads.append(key)
        return get(key)

    store._get = counted
    return reads


def test_a_worker_decides_from_its_own_last_write_and_still_sees_another_workers(redis_store):
    """A session update starts from this worker's last copy without a read; a write by another
    worker since (a halt) fails the compare-and-set, and the update is decided again on it."""
    from agent_breaker.store.redis import RedisStore

    other = RedisStore(REDIS_URL, prefix=redis_store.prefix, listen=False, near_cache_s=0.0)
    try:
        engine = Engine(store=redis_store, clock=FakeClock(), listeners=[], receipt_keys=ReceiptKeys.ephemeral())
        call = {"session": "s1", "tool": "t", "args": {}}
        assert engine.check_tool_call(call).allowed
        reads = _counting_reads(redis_store)
        session_reads = lambda: [k for k in reads if k == redis_store.session_key("s1")]
        assert engine.check_tool_call({**call, "args": {"n": 2}}).allowed
        assert session_reads() == []  # its own last write: no read
        other.update_session("s1", 0.0, halted)
        verdict = engine.check_tool_call({**call, "args": {"n": 3}})
        assert (verdict.allowed, verdict.heuristic) == (False, "step_limit"), verdict
        assert len(session_reads()) == 1
    finally:
        other.close()


def test_a_decision_that_writes_nothing_is_made_on_a_fresh_read(redis_store):
    """No compare-and-set checks a decision that writes nothing, so it is never made on the
    worker's own copy: a halt another worker wrote is seen."""
    from agent_breaker.store.redis import RedisStore

    other = RedisStore(REDIS_URL, prefix=redis_store.prefix, listen=False, near_cache_s=0.0)
    try:
        redis_store.update_session("s1", 0.0, lambda state: (state or SessionState("s1"), None))
        other.update_session("s1", 0.0, halted)
        assert redis_store.update_session("s1", 0.0, lambda state: (None, state.halted)) == HALT
    finally:
        other.close()


def test_a_decision_that_fails_halfway_leaves_no_trace_in_the_next_one(redis_store):
    """The next update starts from the worker's own last written state: one that a failing
    decision had changed before it raised must not be it."""

    def step(state):
        state = state or SessionState("s1")
        state.spend.steps += 1
        return state, state.spend.steps

    assert redis_store.update_session("s1", 0.0, step) == 1

    def broken(state):
        state.spend.steps += 100
        raise RuntimeError("the decision failed")

    with pytest.raises(RuntimeError):
        redis_store.update_session("s1", 0.0, broken)
    assert redis_store.update_session("s1", 0.0, step) == 2
