"""The human escalation queue and its transactional outbox.

A session-terminal trip hands the session to a human: the engine writes an `Escalation` (names,
numbers and hashes, no payload) through an `EscalationStore`, and the session stays frozen
(`frozen()` answers its escalation) until an operator resolves it (`resolve()`;
`agent-breaker escalations`, or `POST /v1/agent-breaker/escalations/{id}`): `resume` lifts
the freeze, `abort` keeps the session closed for good. Each
escalation, resolution and incident is also a row of the store's outbox, written in the
same transaction, which a `Relay` delivers at least once, with an idempotency key, to the
incident sinks and RabbitMQ (`rabbitmq.RabbitPublisher`; consumers drop repeats,
`rabbitmq.DedupConsumer`).

    store = SqliteEscalations(db_path(config.escalations))
    esc = store.escalate(Escalation.new(session="s1", heuristic="unverified_claim", reason=..., now=time.time()))
    store.frozen(None, "s1")  # -> esc, until store.resolve(esc.id, "resume")
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any, Protocol

from .records import (
    BAD_ID,
    DECISIONS,
    MAX_NOTE_CHARS,
    STATUSES,
    AlreadyResolved,
    Decision,
    Escalation,
    EscalationError,
    EscalationStorageError,
    InvalidEscalation,
    Spend,
    Status,
    ToolOutcome,
    UnknownEscalation,
    checked_id,
    escalation_key,
)
from .relay import Relay, RelayBusy, Target, targets_for
from .sqlite import DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, OutboxRow, SqliteEscalations, db_path, default_db_path

ESCALATIONS_PATH = "/v1/agent-breaker/escalations"


class EscalationStore(Protocol):
    """What the engine and the operator's tools need of an escalation store."""

    def escalate(self, record: Escalation) -> Escalation:
        """Open `record` (and its outbox row, atomically); the escalation already open for its
        key is returned instead, unchanged."""
        ...

    def frozen(self, tenant: str | None, session: str) -> Escalation | None:
        """The escalation that keeps the session frozen: an open one (waiting for a human), else
        an aborted one (closed for good); None when there is neither (a resumed one frees it)."""
        ...

    def resolve(self, escalation_id: str, decision: Decision, note: str | None = None) -> Escalation:
        """Resume or abort an open escalation, once (AlreadyResolved, UnknownEscalation)."""
        ...

    def list(self, status: Status | None = None, limit: int = DEFAULT_LIST_LIMIT) -> builtins.list[Escalation]:
        """The newest first."""
        ...

    def get(self, escalation_id: str) -> Escalation | None: ...

    def add_incident(self, incident: Mapping[str, Any]) -> str:
        """Put an incident on the outbox; its idempotency key."""
        ...


__all__ = [
    "BAD_ID",
    "DECISIONS",
    "DEFAULT_LIST_LIMIT",
    "ESCALATIONS_PATH",
    "MAX_LIST_LIMIT",
    "MAX_NOTE_CHARS",
    "STATUSES",
    "AlreadyResolved",
    "Decision",
    "Escalation",
    "EscalationError",
    "EscalationStorageError",
    "EscalationStore",
    "InvalidEscalation",
    "OutboxRow",
    "Relay",
    "RelayBusy",
    "Spend",
    "SqliteEscalations",
    "Status",
    "Target",
    "ToolOutcome",
    "UnknownEscalation",
    "checked_id",
    "db_path",
    "default_db_path",
    "escalation_key",
    "targets_for",
]
