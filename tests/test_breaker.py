"""The tool circuit breaker: transition table, trip conditions, open / half-open cycle,
manual states, and the same behaviour through the Engine."""

from __future__ import annotations

import itertools
import random

import pytest
from conftest import OUTAGE, call, result, run

from agent_breaker import BreakerStateName, IllegalTransition
from agent_breaker.breaker import TRANSITIONS, BreakerState, Transition, acquire, check_transition, force, record
from agent_breaker.config import BreakerConfig

S = BreakerStateName
T0 = 1_000_000.0
MANUAL = (S.FORCED_OPEN, S.DISABLED, S.METRICS_ONLY)

ALL_PAIRS = list(itertools.product(S, S))
ILLEGAL = [pair for pair in ALL_PAIRS if pair not in TRANSITIONS]
# what an operator may do: force / disable / meter any breaker, reset a manual or open one
MANUAL_MOVES = sorted(
    {(src, dst) for src in S for dst in MANUAL if src != dst} | {(src, S.CLOSED) for src in (*MANUAL, S.OPEN)},
    key=lambda p: (p[0].value, p[1].value),
)
# the states an operator may force a breaker into; OPEN and HALF_OPEN are the breaker's own
OPERATOR = (S.CLOSED, *MANUAL)
# every legal move into an operator state: the manual moves and HALF_OPEN -> CLOSED
OPERATOR_MOVES = sorted({(src, dst) for src, dst in TRANSITIONS if dst in OPERATOR}, key=lambda p: (p[0].value, p[1].value))
# forcing OPEN or HALF_OPEN is no operator move, from any state (even where the table has the move)
NOT_OPERATOR_MOVES = [(src, dst) for src in S for dst in S if dst not in OPERATOR]
# forcing the manual state a breaker is in already: no move (the table has none)
REPEATED_MOVES = [(m, m) for m in MANUAL]


def cfg(**kw) -> BreakerConfig:
    return BreakerConfig(**kw)


def fail(st: BreakerState, c: BreakerConfig, now: float, n: int = 1, **kw) -> list[Transition | None]:
    return [record(st, c, now, failed=True, **kw) for _ in range(n)]


def succeed(st: BreakerState, c: BreakerConfig, now: float, n: int = 1, **kw) -> list[Transition | None]:
    return [record(st, c, now, failed=False, **kw) for _ in range(n)]


def opened(c: BreakerConfig, now: float = T0, name: str = "tool") -> BreakerState:
    """A breaker that its consecutive-failure streak opened at `now`."""
    st = BreakerState(name)
    fail(st, c, now, c.consecutive_failures)
    assert st.state is S.OPEN
    return st


# ------------------------------------------------------------------ transition table


def test_transition_table_holds_exactly_the_documented_moves():
    automatic = {
        (S.CLOSED, S.OPEN),
        (S.OPEN, S.HALF_OPEN),
        (S.HALF_OPEN, S.CLOSED),
        (S.HALF_OPEN, S.OPEN),
    }
    assert automatic | set(MANUAL_MOVES) == TRANSITIONS
    assert len(TRANSITIONS) == 23
    assert len(ILLEGAL) == 13


@pytest.mark.parametrize(("src", "dst"), ILLEGAL, ids=[f"{a.value}->{b.value}" for a, b in ILLEGAL])
def test_check_transition_rejects_every_move_not_in_the_table(src, dst):
    with pytest.raises(IllegalTransition) as info:
        check_transition("payments_api", src, dst)
    assert str(info.value) == f"breaker 'payments_api': illegal transition from {src.value} to {dst.value}"
    assert (info.value.breaker, info.value.src, info.value.dst) == ("payments_api", src, dst)


def test_force_sorts_every_pair_into_exactly_one_case():
    cases = [set(NOT_OPERATOR_MOVES), set(REPEATED_MOVES), {(S.CLOSED, S.CLOSED)}, set(OPERATOR_MOVES)]
    assert sum(len(c) for c in cases) == len(ALL_PAIRS) == 36
    assert set().union(*cases) == set(ALL_PAIRS)
    assert set(MANUAL_MOVES) <= set(OPERATOR_MOVES)


