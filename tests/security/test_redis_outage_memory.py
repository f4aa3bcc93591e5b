"""Redis away and back (on_error="local"): what a worker knew before the outage stays in force
during it, and what it did during the outage reaches Redis when it is back, once.

Each test runs its own redis-server (stopped by its PID) and a FakeClock for engine time. A
worker whose Redis is cut off while the data stays (another worker still reaching it) is made
with an ACL user that the test disables and kills. Recovery is `RedisStore.resync()`, called
directly: retry_s is an hour, so the store never tries on its own and no test waits.
"""

from __future__ import annotations

import pytest
from conftest import OUTAGE
from test_redis_fleet import RedisServer

from agent_breaker import Engine, FakeClock, ReceiptKeys
from agent_breaker.breaker import BreakerStateName as S

redis = pytest.importorskip("redis")
from agent_breaker.store.redis import CHANNEL, RedisStore  # noqa: E402

KEYS = ReceiptKeys("k1", {"k1": b"k" * 32})
PREFIX = "about"
USER, PASSWORD = "worker", "worker-password"
BREAKER = {"breaker": {"consecutive_failures": 3, "failure_threshold": None, "failure_rate_pct": None, "open_s": 60}}
BUDGET = {"global_budget": {"max_tokens": 1_000_000, "window_s": 3600}}


class Fleet:
    """One redis-server, the workers on it, and a switch that cuts one worker off."""

    def __init__(self) -> None:
        self.server = RedisServer()
        self.server.start()
        self.admin = redis.Redis.from_url(self.server.url, socket_timeout=5)
        try:
            self.admin.execute_command("ACL", "SETUSER", USER, "on", f">{PASSWORD}", "~*", "&*", "+@all")
        except BaseException:
            self.server.stop()
            raise
        self.clock = FakeClock()
        self.stores: list[RedisStore] = []

    def worker(self, config: dict | None = None, *, cut_off_able: bool = False) -> Engine:
        url = self.server.url
        if cut_off_able:
            url = f"redis://{USER}:{PASSWORD}@127.0.0.1:{self.server.port}/0"
        store = RedisStore(url, prefix=PREFIX, on_error="local", retry_s=3600.0, timeout_s=0.5, listen=False)
        self.stores.append(store)
        return Engine(config or {}, store=store, clock=self.clock, listeners=[], receipt_keys=KEYS)

    def cut_off(self) -> None:
        """The cut-off-able worker loses Redis; the data and every other worker keep it."""
        self.admin.execute_command("ACL", "SETUSER", USER, "off")
        self.admin.execute_command("CLIENT", "KILL", "USER", USER)

    def reconnect(self) -> None:
        self.admin.execute_command("ACL", "SETUSER", USER, "on")

    def close(self) -> None:
        for store in self.stores:
            store.close()
        self.admin.close()
        self.server.stop()


@pytest.fixture
def fleet():
    f = Fleet()
    yield f
    f.close()


def step(
    engine: Engine,
    clock: FakeClock,
    session: str,
    tool: str = "search",
    args: dict | None = None,
    ok: bool = True,
    tokens: int = 0,
    error: str | None = None,
):
    """One call and, if it is let through, its result (failing with `error`, if given)."""
    clock.advance(2)
    v = engine.check_tool_call({"session": session, "tool": tool, "args": args or {}, "input_tokens": tokens})
    if v.allowed:
        clock.advance(0.5)
        engine.record_tool_result(
            {"session": session, "tool": tool, "ok": ok, "result": {"n": 1} if ok else None, "call_id": v.call_id, "error": error}
        )
    return v


def halt_by_looping(engine: Engine, clock: FakeClock, session: str) -> None:
    """Three identical failures, the warned repeat (it runs and fails once more), then the cut."""
    verdicts = [step(engine, clock, session, "t", {}, ok=False) for _ in range(5)]
    assert [v.heuristic for v in verdicts] == [None, None, None, "identical_failure", "identical_failure"]
    assert [v.allowed for v in verdicts] == [True, True, True, True, False] and verdicts[3].advisory


def open_breaker(engine: Engine, clock: FakeClock, tool: str) -> None:
    verdicts = [step(engine, clock, f"{tool}-{i}", tool, {"i": i}, ok=False, error=OUTAGE) for i in range(4)]
    assert [v.heuristic for v in verdicts] == [None, None, None, "circuit_open"]


def refused(v, heuristic: str) -> bool:
    return not v.allowed and v.heuristic == heuristic


# ------------------------------------------------------------------ what was known stays in force


def test_a_session_halted_before_the_outage_stays_halted_during_it(fleet):
    a = fleet.worker()
    halt_by_looping(a, fleet.clock, "run")
    fleet.server.stop()
    v = step(a, fleet.clock, "run", "other_tool", {"x": 1})
    assert refused(v, "identical_failure") and "halted earlier" in v.reason
    assert a.store.failures > 0
    assert step(a, fleet.clock, "fresh").allowed  # other sessions go on


