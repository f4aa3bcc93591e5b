"""Injected clocks: the engine never reads the time itself."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Where the engine reads the time: the system clock live, a fake one in tests."""

    def now(self) -> float:
        """Seconds since any fixed origin (unix time for the system clock)."""


class SystemClock:
    """Wall-clock seconds: shared by every process of a fleet, unlike time.monotonic()."""

    __slots__ = ()

    def now(self) -> float:
        return time.time()


class FakeClock:
    """A clock tests move by hand."""

    __slots__ = ("_now",)

    def __init__(self, start_s: float = 1_000_000.0) -> None:
        self._now = float(start_s)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock does not go back, but advance was {seconds}")
        self._now += seconds

    def set(self, now_s: float) -> None:
        self._now = float(now_s)