@pytest.mark.parametrize(("src", "dst"), NOT_OPERATOR_MOVES, ids=[f"{a.value}->{b.value}" for a, b in NOT_OPERATOR_MOVES])
def test_force_rejects_every_move_outside_the_operator_states_and_leaves_the_state(src, dst):
    st = BreakerState("payments_api", state=src, changed_at=T0, consecutive_failures=3)
    with pytest.raises(ValueError) as info:
        force(st, dst, T0 + 5.0, cfg())
    msg = str(info.value)
    assert "'payments_api'" in msg and all(repr(s.value) in msg for s in OPERATOR)
    assert msg.endswith(f"not {dst.value}")
    assert (st.state, st.changed_at, st.consecutive_failures) == (src, T0, 3)


@pytest.mark.parametrize(("src", "dst"), REPEATED_MOVES, ids=[f"{a.value}->{b.value}" for a, b in REPEATED_MOVES])
def test_forcing_the_state_a_breaker_is_in_moves_nothing(src, dst):
    # an operator may repeat a command (a retried admin request): no error, no transition
    assert (src, dst) not in TRANSITIONS
    st = BreakerState("payments_api", state=src, changed_at=T0)
    assert force(st, dst, T0 + 5.0, cfg()) is None
    assert (st.state, st.changed_at) == (src, T0)


def test_force_closed_on_a_closed_breaker_resets_its_counters_without_a_transition():
    c = cfg()
    st = BreakerState("payments_api", changed_at=T0)
    fail(st, c, T0, 4)
    assert (st.state, st.consecutive_failures) == (S.CLOSED, 4)
    assert force(st, S.CLOSED, T0 + 5.0, c) is None
    assert (st.state, st.changed_at) == (S.CLOSED, T0)
    assert (st.consecutive_failures, st.open_interval_s, st.probes, st.probe_successes) == (0, 0.0, [], 0)
    assert not any(st.window.read(T0 + 5.0))  # every series back to 0
    fail(st, c, T0 + 5.0, 4)
    assert st.state is S.CLOSED  # the streak starts over


@pytest.mark.parametrize(("src", "dst"), OPERATOR_MOVES, ids=[f"{a.value}->{b.value}" for a, b in OPERATOR_MOVES])
def test_every_legal_manual_move_works(src, dst):
    st = BreakerState("payments_api", state=src, changed_at=T0)
    t = force(st, dst, T0 + 5.0, cfg())
    assert t == Transition("payments_api", src, dst, T0 + 5.0, "operator")
    assert st.state is dst
    assert st.changed_at == T0 + 5.0


def test_check_transition_accepts_every_move_in_the_table():
    for src, dst in TRANSITIONS:
        check_transition("b", src, dst)  # does not raise


# ------------------------------------------------------------------ trips


def test_default_breaker_opens_after_exactly_five_failures_in_a_row():
    c = cfg()
    st = BreakerState("tool")
    assert fail(st, c, T0, 4) == [None] * 4
    assert st.state is S.CLOSED
    t = record(st, c, T0 + 1.0, failed=True)
    assert t == Transition("tool", S.CLOSED, S.OPEN, T0 + 1.0, "5 failures in a row (threshold 5)", open_interval_s=30.0)
    assert st.state is S.OPEN
    assert st.opened_at == T0 + 1.0
    assert st.open_interval_s == 30.0


@pytest.mark.parametrize("n", [1, 3, 7])
def test_consecutive_failures_opens_after_exactly_n(n):
    c = cfg(consecutive_failures=n, failure_rate_pct=None)
    st = BreakerState("tool")
    fail(st, c, T0, n - 1)
    assert st.state is S.CLOSED
    assert st.consecutive_failures == n - 1
    assert record(st, c, T0, failed=True).dst is S.OPEN


def test_a_success_resets_the_failure_streak():
    c = cfg()
    st = BreakerState("tool")
    fail(st, c, T0, 4)
    succeed(st, c, T0)
    assert st.consecutive_failures == 0
    fail(st, c, T0, 4)
    assert st.state is S.CLOSED
    assert st.consecutive_failures == 4
    assert record(st, c, T0, failed=True).dst is S.OPEN


def test_failure_rate_does_not_trip_below_min_calls():
    c = cfg(consecutive_failures=None, failure_rate_pct=50.0, min_calls=10)
    st = BreakerState("tool")
    assert fail(st, c, T0, 9) == [None] * 9  # 100% failures, but only 9 calls
    assert st.state is S.CLOSED
    t = record(st, c, T0, failed=False)  # 10th call: 9/10 = 90%
    assert t.dst is S.OPEN
    assert t.reason == "failure rate 90% over 10 calls (threshold 50%)"


