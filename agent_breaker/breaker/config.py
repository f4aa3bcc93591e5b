"""A tool breaker's settings (`breaker:` in the config), beside the breaker they drive."""

from __future__ import annotations

from pydantic import Field, model_validator

from .._frozen import Frozen

DEFAULT_BREAKER_WINDOW_S = 60.0
DEFAULT_BREAKER_CONSECUTIVE_FAILURES = 5
DEFAULT_BREAKER_FAILURE_THRESHOLD: int | None = None
DEFAULT_BREAKER_FAILURE_RATE_PCT = 50.0
DEFAULT_BREAKER_MIN_CALLS = 20
DEFAULT_BREAKER_OPEN_S = 30.0
DEFAULT_BREAKER_BACKOFF_MULTIPLIER = 2.0
DEFAULT_BREAKER_MAX_OPEN_S = 600.0
DEFAULT_BREAKER_HALF_OPEN_PROBES = 2
DEFAULT_BREAKER_PROBE_TIMEOUT_S = 60.0


class BreakerConfig(Frozen):
    """Tool circuit breakers (circuit_open / circuit_half_open)."""

    key_by_tenant: bool = Field(
        True,
        description="One breaker per (tenant, tool): one tenant's failures cannot open a tool for the others "
        "(false: one breaker per tool for every tenant).",
    )
    dependency_args: tuple[str, ...] = Field(
        ("url", "uri", "endpoint", "base_url"),
        description="A call whose top-level argument of one of these names is a URL gets the breaker of that URL's "
        "host (tool@host): failures of hosts the agent chose do not open the tool for every host.",
    )
    min_sessions: int = Field(
        2,
        ge=1,
        le=16,
        description="Sessions whose failures a shared breaker needs in its window before it opens for everyone "
        "(1: any session's). One session's own failures open its own breaker, for it alone.",
    )
    window_s: float = Field(DEFAULT_BREAKER_WINDOW_S, gt=0, description="Sliding time window of call outcomes.")
    bucket_s: float = Field(1.0, gt=0, description="Granularity of the sliding window.")
    consecutive_failures: int | None = Field(
        DEFAULT_BREAKER_CONSECUTIVE_FAILURES, ge=1, description="Open after this many failures in a row (null: off)."
    )
    failure_threshold: int | None = Field(
        DEFAULT_BREAKER_FAILURE_THRESHOLD, ge=1, description="Open after this many failures in the window (null: off)."
    )
    failure_rate_pct: float | None = Field(
        DEFAULT_BREAKER_FAILURE_RATE_PCT, gt=0, le=100, description="Open at this failure rate (null: off)."
    )
    min_calls: int = Field(DEFAULT_BREAKER_MIN_CALLS, ge=1, description="Calls in the window before the rate counts.")
    slow_call_ms: float | None = Field(None, gt=0, description="Latency over this counts as slow (null: off).")
    slow_calls_are_failures: bool = Field(True, description="Slow calls count as failures.")
    open_s: float = Field(DEFAULT_BREAKER_OPEN_S, gt=0, description="First open interval.")
    backoff_multiplier: float = Field(
        DEFAULT_BREAKER_BACKOFF_MULTIPLIER, ge=1, description="Open interval multiplier after a failed probe."
    )
    max_open_s: float = Field(DEFAULT_BREAKER_MAX_OPEN_S, gt=0, description="Cap of the open interval.")
    jitter_pct: float = Field(0.0, ge=0, le=100, description="Random +/- spread of each open interval.")
    half_open_probes: int = Field(
        DEFAULT_BREAKER_HALF_OPEN_PROBES, ge=1, description="K: probes admitted in half-open; K successes close."
    )
    probe_timeout_s: float = Field(
        DEFAULT_BREAKER_PROBE_TIMEOUT_S, gt=0, description="A probe with no result after this frees its slot."
    )
    semantic_failures: bool = Field(
        True, description='Count {"status": "error"}, {"error": ...}, {"success": false}, {"ok": false} as failures.'
    )

    @model_validator(mode="after")
    def _open_interval_order(self) -> BreakerConfig:
        if self.max_open_s < self.open_s:
            raise ValueError(f"max_open_s must be >= open_s ({self.open_s}), but was {self.max_open_s}")
        if self.bucket_s > self.window_s:
            raise ValueError(f"bucket_s must be <= window_s ({self.window_s}), but was {self.bucket_s}")
        return self
