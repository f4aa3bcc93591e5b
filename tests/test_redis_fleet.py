"""The Redis store as a fleet uses it: many worker processes on one tool, Redis going away and
coming back, the failure policies, and spend ceilings shared across workers."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import uuid

import pytest
from _redis import RedisServer
from conftest import REDIS_URL, redis_or_skip

from agent_breaker import Engine, FakeClock, ReceiptKeys

WORKERS = 8
THRESHOLD = 5


def fleet_worker(url: str | None, prefix: str, calls: int, barrier, results) -> None:
    """One worker process: calls a dead tool until its breaker refuses; reports how many calls
    reached the tool. url None: in-process state (no sharing)."""
    from agent_breaker.store import MemoryStore
    from agent_breaker.store.redis import RedisStore

    store = RedisStore(url, prefix=prefix) if url else MemoryStore()
    engine = Engine(
        {"breaker": {"consecutive_failures": THRESHOLD}}, store=store, listeners=[], receipt_keys=ReceiptKeys.ephemeral()
    )
    barrier.wait()
    reached = 0
    for i in range(calls):
        session = f"{os.getpid()}-{i}"
        v = engine.check_tool_call({"session": session, "tool": "dead_api", "args": {"i": i}})
        if v.allowed:
            reached += 1  # this call hit the dead upstream
            engine.record_tool_result(
                {"session": session, "tool": "dead_api", "ok": False, "error": "HTTP 503", "call_id": v.call_id}
            )
    results.put(reached)
    if url:
        store.close()


def run_fleet(url: str | None, prefix: str, calls: int = 20) -> int:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(WORKERS)
    results = ctx.Queue()
    procs = [ctx.Process(target=fleet_worker, args=(url, prefix, calls, barrier, results)) for _ in range(WORKERS)]
    for p in procs:
        p.start()
    reached = sum(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    return reached


def test_a_tool_failing_in_one_worker_is_open_in_all_of_them():
    redis_or_skip()
    prefix = f"abfleet-{uuid.uuid4().hex[:12]}"
    try:
        shared = run_fleet(REDIS_URL, prefix)
    finally:
        from agent_breaker.store.redis import RedisStore

        cleanup = RedisStore(REDIS_URL, prefix=prefix, listen=False)
        cleanup.delete_all()
        cleanup.close()
    local = run_fleet(None, "")
    print(
        f"\ncalls that reached the dead tool, {WORKERS} workers, threshold {THRESHOLD}: "
        f"Redis store {shared} (bound: threshold + workers = {THRESHOLD + WORKERS}); "
        f"in-process stores {local} (threshold x workers = {THRESHOLD * WORKERS})"
    )
    assert THRESHOLD <= shared <= THRESHOLD + WORKERS
    assert local == THRESHOLD * WORKERS


# ------------------------------------------------------------------ Redis down and back


@pytest.fixture
def own_redis():
    server = RedisServer()
    server.start()
    yield server
    server.stop()


def engine_on(url: str, policy: str, clock: FakeClock) -> Engine:
    config = {"storage": {"url": url, "on_error": policy, "timeout_ms": 100, "retry_s": 0.001, "key_prefix": "abfault"}}
    return Engine(config, clock=clock, listeners=[], receipt_keys=ReceiptKeys.ephemeral())


def calls(engine: Engine, clock: FakeClock, n: int, session: str, start: int = 0) -> list:
    """Legitimate work: searches for new things, each answered with hits of its own (an answer
    that only gave back the query's value, {"n": i} for {"q": i}, would be the same answer each
    time: same_answer)."""
    out = []
    for i in range(start, start + n):
        clock.advance(5)
        v = engine.check_tool_call({"session": session, "tool": "search", "args": {"q": i}})
        if v.allowed:
            engine.record_tool_result(
                {"session": session, "tool": "search", "ok": True, "result": {"hits": [f"doc-{i}"]}, "call_id": v.call_id}
            )
        out.append(v)
    return out


def within(seconds: float, fn):
    """Run fn in a thread; fail if it has not returned after `seconds` (it hung)."""
    box: dict = {}
    t = threading.Thread(target=lambda: box.setdefault("out", fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"no answer after {seconds}s: a decision hung on Redis"
    return box["out"]


def test_local_policy_keeps_guarding_while_redis_is_down_and_resumes_when_it_is_back(own_redis):
    clock = FakeClock()
    engine = engine_on(own_redis.url, "local", clock)
    assert all(v.allowed for v in calls(engine, clock, 5, "s1"))
    own_redis.stop()
    down = within(30, lambda: calls(engine, clock, 10, "s2", 100))
    assert all(v.allowed for v in down)  # legitimate work goes on
    # the in-process fallback still guards: a retry loop while Redis is down is cut

    def loop():
        verdicts = []
        for _ in range(5):
            clock.advance(2)
            v = engine.check_tool_call({"session": "s3", "tool": "t", "args": {}})
            if v.allowed:
                engine.record_tool_result({"session": "s3", "tool": "t", "ok": False, "call_id": v.call_id})
            verdicts.append(v)
        return verdicts

    looped = within(30, loop)
    # warned at the fourth call (it runs), cut at the fifth
    assert [(v.allowed, v.heuristic) for v in looped] == [(True, None)] * 3 + [
        (True, "identical_failure"),
        (False, "identical_failure"),
    ]
    assert looped[3].advisory
    assert engine.store.failures > 0
    own_redis.start()
    back = within(30, lambda: calls(engine, clock, 3, "s4", 200))
    assert all(v.allowed for v in back)
    assert engine.store.peek_session("s4") is not None  # written to Redis again
    engine.store.close()


def test_fail_closed_refuses_calls_while_redis_is_down(own_redis):
    clock = FakeClock()
    engine = engine_on(own_redis.url, "fail_closed", clock)
    assert all(v.allowed for v in calls(engine, clock, 3, "s1"))
    own_redis.stop()
    down = within(30, lambda: calls(engine, clock, 3, "s1", 10))
    assert [(v.allowed, v.heuristic) for v in down] == [(False, "storage_unavailable")] * 3
    own_redis.start()
    assert within(30, lambda: calls(engine, clock, 1, "s5", 20))[0].allowed
    engine.store.close()


def test_fail_open_lets_calls_through_with_a_warning_while_redis_is_down(own_redis):
    clock = FakeClock()
    engine = engine_on(own_redis.url, "fail_open", clock)
    own_redis.stop()
    down = within(30, lambda: calls(engine, clock, 3, "s1"))
    assert [(v.allowed, v.heuristic, v.severity) for v in down] == [(True, "storage_unavailable", "warn")] * 3
    engine.store.close()


def test_a_spend_ceiling_holds_across_workers(store_kind, shared_store):
    clock = FakeClock()
    config = {"global_budget": {"max_tokens": 50_000, "window_s": 3600}, "budget": {"max_tokens": None}}
    if shared_store is None:  # in process: two engines on one store stand in for two workers
        from agent_breaker.store import MemoryStore

        store_a = store_b = MemoryStore()
    elif store_kind == "sqlite":  # another process's store on the same file
        from agent_breaker.store.sqlite import SQLiteStore

        store_a, store_b = shared_store, SQLiteStore(f"sqlite:///{shared_store.path}")
    else:
        from agent_breaker.store.redis import RedisStore

        store_a, store_b = shared_store, RedisStore(shared_store.url, prefix=shared_store.prefix, listen=False)
    a = Engine(config, store=store_a, clock=clock, listeners=[], receipt_keys=ReceiptKeys.ephemeral())
    b = Engine(config, store=store_b, clock=clock, listeners=[], receipt_keys=ReceiptKeys.ephemeral())
    verdicts = []
    for i in range(8):
        engine = a if i % 2 else b
        clock.advance(1)
        verdicts.append(
            engine.check_tool_call(
                {"session": f"s{i}", "tenant": "acme", "feature": "ops", "tool": "t", "args": {"i": i}, "input_tokens": 10_000}
            )
        )
    # 10k tokens a step: the 6th step takes the tenant's window to 60k > 50k
    assert [v.heuristic for v in verdicts] == [None] * 5 + ["global_budget"] * 3
    assert verdicts[5].scope == "call" and verdicts[5].observation["retry_after_s"] > 0
    other = a.check_tool_call(
        {"session": "x", "tenant": "globex", "feature": "ops", "tool": "t", "args": {}, "input_tokens": 10_000}
    )
    assert other.allowed
    if store_b is not store_a:
        assert getattr(store_b, "failures", 0) == 0  # ran on Redis, as conftest checks of store_a
        store_b.close()