def test_failure_rate_trips_at_exactly_the_threshold():
    c = cfg(consecutive_failures=None, failure_rate_pct=50.0, min_calls=10)
    st = BreakerState("tool")
    outcomes = [False, True] * 5  # 5 failures in 10 calls, never two in a row
    transitions = [record(st, c, T0, failed=f) for f in outcomes]
    assert transitions[:9] == [None] * 9
    assert transitions[9].dst is S.OPEN
    assert transitions[9].reason == "failure rate 50% over 10 calls (threshold 50%)"


def test_failure_rate_below_the_threshold_stays_closed():
    c = cfg(consecutive_failures=None, failure_rate_pct=50.0, min_calls=10)
    st = BreakerState("tool")
    for f in [True, False, False, True, False, True, False, True, False, False, False]:
        assert record(st, c, T0, failed=f) is None  # at most 4 of 10, 4 of 11
    assert st.state is S.CLOSED


def test_failure_rate_only_counts_calls_inside_the_window():
    c = cfg(consecutive_failures=None, failure_rate_pct=50.0, min_calls=4, window_s=60.0)
    st = BreakerState("tool")
    fail(st, c, T0, 3)  # 3 calls: below min_calls
    succeed(st, c, T0 + 60.0, 1)  # the 3 failures left the window: 0/1
    assert st.state is S.CLOSED
    assert st.window.read(T0 + 60.0)[:2] == [1.0, 0.0]  # calls, failures


def test_failure_threshold_opens_on_the_nth_failure_in_the_window():
    c = cfg(consecutive_failures=None, failure_rate_pct=None, failure_threshold=3, window_s=60.0)
    st = BreakerState("tool")
    outcomes = [True, False, True, False]
    assert [record(st, c, T0 + i, failed=f) for i, f in enumerate(outcomes)] == [None] * 4
    t = record(st, c, T0 + 4.0, failed=True)
    assert t.dst is S.OPEN
    assert t.reason == "3 failures in 60s (threshold 3)"


def test_failures_older_than_window_s_do_not_count_towards_the_threshold():
    c = cfg(consecutive_failures=None, failure_rate_pct=None, failure_threshold=3, window_s=60.0)
    st = BreakerState("tool")
    record(st, c, T0, failed=True)
    record(st, c, T0 + 1.0, failed=True)
    # at T0+60 the first failure has left the window: 2 failures count, not 3
    assert record(st, c, T0 + 60.0, failed=True) is None
    assert st.state is S.CLOSED
    assert record(st, c, T0 + 60.5, failed=True).dst is S.OPEN


def test_slow_calls_count_as_failures_when_slow_calls_are_failures():
    c = cfg(consecutive_failures=3, failure_rate_pct=None, slow_call_ms=500.0)
    st = BreakerState("tool")
    assert record(st, c, T0, failed=False, slow=True) is None
    assert record(st, c, T0, failed=False, slow=True) is None
    assert st.consecutive_failures == 2
    assert record(st, c, T0, failed=False, slow=True).dst is S.OPEN


def test_slow_calls_count_towards_the_failure_threshold_when_they_are_failures():
    c = cfg(consecutive_failures=None, failure_rate_pct=None, failure_threshold=2, slow_call_ms=500.0)
    st = BreakerState("tool")
    assert record(st, c, T0, failed=False, slow=True) is None
    assert record(st, c, T0, failed=False, slow=True).dst is S.OPEN


def test_slow_calls_are_successes_when_slow_calls_are_not_failures():
    c = cfg(
        consecutive_failures=3,
        failure_rate_pct=50.0,
        min_calls=1,
        failure_threshold=1,
        slow_call_ms=500.0,
        slow_calls_are_failures=False,
    )
    st = BreakerState("tool")
    for _ in range(10):
        assert record(st, c, T0, failed=False, slow=True) is None
    assert st.state is S.CLOSED
    assert st.consecutive_failures == 0


def test_a_call_both_failed_and_slow_counts_as_one_failure():
    # regression: it used to land in both the failures and the slow series, and count twice
    c = cfg(consecutive_failures=None, failure_rate_pct=None, failure_threshold=3, slow_call_ms=500.0)
    st = BreakerState("tool")
    assert record(st, c, T0, failed=True, slow=True) is None
    assert record(st, c, T0, failed=True, slow=True) is None  # 2 failures < threshold 3
    assert st.state is S.CLOSED
    t = record(st, c, T0, failed=True, slow=True)
    assert t.reason == "3 failures in 60s (threshold 3)"


