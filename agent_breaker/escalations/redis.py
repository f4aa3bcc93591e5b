"""The escalation queue and its outbox on Redis, for fleets: every worker, the CLI and the server
see one queue, and a session frozen by one worker is frozen for all of them.

Each write is one Lua script (`escalations.lua`, registered once, EVALSHA) that changes the
records and appends the outbox message to a stream (XADD) together: an escalation and its
message, a resolution and its message, exist both or neither. The script checks everything
that could fail before its first write, since Redis does not roll a script back.

Keys, under the prefix and the hash tag `{esc}` (one slot on Redis Cluster; escalations are
few), ids and names escaped as the guard state's are (`store.base.escape_key_part`):

- `<prefix>:{esc}:e:<id>`: a hash per escalation: `status`, `record` (its JSON), `member`,
  `collapsed` (the sessions collapsed onto it);
- `<prefix>:{esc}:key:<key>`: the id of the escalation open for an idempotency key (tenant,
  session and heuristic), so a second `escalate()` returns it, from any process;
- `<prefix>:{esc}:open:<tenant>:<session>`, `...:aborted:<tenant>:<session>`: what `frozen()` reads;
- `<prefix>:{esc}:collapsed:<tenant>:<session>`: the escalations the session was collapsed onto
  (past its tenant's `max_open_per_tenant`), which `frozen()` reads too; `<prefix>:{esc}:c:<id>`:
  the sessions collapsed onto an escalation, deleted with it;
- `<prefix>:{esc}:list:all`, `list:open`, `list:resumed`, `list:aborted`: sorted by `created_at`
  for `list()`, which reads at most MAX_LIST_LIMIT; `tenant:<tenant>:all`, `...:open`, ...:
  the same for one tenant (`list(tenant=...)`);
- `<prefix>:{esc}:resolved`: resolved escalations by resolution time, for retention;
- `<prefix>:{esc}:outbox`: the stream; `<prefix>:{esc}:seen:<key>`: an incident added in the
  last INCIDENT_KEY_TTL_S (adding it again adds nothing).

A resolved escalation is deleted `retain_resolved_s` (30 days) after its resolution, as in the
SQLite file: each escalate and resolve deletes a batch of those past it. Nothing but names, numbers and hashes is
written, unless a tenant opted in to excerpts (`records.py`).

The relay's side is a consumer group (GROUP) on the stream. `pending()` hands a relay, in this
order: what it read before and has not acknowledged (a failed pass: again, oldest first), what
other relays hold unacknowledged for longer than `claim_idle_s` (XAUTOCLAIM: a relay killed
mid-batch), then new entries; `mark_delivered()` acknowledges (XACK). So:

- a relay killed mid-batch loses nothing: what it read and did not acknowledge goes to another
  relay (or to itself restarted) once it has been idle `claim_idle_s`; what it delivered but
  did not acknowledge is delivered again (at least once: consumers drop repeated keys);
- relays run side by side without delivering an entry twice: each entry goes to one relay, and
  a relay reads its unacknowledged entries again on each pass, which keeps them from looking
  idle. Only an entry one relay holds for longer than `claim_idle_s` without a pass (a target
  that hangs that long) is taken over and delivered by both;
- the order is the stream's within one relay; with several, each delivers its share in order,
  and an entry taken over from a dead relay comes after newer ones other relays delivered.

The stream is trimmed (`prune_delivered()`, run by the relay) only below the oldest entry some
group has not acknowledged: undelivered entries stay, however old. With no relay it grows.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, cast

import redis as redis_lib

from ..config import DEFAULT_MAX_OPEN_PER_TENANT
from ..store.base import checked_prefix, escape_key_part, without_password
from ..store.redis_client import REDIS_ERRORS, redis_client, register_script
from .outbox import (
    OutboxKind,
    OutboxRow,
    capped_key,
    capped_message,
    escalation_message,
    incident_message,
    json_up_to_escalation,
    resolution_message,
    to_json,
)
from .records import (
    DEFAULT_LIST_LIMIT,
    RETAIN_RESOLVED_S,
    AlreadyResolved,
    Decision,
    Escalation,
    EscalationStorageError,
    Status,
    UnknownEscalation,
    checked_decision,
    checked_id,
    checked_listing,
    checked_max_open,
    checked_note,
    checked_open,
    checked_retention,
)
from .relay import DEFAULT_RETENTION_S

#: as long as a decision waits on the guard state (storage.timeout_ms): the engine escalates on its decision path
DEFAULT_TIMEOUT_S = 0.25
#: a relay holding an entry unacknowledged this long is taken to be dead: another takes it over
DEFAULT_CLAIM_IDLE_S = 300.0
GROUP = "agent-breaker-relay"
#: how long adding the same incident again adds nothing (as long as the relay keeps delivered messages)
INCIDENT_KEY_TTL_S = DEFAULT_RETENTION_S


def _lua() -> str:
    return resources.files(__package__).joinpath("escalations.lua").read_text(encoding="utf-8")


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _stream_id(position: str) -> tuple[int, int]:
    ms, _, seq = position.partition("-")
    return int(ms), int(seq)


class RedisEscalations:
    """The escalation queue and outbox on Redis (see the module docstring): the same contract
    as `SqliteEscalations`; safe to share between threads and processes. `url_or_client`: a
    redis://, rediss://, unix://, redis+cluster:// or rediss+cluster:// URL (commands time out
    after `timeout_s`), or a client of the caller's (its own timeouts; `close()` leaves it open)."""

    #: relays share a Redis outbox (the consumer group): no file to lock
    exclusive_file: Path | None = None

    def __init__(
        self,
        url_or_client: str | redis_lib.Redis | redis_lib.RedisCluster,
        *,
        prefix: str = "ab",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        claim_idle_s: float = DEFAULT_CLAIM_IDLE_S,
        retain_resolved_s: float = RETAIN_RESOLVED_S,
        max_open_per_tenant: int = DEFAULT_MAX_OPEN_PER_TENANT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if claim_idle_s < 0:
            raise ValueError(f"claim_idle_s must be at least 0, but was {claim_idle_s}")
        self.retain_resolved_s = checked_retention(retain_resolved_s)
        self.max_open_per_tenant = checked_max_open(max_open_per_tenant)
        self.prefix = checked_prefix(prefix)
        if isinstance(url_or_client, str):
            self.redis = redis_client(url_or_client, timeout_s=timeout_s)
            self.where = f"Redis at {without_password(url_or_client)}, prefix {prefix}"
            self._owned = True
        else:
            self.redis = url_or_client
            self.where = f"Redis ({_described(url_or_client)}), prefix {prefix}"
            self._owned = False
        self.claim_idle_s = claim_idle_s
        self.clock = clock
        #: this object's name in the relays' consumer group
        self.consumer = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._head = f"{prefix}:{{esc}}:"
        self._outbox = self._head + "outbox"
        self._script = register_script(self.redis, _lua())

    # ------------------------------------------------------------------ the queue (EscalationStore)

    def escalate(self, record: Escalation) -> Escalation:
        """Open `record` and its outbox entry in one script, or return the escalation already
        open for its key (same tenant, session and heuristic) untouched: no second entry. Past
        the tenant's cap of open escalations, collapse it onto the tenant's newest open one and
        return that one (as `SqliteEscalations` does); a session collapsed onto one still open
        is counted once."""
        checked_open(record)
        key, message = escalation_message(record)
        keys = [
            self._outbox,
            self._record_key(record.id),
            self._head + "key:" + record.key,
            self._session_keys(record.tenant, record.session)[0],
            self._head + "list:all",
            self._head + "list:open",
            self._head + "seq",
            *self._tenant_lists(record.tenant, "all", "open"),
            self._head + "resolved",
            self._collapsed_key(record.tenant, record.session),
        ]
        now = self.clock()
        alert = json_up_to_escalation(capped_message(record, self.max_open_per_tenant, now))
        args = ["escalate", self._head, record.id, to_json(record.to_dict()), repr(record.created_at), key, to_json(message)]
        args += [
            repr(now),
            _tenant_part(record.tenant),
            self._who(record.tenant, record.session),
            repr(now - self.retain_resolved_s),
            str(self.max_open_per_tenant),
            capped_key(""),
            alert,
        ]
        with self._errors():
            existing = self._script(keys=keys, args=args)
        return record if existing is None else _escalation(existing)

    def frozen(self, tenant: str | None, session: str) -> Escalation | None:
        """The escalation that keeps this session frozen, or None: an open one (the oldest, if
        several heuristics escalated it), else the latest aborted one; one the session was
        collapsed onto counts as its own. One round trip, so a resolution made by another
        process counts at once."""
        keys = [*self._session_keys(tenant, session), self._collapsed_key(tenant, session)]
        with self._errors():
            found = self._script(keys=keys, args=["frozen", self._head])
        return None if found is None else _escalation(found)

    def resolve(self, escalation_id: str, decision: Decision, note: str | None = None) -> Escalation:
        """Resume or abort an open escalation, with its `resolution` outbox entry, in one script.
        Once only: a second resolution (another operator, another process) raises
        AlreadyResolved naming the status; an unknown id raises UnknownEscalation."""
        escalation_id = checked_id(escalation_id)
        decision = checked_decision(decision)
        note = checked_note(note)
        current = self.get(escalation_id)
        if current is None:
            raise UnknownEscalation(f"no escalation {escalation_id}")
        if current.status != "open":
            raise AlreadyResolved(escalation_id, current.status)
        # what is read above never changes but the status, which the script checks again
        done = current.resolved(decision, note, self.clock())
        key, message = resolution_message(done)
        keys = [
            self._outbox,
            self._record_key(escalation_id),
            self._head + "key:" + done.key,
            *self._session_keys(done.tenant, done.session),
            self._head + "list:open",
            self._head + "list:" + done.status,
            *self._tenant_lists(done.tenant, "open", done.status),
            self._head + "resolved",
        ]
        assert done.resolved_at is not None  # a resolved record has its time
        args = ["resolve", escalation_id, done.status, to_json(done.to_dict()), repr(done.created_at), key, to_json(message)]
        args += [repr(done.resolved_at), self._head, repr(done.resolved_at - self.retain_resolved_s)]
        with self._errors():
            before = _text(self._script(keys=keys, args=args))
        if not before:
            raise UnknownEscalation(f"no escalation {escalation_id}")
        if before != "open":  # another operator resolved it between the read and the script
            raise AlreadyResolved(escalation_id, before)
        return done

    def list(
        self, status: Status | None = None, limit: int = DEFAULT_LIST_LIMIT, *, tenant: str | None = None
    ) -> builtins.list[Escalation]:
        """The newest escalations first (`status`, `tenant`: only those), at most `limit` (1 to 1000)."""
        status, limit, tenant = checked_listing(status, limit, tenant)
        listed = self._head + "list:" + (status or "all") if tenant is None else self._tenant_lists(tenant, status or "all")[0]
        with self._errors():
            found = self._script(keys=[listed], args=["list", self._head, limit])
        return [_escalation(raw) for raw in found]

    def get(self, escalation_id: str) -> Escalation | None:
        """One escalation, or None; a malformed id raises InvalidEscalation."""
        key = self._record_key(checked_id(escalation_id))
        with self._errors():
            raw = self.redis.hmget(key, "record", "collapsed")
        return None if raw[0] is None else _escalation(raw)

    def add_incident(self, incident: Mapping[str, Any]) -> str:
        """Put an incident (`Incident.to_dict()`, `BreakerIncident.to_dict()`) on the outbox;
        its idempotency key is a hash of its content, so adding it twice (within
        INCIDENT_KEY_TTL_S) adds one entry. Returns the key."""
        key, message = incident_message(incident)
        args: builtins.list[str | int] = ["incident", key, to_json(message), repr(self.clock()), int(INCIDENT_KEY_TTL_S)]
        with self._errors():
            self._script(keys=[self._outbox, self._head + "seen:" + key], args=args)
        return key

    # ------------------------------------------------------------------ the outbox (the relay's side)

    def pending(self, limit: int) -> builtins.list[OutboxRow]:
        """Entries for this relay to deliver, oldest first (module docstring); `attempts`: how
        often the group handed the entry out before (to this relay, or to one that died)."""
        args: builtins.list[str | int] = ["pending", GROUP, self.consumer, limit, int(self.claim_idle_s * 1000)]
        with self._errors():
            entries, times = self._script(keys=[self._outbox], args=args)
        delivered = {_text(times[i]): int(times[i + 1]) for i in range(0, len(times), 2)}
        rows = []
        for raw_id, flat in entries:
            position = _text(raw_id)
            entry = {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat), 2)}
            rows.append(
                OutboxRow(
                    position,
                    entry["key"],
                    cast(OutboxKind, entry["kind"]),  # written by the script: one of the kinds
                    json.loads(entry["message"]),
                    float(entry["created_at"]),
                    delivered.get(position, 1) - 1,
                )
            )
        rows.sort(key=lambda row: _stream_id(str(row.position)))
        return rows

    def mark_delivered(self, positions: builtins.list[Any]) -> None:
        """Every target accepted these entries: acknowledged, in one command."""
        if positions:
            with self._errors():
                self.redis.xack(self._outbox, GROUP, *positions)

    def mark_attempted(self, position: Any) -> None:
        """Nothing to write: the group counts each time it hands an entry out (`attempts`)."""

    def pending_count(self) -> int:
        """Entries no relay has acknowledged yet (all of them before a relay first read the stream)."""
        with self._errors():
            return int(self._script(keys=[self._outbox], args=["count", GROUP]))

    def prune_delivered(self, before: float) -> int:
        """Trim entries written before `before` (epoch seconds, as stream ids count them) that every
        group acknowledged; and forget relays that hold nothing and were silent for `claim_idle_s`."""
        args: builtins.list[str | int] = ["trim", GROUP, int(before * 1000), int(self.claim_idle_s * 1000)]
        with self._errors():
            return int(self._script(keys=[self._outbox], args=args))

    def close(self) -> None:
        """Close the connections this store opened (a client given to it stays open)."""
        if self._owned:
            self.redis.close()

    # ------------------------------------------------------------------ internals

    def _record_key(self, escalation_id: str) -> str:
        return self._head + "e:" + escalation_id

    def _who(self, tenant: str | None, session: str) -> str:
        return _tenant_part(tenant) + ":" + escape_key_part(session)

    def _session_keys(self, tenant: str | None, session: str) -> builtins.list[str]:
        """The session's open and aborted sets."""
        who = self._who(tenant, session)
        return [self._head + "open:" + who, self._head + "aborted:" + who]

    def _collapsed_key(self, tenant: str | None, session: str) -> str:
        return self._head + "collapsed:" + self._who(tenant, session)

    def _tenant_lists(self, tenant: str | None, *statuses: str) -> builtins.list[str]:
        return [self._head + "tenant:" + _tenant_part(tenant) + ":" + status for status in statuses]

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """A driver error (Redis down, a timeout, a script refusing a key of the wrong type)
        becomes EscalationStorageError."""
        try:
            yield
        except REDIS_ERRORS as exc:
            raise EscalationStorageError(f"{self.where}: {type(exc).__name__}: {exc}") from None


def _tenant_part(tenant: str | None) -> str:
    """A tenant in a key. A tenant is a non-empty id, and its escaped form never is a lone "%",
    so that stands for no tenant."""
    return "%" if tenant is None else escape_key_part(tenant)


def _escalation(raw: builtins.list[Any]) -> Escalation:
    """A record as the script hands it out: its JSON, and the sessions collapsed onto it (None: none)."""
    record, collapsed = raw
    return Escalation.from_dict({**json.loads(record), "collapsed": int(collapsed or 0)})


def _described(client: redis_lib.Redis | redis_lib.RedisCluster) -> str:
    """Where a caller's client points, for messages (never its password)."""
    if isinstance(client, redis_lib.RedisCluster):
        node = client.get_default_node()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
        return f"Redis Cluster, node {node.host}:{node.port}"
    kw = client.connection_pool.connection_kwargs
    return str(kw["path"]) if "path" in kw else f"{kw.get('host')}:{kw.get('port')}/{kw.get('db', 0)}"
