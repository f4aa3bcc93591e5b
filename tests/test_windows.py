"""BucketWindow: a sliding window over fixed buckets with subtract-on-evict totals."""

from __future__ import annotations

import pytest

from agent_breaker._windows import BucketWindow

T0 = 1_000_000.0


def make(window_s: float = 10.0, bucket_s: float = 1.0, width: int = 3) -> BucketWindow:
    return BucketWindow(window_s, bucket_s, width)


def test_empty_window_totals_are_zero_for_every_series():
    w = make(width=3)
    assert w.read(T0) == [0.0, 0.0, 0.0]


def test_totals_sum_every_add_per_series():
    w = make()
    w.add(T0, 1.0, 1.0, 0.0)
    w.add(T0 + 0.5, 1.0, 0.0, 1.0)
    w.add(T0 + 3.2, 1.0, 1.0, 1.0)
    assert w.read(T0 + 3.2) == [3.0, 2.0, 2.0]


def test_adds_in_one_bucket_share_it_and_new_buckets_open_per_bucket_s():
    w = make()
    w.add(T0, 1.0, 0.0, 0.0)
    w.add(T0 + 0.99, 1.0, 0.0, 0.0)
    assert len(w.buckets) == 1
    w.add(T0 + 1.0, 1.0, 0.0, 0.0)
    assert len(w.buckets) == 2
    assert [b[0] for b in w.buckets] == [T0, T0 + 1]
    assert w.read(T0 + 1.0) == [3.0, 0.0, 0.0]


def test_add_with_fewer_values_than_width_leaves_other_series_untouched():
    w = make(width=3)
    w.add(T0, 5.0)
    assert w.read(T0) == [5.0, 0.0, 0.0]


def test_event_is_counted_until_window_s_has_passed_since_its_bucket():
    w = make(window_s=10.0)
    w.add(T0, 1.0, 1.0, 0.0)
    assert w.read(T0 + 9.999) == [1.0, 1.0, 0.0]
    assert w.read(T0 + 10.0) == [0.0, 0.0, 0.0]
    assert w.buckets == []


def test_eviction_drops_only_buckets_older_than_the_window():
    w = make(window_s=10.0)
    w.add(T0, 1.0, 1.0, 0.0)  # bucket T0
    w.add(T0 + 4.0, 2.0, 0.0, 1.0)  # bucket T0+4
    w.add(T0 + 8.0, 4.0, 4.0, 4.0)  # bucket T0+8
    assert w.read(T0 + 9.0) == [7.0, 5.0, 5.0]
    assert w.read(T0 + 10.0) == [6.0, 4.0, 5.0]  # T0 evicted
    assert w.read(T0 + 14.0) == [4.0, 4.0, 4.0]  # T0+4 evicted
    assert [b[0] for b in w.buckets] == [T0 + 8]
    assert w.read(T0 + 18.0) == [0.0, 0.0, 0.0]


def test_subtract_on_evict_keeps_totals_equal_to_the_sum_of_live_buckets():
    w = make(window_s=5.0, width=2)
    for i in range(40):
        now = T0 + i * 0.75
        w.add(now, 1.0, float(i % 3))
        totals = w.read(now)
        expected = [sum(b[1] for b in w.buckets), sum(b[2] for b in w.buckets)]
        assert totals == expected
        # only the last 5 one-second buckets are live
        assert all(b[0] > int(now) - 5 for b in w.buckets)


def test_totals_after_many_evictions_match_a_recount_of_the_window():
    w = make(window_s=3.0, width=1)
    for i in range(10):
        w.add(T0 + i, float(i + 1))
    # live buckets: T0+7, T0+8, T0+9 hold 8, 9, 10
    assert w.read(T0 + 9.5) == [27.0]
    assert w.read(T0 + 10.0) == [19.0]
    assert w.read(T0 + 11.0) == [10.0]


def test_window_that_empties_resets_totals_to_exact_zero():
    w = make(window_s=2.0, width=1)
    w.add(T0, 0.1)
    w.add(T0 + 1.0, 0.2)
    w.add(T0 + 1.5, 0.7)
    w.read(T0 + 2.0)  # evicts the 0.1 bucket: subtraction may leave float residue
    assert w.read(T0 + 100.0) == [0.0]


def test_late_event_lands_in_the_newest_bucket():
    w = make(window_s=10.0)
    w.add(T0 + 5.0, 1.0, 0.0, 0.0)
    w.add(T0 + 2.0, 1.0, 1.0, 0.0)  # a worker with a clock 3 s behind
    assert len(w.buckets) == 1
    assert w.buckets[0] == [T0 + 5, 2.0, 1.0, 0.0]
    assert w.read(T0 + 5.0) == [2.0, 1.0, 0.0]
    # it leaves with the newest bucket, not with the (older) bucket of its own time
    assert w.read(T0 + 14.999) == [2.0, 1.0, 0.0]
    assert w.read(T0 + 15.0) == [0.0, 0.0, 0.0]


def test_clear_forgets_every_bucket_and_total():
    w = make()
    w.add(T0, 1.0, 1.0, 1.0)
    w.add(T0 + 2.0, 3.0, 2.0, 1.0)
    w.clear()
    assert w.buckets == []
    assert w.read(T0 + 2.0) == [0.0, 0.0, 0.0]
    w.add(T0 + 3.0, 1.0, 0.0, 0.0)
    assert w.read(T0 + 3.0) == [1.0, 0.0, 0.0]


def test_coarser_buckets_evict_whole_buckets():
    w = BucketWindow(10.0, 5.0, 1)
    w.add(T0 + 1.0, 1.0)  # bucket index 200000 (T0 / 5)
    w.add(T0 + 6.0, 1.0)  # bucket index 200001
    assert w.read(T0 + 9.0) == [2.0]
    assert w.read(T0 + 10.0) == [1.0]  # first bucket evicted at index 200002
    assert w.read(T0 + 15.0) == [0.0]


@pytest.mark.parametrize(
    ("window_s", "bucket_s"),
    [(0.0, 1.0), (-1.0, 1.0), (10.0, 0.0), (10.0, -0.5)],
)
def test_window_and_bucket_must_be_positive(window_s, bucket_s):
    with pytest.raises(ValueError, match="window_s and bucket_s must be > 0"):
        BucketWindow(window_s, bucket_s, 3)
