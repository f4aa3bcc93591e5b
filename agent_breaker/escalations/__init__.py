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

Two stores keep the contract: `SqliteEscalations` (a file per machine, the default) and
`RedisEscalations` (a fleet's Redis: every worker, the CLI and the server see one queue);
`store_for(config)` opens the one a config names (`escalations.store`). Both cap the open
escalations of each tenant (`escalations.max_open_per_tenant`): past it, an escalation is
collapsed onto the tenant's newest open one (whose `collapsed` counts it, and whose decision
frees or closes its session too), and the first collapse onto one puts an alert on the outbox,
so one tenant's flood neither hides another's cases nor floods on-call.

    store = store_for(config)
    esc = store.escalate(Escalation.new(session="s1", heuristic="unverified_claim", reason=..., now=time.time()))
    store.frozen(None, "s1")  # -> esc, until store.resolve(esc.id, "resume")
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from .._extras import require
from ..config import (
    DEFAULT_MAX_OPEN_PER_TENANT,
    REDIS_URL_PREFIXES,
    REDIS_URLS_TEXT,
    AgentBreakerConfig,
    ConfigError,
    default_db_path,
)
from ..store.base import without_password
from .outbox import Outbox, OutboxRow
from .records import (
    BAD_ID,
    DECISIONS,
    DEFAULT_LIST_LIMIT,
    MAX_LIST_LIMIT,
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
from .sqlite import SqliteEscalations, db_path

log = logging.getLogger("agent_breaker.escalations")
if TYPE_CHECKING:
    from .redis import RedisEscalations

ESCALATIONS_PATH = "/v1/agent-breaker/escalations"


class EscalationStore(Protocol):
    """What the engine and the operator's tools need of an escalation store."""

    def escalate(self, record: Escalation) -> Escalation:
        """Open `record` (and its outbox row, atomically); the escalation already open for its
        key is returned instead, unchanged. Past its tenant's cap of open escalations, the
        tenant's newest open escalation is returned instead, `record`'s session collapsed onto
        it (frozen by it, counted in its `collapsed`), once per session."""
        ...

    def frozen(self, tenant: str | None, session: str) -> Escalation | None:
        """The escalation that keeps the session frozen: an open one (waiting for a human), else
        an aborted one (closed for good), its own or one it was collapsed onto; None when there
        is neither (a resumed one frees it)."""
        ...

    def resolve(self, escalation_id: str, decision: Decision, note: str | None = None) -> Escalation:
        """Resume or abort an open escalation, once (AlreadyResolved, UnknownEscalation)."""
        ...

    def list(
        self, status: Status | None = None, limit: int = DEFAULT_LIST_LIMIT, *, tenant: str | None = None
    ) -> builtins.list[Escalation]:
        """The newest first; `status`, `tenant`: only those."""
        ...

    def get(self, escalation_id: str) -> Escalation | None: ...

    def add_incident(self, incident: Mapping[str, Any]) -> str:
        """Put an incident on the outbox; its idempotency key."""
        ...


@dataclass(frozen=True, slots=True)
class RedisLocation:
    """Escalations on a Redis: its URL (never shown: `str()` masks the password), the key prefix
    and the command timeout."""

    url: str = field(repr=False)
    prefix: str
    timeout_s: float

    def __str__(self) -> str:
        return f"Redis at {without_password(self.url)}, prefix {self.prefix}"


#: where a store keeps escalations: a SQLite file, or a Redis
StoreLocation: TypeAlias = "Path | RedisLocation"


def store_location(
    config: AgentBreakerConfig, *, db: str | None = None, redis_url: str | None = None, prefix: str | None = None
) -> StoreLocation:
    """Where a config keeps its escalations: `escalations.store`, where `auto` is the Redis that
    holds the guard state (`storage` names a Redis URL), else the
    SQLite file `db_path()` finds. `db`, `redis_url`, `prefix`: the CLI's --db, --redis and
    --prefix, over the config."""
    if db and redis_url:
        raise ConfigError("--db names a SQLite file and --redis a Redis: one or the other")
    kind = "sqlite" if db else "redis" if redis_url else config.escalations.store
    url = redis_url or config.storage.url
    if kind == "auto":
        kind = "redis" if url.startswith(REDIS_URL_PREFIXES) else "sqlite"
    if kind == "sqlite":
        if prefix is not None:
            raise ConfigError("--prefix names keys on a Redis, but these escalations are in a SQLite file")
        return db_path(config.escalations, explicit=db)
    if not url.startswith(REDIS_URL_PREFIXES):
        # no part of the value in the message: a URL without its scheme still holds the password
        source = "--redis" if redis_url else "storage.url (escalations.store is redis)"
        raise ConfigError(f"{source} must be a {REDIS_URLS_TEXT} URL")
    return RedisLocation(url, prefix or config.storage.key_prefix, config.storage.timeout_ms / 1000)


def open_store(
    location: StoreLocation, *, max_open_per_tenant: int = DEFAULT_MAX_OPEN_PER_TENANT
) -> SqliteEscalations | RedisEscalations:
    """The store at `location` (a SQLite file is created if missing)."""
    if isinstance(location, Path):
        return SqliteEscalations(location, max_open_per_tenant=max_open_per_tenant)
    require("redis", "redis", "escalations on Redis")
    from .redis import RedisEscalations  # redis is imported only by a fleet

    return RedisEscalations(
        location.url, prefix=location.prefix, timeout_s=location.timeout_s, max_open_per_tenant=max_open_per_tenant
    )


def __getattr__(name: str) -> Any:
    # RedisEscalations without importing redis for those who keep their escalations in a file
    if name == "RedisEscalations":
        from .redis import RedisEscalations

        return RedisEscalations
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def store_for(config: AgentBreakerConfig) -> EscalationStore:
    """The escalation store a config names (`store_location`), with its cap of open escalations per tenant."""
    return open_store(store_location(config), max_open_per_tenant=config.escalations.max_open_per_tenant)


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
    "Outbox",
    "OutboxRow",
    "RedisEscalations",
    "RedisLocation",
    "Relay",
    "RelayBusy",
    "Spend",
    "SqliteEscalations",
    "Status",
    "StoreLocation",
    "Target",
    "ToolOutcome",
    "UnknownEscalation",
    "checked_id",
    "db_path",
    "default_db_path",
    "escalation_key",
    "open_store",
    "store_for",
    "store_location",
    "targets_for",
]


def serve_relays(configs: Iterable[AgentBreakerConfig]) -> list[Relay]:
    """The relays `agent-breaker serve` runs beside its engines: one per escalation store its
    configs name that has a target (the webhook, RabbitMQ, the incidents file). A SQLite file
    another relay already delivers from is left to it (RelayBusy)."""
    relays: list[Relay] = []
    seen: set[str] = set()
    for config in configs:
        location = store_location(config)
        if str(location) in seen:
            continue
        seen.add(str(location))
        targets, _closers = targets_for(config)
        if not targets:
            continue
        relay = Relay(open_store(location), targets)
        try:
            relays.append(relay.start())
        except RelayBusy as exc:
            log.warning("agent-breaker: %s; this server's relay stays off", exc)
    return relays