def test_failed_and_slow_calls_never_push_the_failure_rate_past_the_real_share():
    c = cfg(consecutive_failures=None, failure_rate_pct=100.0, min_calls=2, slow_call_ms=500.0)
    st = BreakerState("tool")
    assert record(st, c, T0, failed=True, slow=True) is None
    assert record(st, c, T0, failed=False) is None  # 1 bad call of 2: 50%, not 100%
    assert st.state is S.CLOSED
    assert record(st, c, T0, failed=False, slow=True) is None  # 2 of 3
    assert record(st, c, T0, failed=True, slow=True) is None  # 3 of 4
    assert st.state is S.CLOSED


# ------------------------------------------------------------------ open and half-open


def test_open_breaker_refuses_with_the_remaining_interval_as_retry_after():
    c = cfg(open_s=30.0)
    st = opened(c, T0)
    p = acquire(st, c, T0 + 12.0)
    assert (p.allowed, p.state, p.probe, p.retry_after_s, p.transition) == (False, S.OPEN, None, 18.0, None)
    assert acquire(st, c, T0 + 29.5).retry_after_s == 0.5
    assert st.state is S.OPEN


def test_open_breaker_moves_to_half_open_on_the_first_acquire_after_open_s():
    c = cfg(open_s=30.0)
    st = opened(c, T0)
    p = acquire(st, c, T0 + 30.0)
    assert p.allowed and p.probe is not None
    assert p.state is S.HALF_OPEN
    assert p.transition == Transition("tool", S.OPEN, S.HALF_OPEN, T0 + 30.0, "open interval of 30s elapsed")
    assert st.state is S.HALF_OPEN
    assert st.changed_at == T0 + 30.0


def test_breaker_stays_open_without_an_acquire_however_long_it_waits():
    c = cfg(open_s=30.0)
    st = opened(c, T0)
    fail(st, c, T0 + 1000.0, 3)  # late results do not move it either
    assert st.state is S.OPEN


@pytest.mark.parametrize("k", [1, 2, 5])
def test_half_open_admits_exactly_k_probes(k):
    c = cfg(half_open_probes=k, open_s=30.0, probe_timeout_s=60.0)
    st = opened(c, T0)
    now = T0 + 30.0
    admitted = [acquire(st, c, now + i) for i in range(k)]
    assert all(p.allowed and p.probe is not None and p.state is S.HALF_OPEN for p in admitted)
    ids = [p.probe for p in admitted]
    assert len(set(ids)) == k  # each probe has its own id
    assert [pid for pid, _ in st.probes] == ids
    for i in range(10):
        p = acquire(st, c, now + k + i)
        assert (p.allowed, p.probe, p.state) == (False, None, S.HALF_OPEN)
        # the oldest probe (admitted at `now`) frees its slot at now + probe_timeout_s
        assert p.retry_after_s == 60.0 - k - i
    assert st.state is S.HALF_OPEN
    assert len(st.probes) == k


@pytest.mark.parametrize("k", [1, 2, 4])
def test_k_probe_successes_close_the_breaker(k):
    c = cfg(half_open_probes=k, open_s=30.0)
    st = opened(c, T0)
    probes = [acquire(st, c, T0 + 30.0).probe for _ in range(k)]
    assert None not in probes
    transitions = [record(st, c, T0 + 31.0, failed=False, probe=pid) for pid in probes]
    assert transitions[:-1] == [None] * (k - 1)
    assert transitions[-1] == Transition("tool", S.HALF_OPEN, S.CLOSED, T0 + 31.0, f"{k} half-open probes succeeded")
    assert st.state is S.CLOSED
    assert (st.consecutive_failures, st.open_interval_s, st.probes, st.probe_successes) == (0, 0.0, [], 0)
    assert not any(st.window.read(T0 + 31.0))  # every series back to 0
    assert acquire(st, c, T0 + 31.0).allowed


def test_successful_probes_do_not_free_slots_for_more_probes():
    c = cfg(half_open_probes=2, open_s=30.0)
    st = opened(c, T0)
    first = acquire(st, c, T0 + 30.0).probe
    assert first is not None
    assert record(st, c, T0 + 30.5, failed=False, probe=first) is None
    assert acquire(st, c, T0 + 31.0).probe is not None  # second slot
    p = acquire(st, c, T0 + 31.5)
    assert (p.allowed, p.state) == (False, S.HALF_OPEN)  # 1 success + 1 in flight = K