def test_a_breaker_this_worker_opened_before_the_outage_refuses_during_it(fleet):
    a = fleet.worker(BREAKER)
    open_breaker(a, fleet.clock, "flaky")
    fleet.server.stop()
    assert refused(step(a, fleet.clock, "later", "flaky", {"i": 99}), "circuit_open")
    assert a.operator.breaker_state("flaky") is S.OPEN
    assert step(a, fleet.clock, "later", "healthy").allowed


def test_a_breaker_another_worker_opened_and_broadcast_refuses_during_the_outage(fleet):
    a, b = fleet.worker(BREAKER), fleet.worker(BREAKER)
    listener = redis.Redis.from_url(fleet.server.url, socket_timeout=5).pubsub()
    listener.subscribe(CHANNEL)
    assert listener.get_message(timeout=5)["type"] == "subscribe"
    open_breaker(b, fleet.clock, "flaky")
    # what a's listener thread would hand over: a itself never called the tool
    msg = listener.get_message(timeout=5)
    a.store.on_broadcast(msg["data"])
    listener.close()
    fleet.server.stop()
    assert refused(step(a, fleet.clock, "later", "flaky", {"i": 99}), "circuit_open")


def test_a_breaker_another_worker_opened_and_the_script_reported_refuses_during_the_outage(fleet):
    a, b = fleet.worker(BREAKER), fleet.worker(BREAKER)
    open_breaker(b, fleet.clock, "flaky")
    assert refused(step(a, fleet.clock, "a1", "flaky", {"i": 50}), "circuit_open")  # learnt from the script
    fleet.server.stop()
    assert refused(step(a, fleet.clock, "a2", "flaky", {"i": 51}), "circuit_open")


def test_a_spend_window_keeps_its_fleet_total_during_the_outage(fleet):
    config = {"global_budget": {"max_tokens": 50_000, "window_s": 3600}, "budget": {"max_tokens": None}}
    a, b = fleet.worker(config), fleet.worker(config)
    assert step(b, fleet.clock, "b1", tokens=30_000).allowed
    assert step(a, fleet.clock, "a1", tokens=15_000).allowed  # the window: 45k of 50k
    fleet.server.stop()
    assert refused(step(a, fleet.clock, "a2", tokens=10_000), "global_budget")


# ------------------------------------------------------------------ what was done is written back


def test_steps_tokens_and_a_halt_taken_during_the_outage_reach_redis_and_other_workers(fleet):
    a = fleet.worker(BUDGET)
    for i in range(2):
        assert step(a, fleet.clock, "run", args={"q": i}, tokens=100).allowed
    fleet.server.stop()
    for i in range(2, 4):
        assert step(a, fleet.clock, "run", args={"q": i}, tokens=100).allowed
    halt_by_looping(a, fleet.clock, "run")
    local = a.store.peek_session("run")
    assert (local.spend.steps, local.spend.tokens, local.halted[0]) == (9, 400, "identical_failure")

    fleet.server.start()  # a new, empty server: Redis lost everything
    assert a.store.resync()
    b = fleet.worker(BUDGET)
    seen = b.store.peek_session("run")
    assert (seen.spend.steps, seen.spend.tokens, seen.halted[0]) == (9, 400, "identical_failure")
    assert refused(step(b, fleet.clock, "run", "other_tool"), "identical_failure")
    # the spend window died with the old server; what was spent during the outage is in the new one
    assert b.store.add_spend(":", 0, 0.0, 3600, fleet.clock.now())[0] == 200
    assert step(a, fleet.clock, "next").allowed and a.store.peek_session("next").spend.steps == 1  # on Redis again


def test_a_session_another_worker_moved_on_gets_this_workers_outage_spend_and_halt(fleet):
    a, b = fleet.worker(BUDGET, cut_off_able=True), fleet.worker(BUDGET)
    assert step(a, fleet.clock, "run", args={"q": 0}, tokens=100).allowed
    fleet.cut_off()
    assert step(a, fleet.clock, "run", args={"q": 1}, tokens=100).allowed
    halt_by_looping(a, fleet.clock, "run")  # 5 more steps, no tokens
    assert a.store.peek_session("run").spend.steps == 7
    assert step(b, fleet.clock, "run", args={"q": 2}, tokens=1_000).allowed  # b goes on with the session
    assert b.store.peek_session("run").halted is None

    fleet.reconnect()
    assert a.store.resync()
    seen = b.store.peek_session("run")
    # 1 before, 1 by b, 6 by a during the outage; tokens 100 + 1000 + 100
    assert (seen.spend.steps, seen.spend.tokens, seen.halted[0]) == (8, 1_200, "identical_failure")
    assert seen.spend.tool_tokens == {"search": 1_200}
    assert refused(step(b, fleet.clock, "run", "other_tool"), "identical_failure")
    assert b.store.add_spend(":", 0, 0.0, 3600, fleet.clock.now())[0] == 1_200


