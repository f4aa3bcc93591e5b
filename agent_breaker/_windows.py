"""Sliding time windows over fixed buckets ("subtract on evict": O(1) totals).

A window holds a few numeric series (calls, failures, slow calls; or tokens). Old buckets are
dropped and their values subtracted from the running totals, so reading the totals never
rescans the window. The state is plain lists, so it serializes as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class BucketWindow:
    """A sliding window of a few numeric series over fixed buckets."""

    window_s: float
    bucket_s: float
    width: int
    # each bucket: [bucket_index, v0, v1, ...]
    buckets: list[list[float]] = field(default_factory=list)
    totals: list[float] = field(default_factory=list)
    evicted_at: int = -(2**62)  # bucket index of the last eviction

    def __post_init__(self) -> None:
        if self.window_s <= 0 or self.bucket_s <= 0:
            raise ValueError(f"window_s and bucket_s must be > 0, but were {self.window_s} and {self.bucket_s}")
        if not self.totals:
            self.totals = [0.0] * self.width

    def _evict(self, now: float) -> int:
        # floor of the float quotient, exactly as the Redis script computes it (a // b can be
        # one less when b is not exactly representable, e.g. 1.0 // 0.1 == 9)
        index = math.floor(now / self.bucket_s)
        if index == self.evicted_at:
            return index  # nothing can have aged out since the last look
        self.evicted_at = index
        oldest = index - math.floor(self.window_s / self.bucket_s) + 1
        buckets = self.buckets
        drop = 0
        while drop < len(buckets) and buckets[drop][0] < oldest:
            old = buckets[drop]
            for i in range(self.width):
                self.totals[i] -= old[i + 1]
            drop += 1
        if drop:
            del buckets[:drop]
            if not buckets:
                # clears float residue from repeated subtraction
                self.totals = [0.0] * self.width
        return index

    def add(self, now: float, *values: float) -> None:
        index = self._evict(now)
        buckets = self.buckets
        if buckets and buckets[-1][0] >= index:
            # a late event (clock skew between workers) lands in the newest bucket
            bucket = buckets[-1]
        else:
            bucket = [index] + [0.0] * self.width
            buckets.append(bucket)
        for i, v in enumerate(values):
            bucket[i + 1] += v
            self.totals[i] += v

    def read(self, now: float) -> list[float]:
        self._evict(now)
        return self.totals

    def to_wire(self) -> dict[str, Any]:
        """The window as JSON (the form the Redis breaker script reads and writes too)."""
        return {
            "window_s": self.window_s,
            "bucket_s": self.bucket_s,
            "buckets": self.buckets,
            "totals": self.totals,
            "evicted_at": self.evicted_at,
        }

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> BucketWindow:
        totals = [float(t) for t in d["totals"]]
        return cls(d["window_s"], d["bucket_s"], len(totals), [list(b) for b in d["buckets"] or []], totals, int(d["evicted_at"]))

    def clear(self) -> None:
        self.buckets.clear()
        self.totals = [0.0] * self.width