def test_a_failed_probe_reopens_with_backoff_doubling_up_to_max_open_s():
    c = cfg(open_s=10.0, backoff_multiplier=2.0, max_open_s=100.0, half_open_probes=1)
    st = opened(c, T0)
    assert st.open_interval_s == 10.0
    now = T0
    intervals = []
    for _ in range(6):
        now += st.open_interval_s
        p = acquire(st, c, now)
        assert p.probe is not None and p.state is S.HALF_OPEN
        t = record(st, c, now + 1.0, failed=True, probe=p.probe)
        assert t == Transition("tool", S.HALF_OPEN, S.OPEN, now + 1.0, "a half-open probe failed", st.open_interval_s)
        now += 1.0
        assert st.opened_at == now
        intervals.append(st.open_interval_s)
    assert intervals == [20.0, 40.0, 80.0, 100.0, 100.0, 100.0]


def test_backoff_uses_the_configured_multiplier():
    c = cfg(open_s=10.0, backoff_multiplier=3.0, max_open_s=1000.0, half_open_probes=1)
    st = opened(c, T0)
    p = acquire(st, c, T0 + 10.0)
    record(st, c, T0 + 10.0, failed=True, probe=p.probe)
    assert st.open_interval_s == 30.0
    p = acquire(st, c, T0 + 39.0)
    assert (p.allowed, p.retry_after_s) == (False, 1.0)


def test_a_slow_probe_counts_as_a_failed_probe():
    c = cfg(open_s=10.0, half_open_probes=1, slow_call_ms=100.0)
    st = opened(c, T0)
    p = acquire(st, c, T0 + 10.0)
    assert record(st, c, T0 + 11.0, failed=False, slow=True, probe=p.probe).dst is S.OPEN
    assert st.open_interval_s == 20.0


def test_closing_resets_the_backoff_to_open_s():
    c = cfg(open_s=10.0, max_open_s=100.0, half_open_probes=1)
    st = opened(c, T0)
    p = acquire(st, c, T0 + 10.0)
    record(st, c, T0 + 10.0, failed=True, probe=p.probe)  # 20 s
    p = acquire(st, c, T0 + 30.0)
    assert record(st, c, T0 + 30.0, failed=False, probe=p.probe).dst is S.CLOSED
    fail(st, c, T0 + 31.0, 5)
    assert st.state is S.OPEN
    assert st.open_interval_s == 10.0


def test_jitter_keeps_each_open_interval_within_plus_minus_jitter_pct():
    c = cfg(open_s=100.0, max_open_s=1000.0, jitter_pct=10.0)
    rng = random.Random(1234)
    intervals = []
    for _ in range(200):
        st = BreakerState("tool")
        fail(st, c, T0, 5, rng=rng)
        intervals.append(st.open_interval_s)
    assert all(90.0 <= x <= 110.0 for x in intervals)
    assert min(intervals) < 95.0 and max(intervals) > 105.0  # it does spread
    # seeded: the same generator gives the same intervals
    rng2 = random.Random(1234)
    again = []
    for _ in range(200):
        st = BreakerState("tool")
        fail(st, c, T0, 5, rng=rng2)
        again.append(st.open_interval_s)
    assert again == intervals


def test_jitter_applies_to_backed_off_intervals_too():
    c = cfg(open_s=100.0, max_open_s=10_000.0, jitter_pct=10.0, half_open_probes=1)
    rng = random.Random(7)
    for _ in range(50):
        st = opened(c, T0)
        first = st.open_interval_s
        p = acquire(st, c, T0 + first)
        record(st, c, T0 + first, failed=True, probe=p.probe, rng=rng)
        base = max(first, 100.0) * 2.0
        assert base * 0.9 <= st.open_interval_s <= base * 1.1


def test_jitter_never_pushes_the_open_interval_past_max_open_s():
    # a breaker at the cap must not open for up to max_open_s * (1 + jitter_pct/100)
    c = cfg(open_s=100.0, max_open_s=100.0, jitter_pct=20.0)
    rng = random.Random(99)
    intervals = []
    for _ in range(100):
        st = BreakerState("tool")
        fail(st, c, T0, 5, rng=rng)
        intervals.append(st.open_interval_s)
    assert max(intervals) <= 100.0
    assert 80.0 <= min(intervals) < 95.0  # it still spreads below the cap


