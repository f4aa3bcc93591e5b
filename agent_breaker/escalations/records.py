"""The escalation record: what a human needs to act on a frozen session, without the payload.

A record holds names, numbers and hashes (session, tenant, feature, agent, heuristic, the
engine's reason and counters, spend, the tools and outcome kinds involved); payload excerpts
only when the operator opted in for the tenant. Each field is checked as the record is built,
so a record read back from the database or a queue is as sound as one the engine made, and
the checks name the field, never its value (a value may be payload someone tried to slip in).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal, TypeGuard

from .._errors import AgentBreakerError
from ..events import MAX_ID_CHARS, is_id

Status = Literal["open", "resumed", "aborted"]
Decision = Literal["resume", "abort"]
STATUSES: tuple[Status, ...] = ("open", "resumed", "aborted")
DECISIONS: tuple[Decision, ...] = ("resume", "abort")
#: the status a decision leaves an escalation in
RESOLVED_BY: dict[Decision, Status] = {"resume": "resumed", "abort": "aborted"}

ID_PREFIX = "esc_"
_ID = re.compile(r"esc_[0-9a-f]{16}")
_MACHINE_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
# a counter's text value: a state, a unit, a hash; no spaces, so no sentence of payload fits
_MACHINE_STRING = re.compile(r"[A-Za-z0-9_.:/+=-]{0,128}")
MAX_REASON_CHARS = 1000
MAX_NOTE_CHARS = 2000
MAX_COUNTERS = 64
MAX_TOOLS = 64
MAX_EXCERPTS = 8
MAX_EXCERPT_CHARS = 2000
BAD_ID = f"escalation id: {ID_PREFIX} and 16 lowercase hex digits"
DEFAULT_LIST_LIMIT = 100
MAX_LIST_LIMIT = 1000
#: how long a resolved escalation is kept (from its resolution): 30 days. An open one is kept
#: until a human resolves it; an aborted session stays closed this long, far past any session's
#: lifetime, after which its id names a new session anyway.
RETAIN_RESOLVED_S = 30 * 86400.0

CounterValue = int | float | bool | str | None


class EscalationError(AgentBreakerError):
    """An escalation store could not do what was asked; the message says why."""


class InvalidEscalation(EscalationError, ValueError):
    """A record, id, decision or note that is not one (the message names the field)."""


class UnknownEscalation(EscalationError, LookupError):
    """No escalation has this id."""


class AlreadyResolved(EscalationError):
    """The escalation was resolved before (by another operator, or a retried request)."""

    def __init__(self, escalation_id: str, status: str) -> None:
        super().__init__(f"escalation {escalation_id} is already {status}: only an open escalation can be resolved")
        self.escalation_id = escalation_id
        self.status = status


class EscalationStorageError(EscalationError):
    """The store's database failed (locked past the busy timeout, disk full, unreadable)."""


def new_id() -> str:
    """An opaque id: nothing about the session can be read from it, nor the next one guessed."""
    return ID_PREFIX + secrets.token_hex(8)


def checked_id(escalation_id: Any) -> str:
    """A caller-given id (URL, CLI argument), or InvalidEscalation: only this shape reaches SQL."""
    if not isinstance(escalation_id, str) or not _ID.fullmatch(escalation_id):
        raise InvalidEscalation(BAD_ID)
    return escalation_id


def is_decision(value: object) -> TypeGuard[Decision]:
    return value in DECISIONS


def checked_decision(decision: Any) -> Decision:
    if not is_decision(decision):
        raise InvalidEscalation(f"decision must be one of {list(DECISIONS)}")
    return decision


def checked_note(note: Any) -> str | None:
    """An operator's note: text up to MAX_NOTE_CHARS, line breaks and tabs its only controls."""
    if note is None:
        return None
    if not isinstance(note, str) or len(note) > MAX_NOTE_CHARS:
        raise InvalidEscalation(f"note: text of at most {MAX_NOTE_CHARS} characters")
    if not note.replace("\n", " ").replace("\t", " ").isprintable():
        raise InvalidEscalation("note: printable text (line breaks and tabs allowed)")
    return note