def test_a_session_nobody_else_wrote_is_written_back_whole(fleet):
    a = fleet.worker(cut_off_able=True)
    assert step(a, fleet.clock, "run").allowed
    fleet.cut_off()
    fleet.clock.advance(1)
    waiting = a.check_tool_call({"session": "run", "tool": "slow_job", "args": {}})
    assert waiting.allowed
    for _ in range(2):
        assert step(a, fleet.clock, "run", "t", {}, ok=False).allowed
    fleet.reconnect()
    assert a.store.resync()
    # the loop goes on counting, and the call let through during the outage still awaits its result
    assert step(a, fleet.clock, "run", "t", {}, ok=False).allowed
    warned = step(a, fleet.clock, "run", "t", {}, ok=False)  # the first trip warns: the call runs
    assert warned.allowed and warned.advisory and warned.heuristic == "identical_failure"
    assert refused(step(a, fleet.clock, "run", "t", {}, ok=False), "identical_failure")
    fleet.clock.advance(1)
    done = a.record_tool_result(
        {"session": "run", "tool": "slow_job", "ok": True, "result": {"n": 1}, "call_id": waiting.call_id}
    )
    assert done.accepted and done.heuristic is None


def test_breaker_failures_recorded_during_the_outage_reach_the_redis_breaker(fleet):
    a, b = fleet.worker(BREAKER, cut_off_able=True), fleet.worker(BREAKER)
    fleet.cut_off()
    open_breaker(a, fleet.clock, "flaky")  # opens a's in-process breaker
    assert b.operator.breaker_state("flaky") is S.CLOSED
    fleet.reconnect()
    assert a.store.resync()
    assert b.operator.breaker_state("flaky") is S.OPEN
    assert refused(step(b, fleet.clock, "b1", "flaky", {"i": 7}), "circuit_open")


def test_breaker_failures_during_the_outage_add_to_failures_other_workers_recorded(fleet):
    a, b = fleet.worker(BREAKER, cut_off_able=True), fleet.worker(BREAKER)
    assert step(b, fleet.clock, "b0", "flaky", {"i": 0}, ok=False, error=OUTAGE).allowed
    fleet.cut_off()
    for i in (1, 2):
        assert step(a, fleet.clock, f"a{i}", "flaky", {"i": i}, ok=False, error=OUTAGE).allowed
    assert b.operator.breaker_state("flaky") is S.CLOSED
    fleet.reconnect()
    assert a.store.resync()
    assert b.operator.breaker_state("flaky") is S.OPEN  # 1 + 2 failures in a row


# ------------------------------------------------------------------ once, and only once


def outage_work(fleet: Fleet):
    """A worker cut off after a first step, which takes 2 steps, a halt, 2 breaker failures and
    spend in-process; another worker on the same Redis."""
    config = {**BREAKER, **BUDGET}
    a, b = fleet.worker(config, cut_off_able=True), fleet.worker(config)
    assert step(a, fleet.clock, "run", args={"q": 0}, tokens=100).allowed
    fleet.cut_off()
    for i in (1, 2):
        assert step(a, fleet.clock, "run", args={"q": i}, tokens=100).allowed
        assert step(a, fleet.clock, f"f{i}", "flaky", {"i": i}, ok=False, error=OUTAGE).allowed  # 1 token-free step each
    fleet.reconnect()
    return a, b


def assert_counted_once(b: Engine, fleet: Fleet) -> None:
    seen = b.store.peek_session("run")
    assert (seen.spend.steps, seen.spend.tokens) == (3, 300)
    flaky = b.store.breaker_state(b.operator.breaker_key("flaky"))
    assert (flaky.consecutive_failures, flaky.window.totals[0]) == (2, 2)
    assert b.store.breaker_state(b.operator.breaker_key("search")).window.totals[0] == 3  # 1 success before, 2 during
    assert b.store.add_spend(":", 0, 0.0, 3600, fleet.clock.now())[0] == 300


def test_recovering_twice_counts_nothing_twice(fleet):
    a, b = outage_work(fleet)
    assert a.store.resync()
    assert a.store.resync()
    assert_counted_once(b, fleet)


def test_a_write_back_whose_reply_was_lost_is_not_repeated(fleet):
    a, b = outage_work(fleet)
    store = a.store
    lost = []

    def reply_lost(name: str) -> None:
        real = getattr(store, name)

        def once(*args, **kwargs):
            real(*args, **kwargs)  # Redis runs it ...
            setattr(store, name, real)
            lost.append(name)
            raise redis.TimeoutError("reply lost")  # ... and the answer never arrives

        setattr(store, name, once)

    for name in ("_breaker_script", "_cas_script", "_spend_script"):
        reply_lost(name)
    attempts = [store.resync() for _ in range(4)]
    assert attempts == [False, False, False, True]
    assert lost == ["_breaker_script", "_cas_script", "_spend_script"]
    assert store.resync()
    assert_counted_once(b, fleet)


def test_a_worker_keeps_its_outage_state_until_a_write_back_succeeds(fleet):
    a, b = fleet.worker(cut_off_able=True), fleet.worker()
    assert step(a, fleet.clock, "run").allowed
    fleet.cut_off()
    halt_by_looping(a, fleet.clock, "run")
    assert not a.store.resync()  # still cut off: nothing is lost, nothing written
    assert refused(step(a, fleet.clock, "run", "other_tool"), "identical_failure")
    fleet.reconnect()
    assert a.store.resync()
    assert b.store.peek_session("run").halted[0] == "identical_failure"