def test_a_probe_that_never_reports_frees_its_slot_after_probe_timeout_s():
    c = cfg(half_open_probes=1, open_s=30.0, probe_timeout_s=60.0)
    st = opened(c, T0)
    start = T0 + 30.0
    lost = acquire(st, c, start).probe
    assert lost is not None
    p = acquire(st, c, start + 59.5)
    assert (p.allowed, p.retry_after_s) == (False, 0.5)
    p = acquire(st, c, start + 60.0)
    assert (p.allowed, p.state) == (True, S.HALF_OPEN)
    assert p.probe is not None and p.probe != lost
    assert st.probes == [[p.probe, start + 60.0]]
    # the timed-out probe's late result no longer counts, nor takes the new probe's slot
    assert record(st, c, start + 61.0, failed=True, probe=lost) is None
    assert (st.state, st.probes, st.probe_successes) == (S.HALF_OPEN, [[p.probe, start + 60.0]], 0)
    assert record(st, c, start + 61.0, failed=False, probe=p.probe).dst is S.CLOSED


def test_results_of_non_probe_calls_in_half_open_are_ignored():
    c = cfg(half_open_probes=2, open_s=30.0)
    st = opened(c, T0)
    acquire(st, c, T0 + 30.0)  # one probe in flight
    streak = st.consecutive_failures
    totals = list(st.window.read(T0 + 30.0))
    for failed in (True, False, True, True, False):
        assert record(st, c, T0 + 31.0, failed=failed, probe=None) is None
    assert st.state is S.HALF_OPEN
    assert (len(st.probes), st.probe_successes) == (1, 0)
    assert st.consecutive_failures == streak
    assert st.window.read(T0 + 31.0) == totals


def test_late_results_while_open_are_ignored():
    c = cfg(open_s=30.0)
    st = opened(c, T0)
    totals = list(st.window.read(T0))
    for failed, probe in [(True, None), (False, None), (True, 0), (False, 0)]:
        assert record(st, c, T0 + 5.0, failed=failed, probe=probe) is None
    assert st.state is S.OPEN
    assert (st.opened_at, st.open_interval_s, st.consecutive_failures) == (T0, 30.0, 5)
    assert st.window.read(T0 + 5.0) == totals


def test_a_probe_result_from_an_earlier_half_open_episode_does_not_count_in_the_next():
    # a probe admitted before the breaker re-opened must not count after the next
    # OPEN -> HALF_OPEN, or the breaker would close after K-1 fresh successes
    c = cfg(half_open_probes=2, open_s=10.0, max_open_s=100.0)
    st = opened(c, T0)
    p1 = acquire(st, c, T0 + 10.0).probe
    p2 = acquire(st, c, T0 + 10.0).probe
    assert None not in (p1, p2)
    assert record(st, c, T0 + 11.0, failed=True, probe=p1).dst is S.OPEN  # P1 fails: open 20 s
    p3 = acquire(st, c, T0 + 31.0).probe  # next episode
    p4 = acquire(st, c, T0 + 31.0).probe
    assert None not in (p3, p4)
    assert len({p1, p2, p3, p4}) == 4
    assert record(st, c, T0 + 32.0, failed=False, probe=p2) is None  # P2 reports, from the old episode
    assert record(st, c, T0 + 33.0, failed=False, probe=p3) is None  # P3 succeeds; P4 still in flight
    assert st.state is S.HALF_OPEN
    assert st.probe_successes == 1
    assert record(st, c, T0 + 34.0, failed=False, probe=p4).dst is S.CLOSED  # the round's own K probes close it


# ------------------------------------------------------------------ manual states


def test_metrics_only_never_refuses_but_reports_would_refuse_once_tripped():
    c = cfg()
    st = BreakerState("tool")
    force(st, S.METRICS_ONLY, T0, c)
    for _ in range(4):
        assert record(st, c, T0, failed=True) is None
        p = acquire(st, c, T0)
        assert (p.allowed, p.state, p.would_refuse) == (True, S.METRICS_ONLY, False)
    assert record(st, c, T0, failed=True) is None  # 5th: would open, but metrics only
    for i in range(20):
        p = acquire(st, c, T0 + i)
        assert (p.allowed, p.state, p.would_refuse, p.retry_after_s) == (True, S.METRICS_ONLY, True, None)
        record(st, c, T0 + i, failed=True)
    assert st.state is S.METRICS_ONLY
    succeed(st, c, T0 + 20.0)
    # the streak is broken, but 25 failures in 26 calls still trip the 50% rate (min 20 calls)
    assert acquire(st, c, T0 + 20.0).would_refuse is True
    assert acquire(st, c, T0 + 200.0).would_refuse is False  # the window has emptied


