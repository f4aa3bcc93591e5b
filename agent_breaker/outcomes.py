"""Result classification: what a tool result says about its call.

Failed (the transport said so, or the payload does, or the tool's own predicate), slow (over the
breaker's slow-call threshold), transient (an error expected to clear by itself), in progress
(a status that says "not finished yet": the call is a poll). Pure functions of the result.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .config import AgentBreakerConfig
from .events import ToolResult

FailurePredicate = Callable[[Any], bool]

_FAILED_STATUS = frozenset({"error", "failed", "failure", "fail"})
_TRANSIENT = re.compile(
    r"\b(?:429|502|503|504)\b|time[ds]? ?out|temporar|unavailable|rate.?limit|too many requests|try again"
    r"|connection (?:reset|refused|aborted)|overloaded|throttl",
    re.IGNORECASE,
)
_NOT_DONE_FIELDS = ("done", "ready", "complete", "completed", "finished")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one result says about its call."""

    failed: bool
    slow: bool
    transient: bool
    in_progress: bool


def classify(
    ev: ToolResult, cfg: AgentBreakerConfig, in_progress_values: frozenset[str], predicate: FailurePredicate | None
) -> Outcome:
    failed = (
        not ev.ok
        or (cfg.breaker.semantic_failures and is_semantic_failure(ev.result))
        or (predicate is not None and bool(predicate(ev.result)))
    )
    slow = cfg.breaker.slow_call_ms is not None and ev.latency_ms is not None and ev.latency_ms > cfg.breaker.slow_call_ms
    return Outcome(failed, slow, failed and is_transient(ev), in_progress(ev.result, in_progress_values))


def is_semantic_failure(result: Any) -> bool:
    """A payload that says the call failed even though the transport said ok."""
    if not isinstance(result, dict):
        return False
    status = result.get("status")
    if isinstance(status, str) and status.lower() in _FAILED_STATUS:
        return True
    if result.get("error") not in (None, "", False, {}, []):
        return True
    return result.get("success") is False or result.get("ok") is False


def in_progress(result: Any, values: frozenset[str]) -> bool:
    """A result that says "not finished yet": its call is a poll."""
    if not isinstance(result, dict):
        return False
    for name in ("status", "state", "phase"):
        v = result.get(name)
        if isinstance(v, str) and v.lower().replace(" ", "_").replace("-", "_") in values:
            return True
    return any(result.get(name) is False for name in _NOT_DONE_FIELDS)


def is_transient(ev: ToolResult) -> bool:
    """An error that is expected to clear by itself (timeouts, rate limits, 502-504)."""
    if ev.error and _TRANSIENT.search(ev.error):
        return True
    result = ev.result
    if isinstance(result, dict):
        for name in ("error", "message", "status", "code", "status_code"):
            v = result.get(name)
            if isinstance(v, (str, int)) and not isinstance(v, bool) and _TRANSIENT.search(str(v)):
                return True
    return False