def checked_listing(status: Any, limit: Any, tenant: Any = None) -> tuple[Status | None, int, str | None]:
    """A listing's filters and size: a status or None, 1 to MAX_LIST_LIMIT records, and a
    tenant id or None (every tenant)."""
    if status is not None and status not in STATUSES:
        raise InvalidEscalation(f"status must be one of {list(STATUSES)}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidEscalation(f"limit must be between 1 and {MAX_LIST_LIMIT}")
    if tenant is not None and not is_id(tenant):
        raise InvalidEscalation(f"tenant: an id of 1 to {MAX_ID_CHARS} printable characters")
    return status, limit, tenant


def checked_retention(retain_resolved_s: Any) -> float:
    if isinstance(retain_resolved_s, bool) or not isinstance(retain_resolved_s, int | float) or not retain_resolved_s > 0:
        raise ValueError(f"retain_resolved_s must be a number of seconds above 0, but was {retain_resolved_s!r}")
    return float(retain_resolved_s)


def checked_max_open(max_open_per_tenant: Any) -> int:
    if isinstance(max_open_per_tenant, bool) or not isinstance(max_open_per_tenant, int) or max_open_per_tenant < 1:
        raise ValueError(f"max_open_per_tenant must be a whole number above 0, but was {max_open_per_tenant!r}")
    return max_open_per_tenant


def checked_open(record: Escalation) -> Escalation:
    """A record to escalate: a store opens escalations, it never writes one already resolved."""
    if record.status != "open":
        raise InvalidEscalation(f"status: only an open escalation can be escalated, not a {record.status} one")
    return record


def escalation_key(tenant: str | None, session: str, heuristic: str) -> str:
    """The idempotency key of an escalation: one open escalation per tenant, session and
    heuristic. A hash of an unambiguous encoding (a JSON list), so `a|b` + `c` and `a` + `b|c`
    differ."""
    return hashlib.sha256(json.dumps([tenant, session, heuristic]).encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class Spend:
    """What the session had spent when it was escalated."""

    tokens: int = 0
    usd: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 0:
            raise InvalidEscalation("spend.tokens: a whole number >= 0")
        if isinstance(self.usd, bool) or not isinstance(self.usd, (int, float)) or not 0 <= self.usd < float("inf"):
            raise InvalidEscalation("spend.usd: a finite number >= 0")


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """One tool and one outcome kind of the session (`ok`, `dependency`, `call`, `blocked`, ...),
    with how many calls had it."""

    tool: str
    outcome: str
    count: int = 1

    def __post_init__(self) -> None:
        if not is_id(self.tool):
            raise InvalidEscalation(f"tools[].tool: a tool name of 1 to {MAX_ID_CHARS} printable characters")
        if not isinstance(self.outcome, str) or not _MACHINE_NAME.fullmatch(self.outcome):
            raise InvalidEscalation("tools[].outcome: a machine name (lowercase letters, digits, _)")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise InvalidEscalation("tools[].count: a whole number >= 0")

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "outcome": self.outcome, "count": self.count}


@dataclass(frozen=True, slots=True)
class Escalation:
    """A session handed to a human. While `status` is `open` the session is frozen: every later
    call is refused with this id; `resumed` frees it, `aborted` keeps it closed for good. Built
    by the engine with `Escalation.new`; moved by a store's `resolve`, which returns a new
    record (this one never changes). `collapsed`: the sessions of its tenant escalated while the
    tenant was at its cap of open escalations, frozen under this one (no record of their own):
    its decision is theirs too."""

    id: str
    key: str
    created_at: float
    session: str
    heuristic: str
    reason: str
    tenant: str | None = None
    feature: str | None = None
    agent: str | None = None
    counters: Mapping[str, CounterValue] = field(default_factory=dict)
    spend: Spend = Spend()
    tools: tuple[ToolOutcome, ...] = ()
    status: Status = "open"
    decision: Decision | None = None
    note: str | None = None
    resolved_at: float | None = None
    excerpts: tuple[str, ...] | None = None
    collapsed: int = 0

    @classmethod
    def new(
        cls,
        *,
        session: str,
        heuristic: str,
        reason: str,
        now: float,
        tenant: str | None = None,
        feature: str | None = None,
        agent: str | None = None,
        counters: Mapping[str, CounterValue] | None = None,
        spend: Spend = Spend(),
        tools: Iterable[ToolOutcome] = (),
        excerpts: Iterable[str] | None = None,
    ) -> Escalation:
        """An open escalation with a fresh id and its idempotency key; `now` in epoch seconds."""
        return cls(
            id=new_id(),
            key=escalation_key(tenant, session, heuristic),
            created_at=now,
            session=session,
            heuristic=heuristic,
            reason=reason,
            tenant=tenant,
            feature=feature,
            agent=agent,
            counters=dict(counters or {}),
            spend=spend,
            tools=tuple(tools),
            excerpts=None if excerpts is None else tuple(excerpts),
        )

    def __post_init__(self) -> None:
        checked_id(self.id)
        if not isinstance(self.key, str) or not re.fullmatch(r"[0-9a-f]{64}", self.key):
            raise InvalidEscalation("key: a SHA-256 hex digest")
        _check_time(self.created_at, "created_at")
        if not is_id(self.session):
            raise InvalidEscalation(f"session: an id of 1 to {MAX_ID_CHARS} printable characters")
        for name in ("tenant", "feature", "agent"):
            value = getattr(self, name)
            if value is not None and not is_id(value):
                raise InvalidEscalation(f"{name}: an id of 1 to {MAX_ID_CHARS} printable characters")
        if not isinstance(self.heuristic, str) or not _MACHINE_NAME.fullmatch(self.heuristic):
            raise InvalidEscalation("heuristic: a machine name (lowercase letters, digits, _)")
        if not isinstance(self.reason, str) or len(self.reason) > MAX_REASON_CHARS or not self.reason.isprintable():
            raise InvalidEscalation(f"reason: printable text of at most {MAX_REASON_CHARS} characters")
        # immutable all the way down: a record the engine holds cannot change under the store
        object.__setattr__(self, "counters", MappingProxyType(_checked_counters(self.counters)))
        if not isinstance(self.spend, Spend):
            raise InvalidEscalation("spend: a Spend")
        tools = tuple(self.tools)
        if len(tools) > MAX_TOOLS or not all(isinstance(t, ToolOutcome) for t in tools):
            raise InvalidEscalation(f"tools: at most {MAX_TOOLS} ToolOutcome")
        object.__setattr__(self, "tools", tools)
        if self.status not in STATUSES:
            raise InvalidEscalation(f"status must be one of {list(STATUSES)}")
        if self.status == "open":
            if (self.decision, self.note, self.resolved_at) != (None, None, None):
                raise InvalidEscalation("an open escalation has no decision, note or resolved_at")
        else:
            if self.decision is None or RESOLVED_BY[checked_decision(self.decision)] != self.status:
                raise InvalidEscalation(f"decision: a {self.status} escalation was decided so")
            _check_time(self.resolved_at, "resolved_at")
            checked_note(self.note)
        if self.excerpts is not None:
            excerpts = tuple(self.excerpts)
            if len(excerpts) > MAX_EXCERPTS or not all(isinstance(e, str) and len(e) <= MAX_EXCERPT_CHARS for e in excerpts):
                raise InvalidEscalation(f"excerpts: at most {MAX_EXCERPTS} strings of at most {MAX_EXCERPT_CHARS} characters")
            object.__setattr__(self, "excerpts", excerpts)
        if isinstance(self.collapsed, bool) or not isinstance(self.collapsed, int) or self.collapsed < 0:
            raise InvalidEscalation("collapsed: a whole number >= 0")

    def resolved(self, decision: Decision, note: str | None, at: float) -> Escalation:
        """This escalation as `decision` leaves it."""
        return replace(
            self, status=RESOLVED_BY[checked_decision(decision)], decision=decision, note=checked_note(note), resolved_at=at
        )

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON carries it (HTTP, the CLI, the outbox): the session as
        `session_id`, as on every route; `excerpts` only when there are some."""
        out = {
            "id": self.id,
            "key": self.key,
            "created_at": self.created_at,
            "tenant": self.tenant,
            "session_id": self.session,
            "feature": self.feature,
            "agent": self.agent,
            "heuristic": self.heuristic,
            "reason": self.reason,
            "counters": dict(self.counters),
            "spend": {"tokens": self.spend.tokens, "usd": self.spend.usd},
            "tools": [t.to_dict() for t in self.tools],
            "status": self.status,
            "decision": self.decision,
            "note": self.note,
            "resolved_at": self.resolved_at,
            "collapsed": self.collapsed,
        }
        if self.excerpts is not None:
            out["excerpts"] = list(self.excerpts)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Escalation:
        """A record from `to_dict`'s JSON (other keys, such as a message's `kind`, are ignored)."""
        try:
            spend = d.get("spend") or {}
            excerpts = d.get("excerpts")
            return cls(
                id=d["id"],
                key=d["key"],
                created_at=d["created_at"],
                session=d["session_id"],
                heuristic=d["heuristic"],
                reason=d["reason"],
                tenant=d.get("tenant"),
                feature=d.get("feature"),
                agent=d.get("agent"),
                counters=d.get("counters") or {},
                spend=Spend(spend.get("tokens", 0), spend.get("usd", 0.0)),
                tools=tuple(ToolOutcome(t["tool"], t["outcome"], t.get("count", 1)) for t in d.get("tools") or ()),
                status=d.get("status", "open"),
                decision=d.get("decision"),
                note=d.get("note"),
                resolved_at=d.get("resolved_at"),
                excerpts=None if excerpts is None else tuple(excerpts),
                collapsed=d.get("collapsed", 0),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise InvalidEscalation(f"not an escalation record ({type(exc).__name__}: {exc})") from None


def _check_time(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise InvalidEscalation(f"{name}: epoch seconds, a finite number >= 0")


def _checked_counters(counters: Any) -> dict[str, CounterValue]:
    if not isinstance(counters, Mapping) or len(counters) > MAX_COUNTERS:
        raise InvalidEscalation(f"counters: a mapping of at most {MAX_COUNTERS} entries")
    out: dict[str, CounterValue] = {}
    for name, value in counters.items():
        if not isinstance(name, str) or not _MACHINE_NAME.fullmatch(name):
            raise InvalidEscalation("counters: names are machine names (lowercase letters, digits, _)")
        if isinstance(value, float) and not -float("inf") < value < float("inf"):
            raise InvalidEscalation(f"counters.{name}: a finite number")
        if isinstance(value, str) and not _MACHINE_STRING.fullmatch(value):
            raise InvalidEscalation(f"counters.{name}: a number or a short machine string (no spaces, at most 128)")
        if value is not None and not isinstance(value, (int, float, str)):
            raise InvalidEscalation(f"counters.{name}: a number or a short machine string")
        out[name] = value
    return out