def test_forced_open_always_refuses_and_ignores_results():
    c = cfg()
    st = BreakerState("tool")
    force(st, S.FORCED_OPEN, T0, c)
    for dt in (0.0, 30.0, 600.0, 86_400.0):
        p = acquire(st, c, T0 + dt)
        assert (p.allowed, p.state, p.probe, p.retry_after_s) == (False, S.FORCED_OPEN, None, None)
        assert record(st, c, T0 + dt, failed=False, probe=0) is None
        assert record(st, c, T0 + dt, failed=False, probe=None) is None
    assert st.state is S.FORCED_OPEN


def test_disabled_always_admits_and_never_trips():
    c = cfg(consecutive_failures=1, failure_threshold=1)
    st = BreakerState("tool")
    force(st, S.DISABLED, T0, c)
    for i in range(50):
        p = acquire(st, c, T0 + i)
        assert (p.allowed, p.state, p.would_refuse) == (True, S.DISABLED, False)
        assert record(st, c, T0 + i, failed=True) is None
    assert st.state is S.DISABLED


@pytest.mark.parametrize("src", [S.OPEN, S.FORCED_OPEN, S.DISABLED, S.METRICS_ONLY, S.HALF_OPEN])
def test_force_closed_resets_the_breaker(src):
    c = cfg(open_s=10.0, half_open_probes=3)
    st = opened(c, T0)
    p = acquire(st, c, T0 + 10.0)
    record(st, c, T0 + 10.0, failed=True, probe=p.probe)  # backed off to 20 s
    assert st.open_interval_s == 20.0
    if src is S.HALF_OPEN:
        p = acquire(st, c, T0 + 30.0)
        record(st, c, T0 + 30.0, failed=False, probe=p.probe)
        acquire(st, c, T0 + 30.0)
        assert (len(st.probes), st.probe_successes) == (1, 1)
    elif src is not S.OPEN:
        force(st, src, T0 + 30.0, c)
    assert st.state is src
    t = force(st, S.CLOSED, T0 + 31.0, c)
    assert (t.src, t.dst) == (src, S.CLOSED)
    assert st.state is S.CLOSED
    assert (st.consecutive_failures, st.open_interval_s, st.probes, st.probe_successes) == (0, 0.0, [], 0)
    assert not any(st.window.read(T0 + 31.0))  # every series back to 0
    assert acquire(st, c, T0 + 31.0).allowed
    fail(st, c, T0 + 31.0, 4)
    assert st.state is S.CLOSED  # the streak starts over
    fail(st, c, T0 + 31.0, 1)
    assert st.state is S.OPEN
    assert st.open_interval_s == 10.0  # and so does the backoff


# ------------------------------------------------------------------ through the Engine

TOOL = "fetch_page"


def test_tool_failing_in_five_sessions_is_blocked_in_a_sixth_then_recovers(make_engine, clock, incidents, transitions):
    engine = make_engine({"breaker": {"open_s": 30.0, "half_open_probes": 2}})
    for i in range(5):
        v = run(engine, clock, TOOL, {"page": f"https://x/{i}"}, False, None, session=f"s{i}", error=OUTAGE)
        assert v.allowed and v.heuristic is None
    assert engine.operator.breaker_state(TOOL) is S.OPEN
    opened_at = clock.now()

    v = run(engine, clock, TOOL, {"page": "https://x/5"}, True, None, session="s5")
    assert not v.allowed
    assert (v.heuristic, v.scope, v.severity) == ("circuit_open", "tool", "block")
    assert set(v.observation) == {"error", "tool", "message", "actionable_instruction", "retry_after_s"}
    assert v.observation["error"] == "CIRCUIT_OPEN"
    assert v.observation["tool"] == TOOL
    assert v.observation["retry_after_s"] == 28.0
    assert [(i.heuristic, i.scope, i.session, i.tool) for i in incidents] == [("circuit_open", "tool", "s5", TOOL)]

    clock.set(opened_at + 30.0)
    p1 = engine.check_tool_call(call(TOOL, {"page": "https://x/6"}, session="s6"))
    p2 = engine.check_tool_call(call(TOOL, {"page": "https://x/7"}, session="s7"))
    assert p1.allowed and p2.allowed
    assert engine.operator.breaker_state(TOOL) is S.HALF_OPEN
    extra = engine.check_tool_call(call(TOOL, {"page": "https://x/8"}, session="s8"))
    assert not extra.allowed
    assert (extra.heuristic, extra.scope) == ("circuit_half_open", "tool")

    clock.advance(1.0)
    r1 = engine.record_tool_result(result(TOOL, True, {"page": 6}, call_id=p1.call_id, session="s6"))
    assert r1.breaker_state == "half_open"
    r2 = engine.record_tool_result(result(TOOL, True, {"page": 7}, call_id=p2.call_id, session="s7"))
    assert r2.breaker_state == "closed"
    assert engine.operator.breaker_state(TOOL) is S.CLOSED
    assert engine.check_tool_call(call(TOOL, {"page": "https://x/9"}, session="s9")).allowed
    # on-call hears the tool go down and come back, each move once, with its time and why
    assert [(t.event, t.tool, t.src, t.dst, t.ts) for t in transitions] == [
        ("breaker_opened", TOOL, "closed", "open", opened_at),
        ("breaker_half_open", TOOL, "open", "half_open", opened_at + 30.0),
        ("breaker_closed", TOOL, "half_open", "closed", opened_at + 31.0),
    ]
    assert transitions[0].reason == "5 failures in a row (threshold 5)" or "failures" in transitions[0].reason
    assert transitions[0].counters == {"open_interval_s": 30.0}
    assert transitions[0].to_dict()["kind"] == "breaker"


