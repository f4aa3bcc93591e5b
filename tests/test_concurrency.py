"""Exact counts under concurrency: many threads (or tasks) released together against one
breaker or one session. Every assertion holds for every interleaving."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from conftest import OUTAGE, call, result

from agent_breaker import BreakerStateName, MemoryStore
from agent_breaker.breaker import Transition
from agent_breaker.config import BreakerConfig

S = BreakerStateName
T0 = 1_000_000.0
TOOL = "fetch_page"


@pytest.fixture(autouse=True)
def tiny_switch_interval():
    """Switch threads every microsecond instead of every 5 ms, so the racing calls really
    interleave (with the default, each thread tends to finish before the next one starts)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def race(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Run fn(0..n-1) on n threads released together by a barrier; results in index order.
    Any exception in a thread fails the test."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert errors == []
    return results


class RecordingStore(MemoryStore):
    """A MemoryStore that keeps every breaker transition it returned."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.transitions: list[Transition] = []

    def breaker_acquire(self, key, cfg, now):
        p = super().breaker_acquire(key, cfg, now)
        if p.transition is not None:
            self.transitions.append(p.transition)
        return p

    def breaker_record(self, key, cfg, now, *, failed, slow, probe, session=None):
        recorded = super().breaker_record(key, cfg, now, failed=failed, slow=slow, probe=probe, session=session)
        if recorded.transition is not None:
            self.transitions.append(recorded.transition)
        return recorded


def open_store_breaker(store: MemoryStore, c: BreakerConfig, now: float = T0) -> None:
    for _ in range(c.consecutive_failures):
        store.breaker_record(TOOL, c, now, failed=True, slow=False, probe=None)
    assert store.breaker_state(TOOL).state is S.OPEN


# ------------------------------------------------------------------ store level


@pytest.mark.parametrize("k", [1, 3, 7])
def test_hundred_threads_on_an_elapsed_open_breaker_admit_exactly_k_probes(k):
    c = BreakerConfig(half_open_probes=k, open_s=30.0)
    store = MemoryStore()
    open_store_breaker(store, c)
    now = T0 + 30.0
    perms = race(100, lambda i: store.breaker_acquire(TOOL, c, now))
    admitted = [p for p in perms if p.allowed]
    assert len(admitted) == k
    assert all(p.probe is not None and p.state is S.HALF_OPEN for p in admitted)
    assert len({p.probe for p in admitted}) == k  # each probe has its own id
    refused = [p for p in perms if not p.allowed]
    assert len(refused) == 100 - k
    assert all(p.state is S.HALF_OPEN and p.probe is None for p in refused)
    # exactly one caller moved it OPEN -> HALF_OPEN
    moved = [p.transition for p in perms if p.transition is not None]
    assert [(t.src, t.dst) for t in moved] == [(S.OPEN, S.HALF_OPEN)]
    assert sorted(pid for pid, _ in store.breaker_state(TOOL).probes) == sorted(p.probe for p in admitted)


def test_hundred_threads_on_a_half_open_breaker_fill_only_the_free_probe_slots():
    c = BreakerConfig(half_open_probes=4, open_s=30.0)
    store = MemoryStore()
    open_store_breaker(store, c)
    first = store.breaker_acquire(TOOL, c, T0 + 30.0).probe  # 1 of 4 slots taken
    assert first is not None
    store.breaker_record(TOOL, c, T0 + 31.0, failed=False, slow=False, probe=first)  # 1 success
    assert store.breaker_acquire(TOOL, c, T0 + 31.0).probe is not None  # 1 in flight
    assert store.breaker_state(TOOL).state is S.HALF_OPEN
    perms = race(100, lambda i: store.breaker_acquire(TOOL, c, T0 + 32.0))
    assert sum(p.allowed for p in perms) == 2
    assert all(p.transition is None for p in perms)


@pytest.mark.parametrize("n", [1, 5, 37])
def test_hundred_concurrent_failures_open_a_closed_breaker_exactly_once(n):
    c = BreakerConfig(consecutive_failures=n, failure_rate_pct=None)
    store = MemoryStore()
    transitions = race(100, lambda i: store.breaker_record(TOOL, c, T0, failed=True, slow=False, probe=None).transition)
    moved = [t for t in transitions if t is not None]
    assert len(moved) == 1
    assert (moved[0].src, moved[0].dst) == (S.CLOSED, S.OPEN)
    st = store.breaker_state(TOOL)
    assert st.state is S.OPEN
    # failures after the trip land on an OPEN breaker and are ignored
    assert st.consecutive_failures == n
    assert st.window.read(T0)[:2] == [float(n), float(n)]  # calls, failures


def test_concurrent_probe_results_close_a_half_open_breaker_exactly_once():
    k = 8
    c = BreakerConfig(half_open_probes=k, open_s=30.0)
    store = RecordingStore()
    open_store_breaker(store, c)
    perms = race(k, lambda i: store.breaker_acquire(TOOL, c, T0 + 30.0))
    assert all(p.probe is not None for p in perms)
    assert len({p.probe for p in perms}) == k
    # each thread hands back the id of the probe it was admitted as
    closed = race(
        k, lambda i: store.breaker_record(TOOL, c, T0 + 31.0, failed=False, slow=False, probe=perms[i].probe).transition
    )
    assert [(t.src, t.dst) for t in closed if t is not None] == [(S.HALF_OPEN, S.CLOSED)]
    assert store.breaker_state(TOOL).state is S.CLOSED


# ------------------------------------------------------------------ engine level


def test_fifty_sessions_failing_concurrently_open_the_breaker_after_exactly_ten_failures(make_engine, clock, incidents):
    store = RecordingStore()
    engine = make_engine({"breaker": {"consecutive_failures": 10, "failure_rate_pct": None}}, store=store)

    def one(i: int):
        session = f"s{i}"
        v = engine.check_tool_call(call(TOOL, {"page": f"https://x/{i}"}, session=session))
        r = None
        if v.allowed:
            r = engine.record_tool_result(result(TOOL, False, None, call_id=v.call_id, session=session, error=OUTAGE))
        return v, r

    out = race(50, one)
    verdicts = [v for v, _ in out]
    results = [r for _, r in out if r is not None]
    allowed = sum(v.allowed for v in verdicts)

    assert engine.operator.breaker_state(TOOL) is S.OPEN
    # exactly one trip, made by the 10th failure recorded while CLOSED
    assert [(t.src, t.dst) for t in store.transitions] == [(S.CLOSED, S.OPEN)]
    assert store.transitions[0].reason == "10 failures in a row (threshold 10)"
    st = store.breaker_state(engine.operator.breaker_key(TOOL))
    assert st.consecutive_failures == 10
    assert st.window.read(clock.now())[:2] == [10.0, 10.0]  # calls, failures
    # each result is recorded atomically with the breaker state it reports
    states = Counter(r.breaker_state for r in results)
    assert states == Counter({"closed": 9, "open": allowed - 9})
    assert all(r.failed for r in results)
    # the other calls were refused by the breaker, each with one incident
    blocked = [v for v in verdicts if not v.allowed]
    assert len(blocked) == 50 - allowed
    assert all((v.heuristic, v.scope) == ("circuit_open", "tool") for v in blocked)
    assert sorted(i.session for i in incidents) == sorted(f"s{j}" for j, (v, _) in enumerate(out) if not v.allowed)
    assert allowed >= 10


def _half_open_engine(make_engine, clock, k: int):
    engine = make_engine({"breaker": {"open_s": 30.0, "half_open_probes": k}})
    for i in range(5):
        v = engine.check_tool_call(call(TOOL, {"page": f"https://x/fail/{i}"}, session=f"f{i}"))
        assert v.allowed
        engine.record_tool_result(result(TOOL, False, None, call_id=v.call_id, session=f"f{i}", error=OUTAGE))
    assert engine.operator.breaker_state(TOOL) is S.OPEN
    clock.advance(30.0)
    return engine


@pytest.mark.parametrize("mode", ["to_thread", "coroutine"])
@pytest.mark.parametrize("k", [1, 3])
def test_hundred_asyncio_tasks_on_a_half_open_tool_get_exactly_k_calls_through(make_engine, clock, mode, k):
    engine = _half_open_engine(make_engine, clock, k)

    def check(i: int):
        return engine.check_tool_call(call(TOOL, {"page": f"https://x/probe/{i}"}, session=f"p{i}"))

    async def task(i: int):
        if mode == "to_thread":
            return await asyncio.to_thread(check, i)
        await asyncio.sleep(0)  # interleave the tasks
        return check(i)

    async def main():
        return await asyncio.gather(*(task(i) for i in range(100)))

    verdicts = asyncio.run(main())
    assert sum(v.allowed for v in verdicts) == k
    refused = [v for v in verdicts if not v.allowed]
    assert len(refused) == 100 - k
    assert all((v.heuristic, v.scope) == ("circuit_half_open", "tool") for v in refused)
    assert engine.operator.breaker_state(TOOL) is S.HALF_OPEN


def test_one_session_hammered_by_identical_failing_calls_stays_consistent(make_engine, clock, incidents):
    engine = make_engine()
    args = {"query": "SELECT * FROM missing_table"}

    def one(i: int):
        v = engine.check_tool_call(call(TOOL, args))
        if v.allowed:
            r = engine.record_tool_result(result(TOOL, False, {"error": "no such table"}, call_id=v.call_id))
            assert r.failed and r.reason == ""  # the result found its pending call
        return v

    verdicts = race(20, one)
    allowed = sum(v.allowed for v in verdicts)
    blocked = [v for v in verdicts if not v.allowed]

    s = engine.store.peek_session("s1")
    assert s.loops.pending == {}  # every admitted call got its result
    assert s.loops.auto_ids == allowed
    [streak] = s.failures.calls.values()
    assert streak.run == allowed  # every recorded result failed, all the same call
    assert s.loops.keys[next(iter(s.failures.calls))].runs == allowed
    # nothing trips before 3 identical failures are recorded, and each needs an admitted call;
    # a trip only warns (its call runs) until a call made since the first warning has answered,
    # whatever the interleaving: racing calls are the parallel calls of one turn
    warned = [v for v in verdicts if v.allowed and v.heuristic is not None]
    assert all(v.heuristic == "identical_failure" and v.advisory for v in warned)
    assert allowed >= 3 + len(warned)
    assert len(blocked) == 20 - allowed
    assert all(v.heuristic == "identical_failure" and not v.advisory for v in blocked)
    if blocked:
        assert warned
        assert s.halted is not None and s.halted[0] == "identical_failure"
        # each call tells its listeners after its own write: racing calls may tell in either order
        told = sorted((i.heuristic, i.severity) for i in incidents)
        assert told == [("identical_failure", "block")] + [("identical_failure", "warn")] * len(warned)
    else:
        assert s.halted is None
        assert [(i.heuristic, i.severity) for i in incidents] == [("identical_failure", "warn")] * len(warned)
    # the call's own failures (a missing table) are no outage: the shared breaker counted none
    st = engine.store.breaker_state(engine.operator.breaker_key(TOOL))
    assert (st.consecutive_failures, st.state) == (0, S.CLOSED)
