"""Random call / result / time sequences against the MemoryStore breaker, checked against the
transition table and the breaker's invariants, and mirrored on a bare BreakerState driven by the
pure core functions: two implementations of one breaker must agree step by step (the seed of
the memory-vs-Redis agreement check)."""

from __future__ import annotations

import random
import uuid

from conftest import REDIS_URL, examples, redis_or_skip
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from agent_breaker import FakeClock, MemoryStore
from agent_breaker.breaker import TRANSITIONS, BreakerState, BreakerStateName, Permission, Transition, core
from agent_breaker.config import BreakerConfig

S = BreakerStateName
KEY = "flaky_tool"


class BreakerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cfg: BreakerConfig | None = None

    @initialize(
        k=st.integers(1, 3),
        open_s=st.sampled_from([5.0, 10.0, 30.0]),
        multiplier=st.sampled_from([1.0, 1.5, 2.0, 3.0]),
        cap=st.sampled_from([1.0, 2.0, 4.0, 10.0]),
        probe_timeout_s=st.sampled_from([5.0, 30.0, 60.0]),
        consecutive=st.one_of(st.none(), st.integers(1, 4)),
        threshold=st.one_of(st.none(), st.integers(1, 6)),
        rate=st.one_of(st.none(), st.sampled_from([25.0, 50.0, 100.0])),
        min_calls=st.integers(1, 6),
        window_s=st.sampled_from([10.0, 60.0]),
        min_sessions=st.integers(1, 3),
    )
    def setup(self, k, open_s, multiplier, cap, probe_timeout_s, consecutive, threshold, rate, min_calls, window_s, min_sessions):
        self.cfg = BreakerConfig(
            half_open_probes=k,
            open_s=open_s,
            backoff_multiplier=multiplier,
            max_open_s=open_s * cap,
            probe_timeout_s=probe_timeout_s,
            consecutive_failures=consecutive,
            failure_threshold=threshold,
            failure_rate_pct=rate,
            min_calls=min_calls,
            window_s=window_s,
            slow_call_ms=100.0,
            min_sessions=min_sessions,
        )
        self.clock = FakeClock(1_000_000.0)
        self.store = self.make_store()
        self.mirror = BreakerState(KEY)
        self.mirror_rng = random.Random(0)
        # (store's probe id, mirror's probe id) of every admitted call not yet reported; None: no probe
        self.pending: list[tuple[int | None, int | None]] = []
        self.prev = S.CLOSED
        self.moves: list[tuple[S, S]] = []

    def make_store(self):
        return MemoryStore(rng=random.Random(0))

    # ---------------------------------------------------------------- helpers
    def _state(self) -> BreakerState:
        st_ = self.store.breaker_state(KEY)
        return st_ if st_ is not None else BreakerState(KEY)

    def _observe(self, transition: Transition | None) -> None:
        """The store moved by at most one legal step, and said which."""
        cur = self._state().state
        assert isinstance(cur, BreakerStateName)
        if transition is None:
            assert cur is self.prev, f"silent move {self.prev} -> {cur}"
        else:
            assert (transition.src, transition.dst) == (self.prev, cur)
            assert (transition.src, transition.dst) in TRANSITIONS
            assert transition.at == self.clock.now()
            self.moves.append((transition.src, transition.dst))
        self.prev = cur

    def _record(self, failed: bool, slow: bool, index: int, session: str | None = None) -> None:
        # each side gets back the id its own acquire handed out
        store_probe, mirror_probe = self.pending.pop(index % len(self.pending))
        before = self._state()
        src, in_flight, successes = before.state, [list(p) for p in before.probes], before.probe_successes
        now = self.clock.now()
        t_store = self.store.breaker_record(
            KEY, self.cfg, now, failed=failed, slow=slow, probe=store_probe, session=session
        ).transition
        t_core = core.record(
            self.mirror, self.cfg, now, failed=failed, slow=slow, probe=mirror_probe, rng=self.mirror_rng, session=session
        )
        assert t_store == t_core
        if src is S.CLOSED and t_store is not None and session is not None:
            # a shared breaker opens only once enough sessions failed within its window
            since = now - self.cfg.window_s
            assert len({tag for tag, at in self._state().failing if at > since}) >= self.cfg.min_sessions
        if src is S.HALF_OPEN and store_probe not in [pid for pid, _ in in_flight]:
            # not a probe of the current round (none, an earlier round's, or timed out): ignored
            after = self._state()
            assert t_store is None
            assert (after.state, after.probes, after.probe_successes) == (S.HALF_OPEN, in_flight, successes)
        self._observe(t_store)

    def _current_round(self) -> list[int]:
        return [pid for pid, _ in self._state().probes]

    # ---------------------------------------------------------------- rules
    @precondition(lambda self: self.cfg is not None)
    @rule()
    def acquire(self) -> None:
        now = self.clock.now()
        before = self._state()
        src, reopen_at, next_probe = before.state, before.opened_at + before.open_interval_s, before.next_probe
        p: Permission = self.store.breaker_acquire(KEY, self.cfg, now)
        q: Permission = core.acquire(self.mirror, self.cfg, now)
        assert p == q
        assert p.probe == q.probe  # both sides count probe ids from next_probe = 0
        if src is S.OPEN and now < reopen_at:
            # an OPEN breaker admits nothing before opened_at + open_interval_s
            assert (p.allowed, p.state, p.retry_after_s) == (False, S.OPEN, reopen_at - now)
        if src is S.FORCED_OPEN:
            assert not p.allowed
        if src in (S.CLOSED, S.DISABLED, S.METRICS_ONLY):
            assert p.allowed and p.probe is None
        if p.probe is not None:
            assert p.allowed and p.state is S.HALF_OPEN
            # a fresh id, never handed out before
            assert p.probe == next_probe
            assert all(p.probe != sp for sp, _ in self.pending)
        if p.allowed:
            self.pending.append((p.probe, q.probe))
        self._observe(p.transition)

    @precondition(lambda self: self.cfg is not None and self.pending)
    @rule(index=st.integers(0, 50), slow=st.booleans())
    def record_success(self, index: int, slow: bool) -> None:
        self._record(False, slow, index)

    @precondition(lambda self: self.cfg is not None and self.pending)
    @rule(index=st.integers(0, 50), slow=st.booleans(), session=st.sampled_from([None, "s1", "s2", "s3"]))
    def record_failure(self, index: int, slow: bool, session: str | None) -> None:
        self._record(True, slow, index, session)

    @precondition(lambda self: self.cfg is not None and any(sp is not None for sp, _ in self.pending))
    @rule(failed=st.booleans())
    def record_a_probe_result(self, failed: bool) -> None:
        """Report an outstanding probe (random picks rarely find one): reaches HALF_OPEN -> CLOSED.
        A probe of the current round if there is one, else an earlier round's (which is ignored)."""
        current = self._current_round()
        probes = [i for i, (sp, _) in enumerate(self.pending) if sp is not None]
        fresh = [i for i in probes if self.pending[i][0] in current]
        self._record(failed, False, (fresh or probes)[0])

    @precondition(lambda self: self.cfg is not None)
    @rule(seconds=st.floats(min_value=0.0, max_value=120.0, allow_nan=False, allow_infinity=False))
    def advance_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # ---------------------------------------------------------------- invariants
    @invariant()
    def probes_in_flight_and_successes_never_exceed_k(self) -> None:
        if self.cfg is None:
            return
        st_ = self._state()
        if st_.state is S.HALF_OPEN:
            assert len(st_.probes) + st_.probe_successes <= self.cfg.half_open_probes
        else:
            assert (st_.probes, st_.probe_successes) == ([], 0)

    @invariant()
    def probes_in_flight_are_distinct_admitted_and_unreported(self) -> None:
        if self.cfg is None:
            return
        st_ = self._state()
        ids = [pid for pid, _ in st_.probes]
        assert len(set(ids)) == len(ids)
        assert all(0 <= pid < st_.next_probe for pid in ids)
        assert set(ids) <= {sp for sp, _ in self.pending}
        assert all(sp == mp for sp, mp in self.pending)

    @invariant()
    def open_interval_stays_between_open_s_and_max_open_s(self) -> None:
        if self.cfg is None:
            return
        st_ = self._state()
        assert st_.open_interval_s <= self.cfg.max_open_s
        if st_.state in (S.OPEN, S.HALF_OPEN):
            assert st_.open_interval_s >= self.cfg.open_s
        if st_.state is S.OPEN:
            assert st_.opened_at <= self.clock.now()

    @invariant()
    def store_and_pure_core_agree(self) -> None:
        if self.cfg is None:
            return
        a, b = self._state(), self.mirror
        assert (
            a.state,
            a.opened_at,
            a.open_interval_s,
            a.probes,
            a.next_probe,
            a.probe_successes,
            a.consecutive_failures,
            a.changed_at,
            a.failing,
        ) == (
            b.state,
            b.opened_at,
            b.open_interval_s,
            b.probes,
            b.next_probe,
            b.probe_successes,
            b.consecutive_failures,
            b.changed_at,
            b.failing,
        )
        wa, wb = a.window, b.window
        assert (wa is None) == (wb is None)
        if wa is not None:
            assert (wa.buckets, wa.totals) == (wb.buckets, wb.totals)

    @invariant()
    def every_move_so_far_is_in_the_table(self) -> None:
        assert all(m in TRANSITIONS for m in self.moves)