def test_an_operator_forcing_a_breaker_is_an_incident(make_engine, clock, transitions):
    engine = make_engine()
    engine.operator.force_breaker(TOOL, "forced_open")
    engine.operator.force_breaker(TOOL, "forced_open")  # no move: no second incident
    engine.operator.force_breaker(TOOL, "closed")
    assert [(t.event, t.src, t.dst, t.reason) for t in transitions] == [
        ("breaker_forced", "closed", "forced_open", "operator"),
        ("breaker_forced", "forced_open", "closed", "operator"),
    ]


def test_a_failed_probe_through_the_engine_reopens_for_longer(make_engine, clock):
    engine = make_engine({"breaker": {"open_s": 30.0, "half_open_probes": 1}})
    for i in range(5):
        run(engine, clock, TOOL, {"page": i}, False, None, session=f"s{i}", error=OUTAGE)
    clock.advance(30.0)
    probe = engine.check_tool_call(call(TOOL, {"page": "p"}, session="p"))
    assert probe.allowed
    r = engine.record_tool_result(result(TOOL, False, None, call_id=probe.call_id, session="p", error=OUTAGE))
    assert r.breaker_state == "open"
    clock.advance(59.0)
    v = engine.check_tool_call(call(TOOL, {"page": "q"}, session="q"))
    assert (v.allowed, v.heuristic, v.observation["retry_after_s"]) == (False, "circuit_open", 1.0)


def test_forced_open_breaker_blocks_every_session_until_reset(make_engine, clock):
    engine = make_engine()
    engine.operator.force_breaker(TOOL, "forced_open")
    assert engine.operator.breaker_state(TOOL) is S.FORCED_OPEN
    for i in range(3):
        clock.advance(3600.0)
        v = engine.check_tool_call(call(TOOL, {"page": i}, session=f"s{i}"))
        assert not v.allowed
        assert (v.heuristic, v.scope) == ("circuit_open", "tool")
        assert v.observation["retry_after_s"] is None
    engine.operator.force_breaker(TOOL, S.CLOSED)
    assert engine.check_tool_call(call(TOOL, {"page": "x"}, session="x")).allowed


def test_metrics_only_breaker_never_blocks_and_warns_once_tripped(make_engine, clock):
    engine = make_engine()
    engine.operator.force_breaker(TOOL, "metrics_only")
    verdicts = [run(engine, clock, TOOL, {"page": i}, False, None, session=f"s{i}", error=OUTAGE) for i in range(12)]
    assert all(v.allowed for v in verdicts)
    assert [v.heuristic for v in verdicts[:5]] == [None] * 5
    assert [(v.heuristic, v.severity) for v in verdicts[5:]] == [("circuit_open", "warn")] * 7
    assert engine.operator.breaker_state(TOOL) is S.METRICS_ONLY


def test_force_breaker_rejects_a_state_no_operator_may_set(make_engine):
    engine = make_engine()
    engine.operator.force_breaker(TOOL, "forced_open")
    # OPEN and HALF_OPEN are the breaker's own states: no operator move leads there
    for dst in ("half_open", "open", S.OPEN):
        with pytest.raises(ValueError, match=rf"breaker ':{TOOL}': an operator may set .*, not {S(dst).value}$"):
            engine.operator.force_breaker(TOOL, dst)
        assert engine.operator.breaker_state(TOOL) is S.FORCED_OPEN
    engine.operator.force_breaker(TOOL, "forced_open")  # repeated: nothing moves
    assert engine.operator.breaker_state(TOOL) is S.FORCED_OPEN
