"""What a decision answers when the shared store fails: the `storage.on_error` policy.

`local` never gets here (the Redis store keeps guarding with in-process state); `fail_closed`
refuses the call (enforce mode) and `fail_open` lets it through, both with heuristic
`storage_unavailable`, a warning in the log, and a metric. One key whose stored value cannot be
read is refused under every policy (`corrupt_state`); the rest of the store goes on.
"""

from __future__ import annotations

import logging

from . import heuristics as H
from .config import StorageConfig
from .store import CorruptState, StorageError
from .verdicts import ResultVerdict, Severity, Trip, Verdict, verdict_for

log = logging.getLogger("agent_breaker")


def storage_unavailable(
    exc: StorageError, storage: StorageConfig, *, enforcing: bool, result: bool, tool: str | None
) -> tuple[Verdict | ResultVerdict, str]:
    """The verdict, and its severity ("block" or "warn"), for a decision the store could not take.
    A key whose stored state cannot be read (CorruptState) is refused whatever the policy: its
    halt, or an operator's forced-open breaker, may be in it."""
    if isinstance(exc, CorruptState):
        closed = enforcing
        severity: Severity = "block" if closed else "warn"
        reason = str(exc)
        log.error("agent-breaker: %s", reason)
        if result:
            return ResultVerdict(not closed, H.CORRUPT_STATE, reason), severity
        instruction = "The guard's state for this is damaged; an operator must reset it."
        return verdict_for(Trip(H.CORRUPT_STATE, "call", reason, instruction, {}), severity, tool), severity
    closed = storage.on_error == "fail_closed" and enforcing
    severity = "block" if closed else "warn"
    reason = f"guard state is unavailable ({exc}); policy {storage.on_error}"
    log.warning("agent-breaker: %s", reason)
    if result:
        return ResultVerdict(not closed, H.STORAGE_UNAVAILABLE, reason), severity
    trip = Trip(H.STORAGE_UNAVAILABLE, "call", reason, "The guard is unavailable; try again shortly.", {}, storage.retry_s)
    return verdict_for(trip, severity, tool), severity