BreakerMachine.TestCase.settings = settings(
    max_examples=examples(200),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMemoryStoreBreaker = BreakerMachine.TestCase


class RedisBreakerMachine(BreakerMachine):
    """The same machine on the Redis store (its Lua script), against the same pure-core mirror:
    memory and Redis agree step by step."""

    def make_store(self):
        from agent_breaker.store.redis import RedisStore

        # near_cache_s=0: every acquire runs the script, so each step compares the Lua logic
        self.redis_store = RedisStore(REDIS_URL, prefix=f"abhyp-{uuid.uuid4().hex[:12]}", listen=False, near_cache_s=0.0)
        return self.redis_store

    def teardown(self) -> None:
        store = getattr(self, "redis_store", None)
        if store is not None:
            store.delete_all()
            store.close()


RedisBreakerMachine.TestCase.settings = settings(
    max_examples=examples(60),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class TestRedisStoreBreaker(RedisBreakerMachine.TestCase):
    def setUp(self) -> None:
        redis_or_skip()


def test_the_machine_reaches_every_automatic_transition():
    """Guard against a vacuous machine: a fixed run walks the whole open / half-open cycle."""
    m = BreakerMachine()
    m.setup(
        k=1, open_s=5.0, multiplier=2.0, cap=4.0, probe_timeout_s=30.0,
        consecutive=1, threshold=None, rate=None, min_calls=1, window_s=60.0, min_sessions=2,
    )  # fmt: skip
    m.acquire()
    m.acquire()
    m.record_failure(0, False, "s1")  # one session's failure: still closed
    m.record_failure(0, False, "s2")  # a second session's: CLOSED -> OPEN
    m.acquire()  # refused
    m.advance_clock(5.0)
    m.acquire()  # OPEN -> HALF_OPEN, probe
    m.record_failure(0, False, "s1")  # HALF_OPEN -> OPEN (10 s)
    m.advance_clock(10.0)
    m.acquire()  # OPEN -> HALF_OPEN
    m.record_success(0, False)  # HALF_OPEN -> CLOSED
    for check in (
        m.probes_in_flight_and_successes_never_exceed_k,
        m.probes_in_flight_are_distinct_admitted_and_unreported,
        m.open_interval_stays_between_open_s_and_max_open_s,
        m.store_and_pure_core_agree,
    ):
        check()
    assert m.moves == [
        (S.CLOSED, S.OPEN),
        (S.OPEN, S.HALF_OPEN),
        (S.HALF_OPEN, S.OPEN),
        (S.OPEN, S.HALF_OPEN),
        (S.HALF_OPEN, S.CLOSED),
    ]
