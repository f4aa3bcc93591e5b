"""The outbox as the relay sees it, whichever store keeps it (a SQLite table, a Redis stream),
and the messages both stores put on it.

A message is what targets receive (the record's JSON with a `kind`), with an idempotency key
consumers drop repeats by: `escalation:<id>`, `resolution:<id>`, `incident:<sha256 of its
content>`, `capped:<id>` (a tenant at its cap: its next escalations are collapsed onto `<id>`).
Where a message sits in its outbox (`OutboxRow.position`) means something only to the store
that handed it out: the relay gives it back to mark the message delivered.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from .records import Escalation, InvalidEscalation

OutboxKind = Literal["escalation", "resolution", "incident"]
#: the kind of the alert that a tenant reached its cap of open escalations
CAPPED = "escalations_capped"
#: an incident bigger than this is not one the engine made (they are names and numbers)
MAX_MESSAGE_BYTES = 65_536


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One message waiting for the relay: `message` is what targets receive, `key` its
    idempotency key (consumers drop a key they have seen), `position` where it sits in its
    outbox (opaque: a SQLite row number, a stream entry id), `attempts` how often it was
    handed out before (and not delivered)."""

    position: Hashable
    key: str
    kind: OutboxKind
    message: dict[str, Any]
    created_at: float
    attempts: int


class Outbox(Protocol):
    """What the relay needs of a store (`SqliteEscalations`, `RedisEscalations`)."""

    @property
    def exclusive_file(self) -> Path | None:
        """The file only one relay at a time may deliver from (the relay locks `<file>.relay-lock`),
        or None: relays may run side by side (a Redis consumer group hands each message to one)."""
        ...

    def pending(self, limit: int) -> list[OutboxRow]:
        """Undelivered messages, oldest first: first those a failed pass left, then new ones."""
        ...

    def mark_delivered(self, positions: list[Any]) -> None:
        """Every target accepted the messages at these positions."""
        ...

    def mark_attempted(self, position: Any) -> None:
        """A delivery of this message failed (it stays pending)."""
        ...

    def pending_count(self) -> int: ...

    def prune_delivered(self, before: float) -> int:
        """Forget messages delivered (SQLite) or written (Redis) before `before`, epoch seconds,
        never an undelivered one; how many went."""
        ...


def escalation_message(record: Escalation) -> tuple[str, dict[str, Any]]:
    """The outbox message of an escalation just opened, and its idempotency key."""
    return f"escalation:{record.id}", {"kind": "escalation", **record.to_dict()}


def resolution_message(record: Escalation) -> tuple[str, dict[str, Any]]:
    """The outbox message of an escalation just resolved, and its idempotency key."""
    return f"resolution:{record.id}", {"kind": "resolution", **record.to_dict()}


def capped_key(escalation_id: str) -> str:
    """The idempotency key of the alert that a tenant's escalations are collapsed onto
    `escalation_id`: one alert per crossing of the cap, however many collapse onto it."""
    return f"capped:{escalation_id}"


def capped_message(record: Escalation, max_open: int, now: float) -> dict[str, Any]:
    """The alert (an incident) that `record`'s tenant is at its cap of `max_open` open
    escalations: `record` and the tenant's next ones are collapsed onto its newest open
    escalation. Shaped as a trip's incident (severity, heuristic, session, reason), so every
    incident target renders it. Without the escalation's id, which comes last: a store adds it
    (`with_escalation`; the Redis script, which is where that escalation is found, appends it)."""
    return {
        "kind": CAPPED,
        "ts": now,
        "tenant": record.tenant,
        "session": record.session,
        "heuristic": record.heuristic,
        "severity": "warn",
        "max_open_per_tenant": max_open,
        "reason": f"the tenant has {max_open} open escalations, its cap: this session and the tenant's next ones are "
        "frozen under its newest open escalation (this alert's escalation_id) without records of their own, and its "
        "decision is theirs too",
    }


def with_escalation(message: dict[str, Any], escalation_id: str) -> dict[str, Any]:
    return {**message, "escalation_id": escalation_id}


def json_up_to_escalation(message: dict[str, Any]) -> str:
    """`to_json(with_escalation(message, escalation_id))` up to the id: what the Redis script
    completes with the id and `"}`."""
    return to_json(message)[:-1] + ',"escalation_id":"'


def incident_message(incident: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """An incident (`Incident.to_dict()`, `BreakerIncident.to_dict()`) as an outbox message, and
    its idempotency key: a hash of its content, so adding it twice adds one message."""
    try:
        canonical = json.dumps(dict(incident), sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        raise InvalidEscalation("incident: a JSON object of names and numbers") from None
    if len(canonical) > MAX_MESSAGE_BYTES:
        raise InvalidEscalation(f"incident: over {MAX_MESSAGE_BYTES} bytes as JSON")
    return "incident:" + hashlib.sha256(canonical.encode()).hexdigest(), json.loads(canonical)


def to_json(value: Any) -> str:
    """How both stores write a record or a message: compact, and ASCII only, so any text (a
    lone surrogate in an excerpt included) survives the round trip."""
    return json.dumps(value, separators=(",", ":"))
