"""One way in: every edge hands its events to the engine through `decide`.

The NeMo actions, the server's endpoints (`/events` through the flows, `/check`, `/result`, the
hook endpoints), the hook command and its daemon, the chat line, replay and the drop-ins all
call it, so what an edge used to do on its own is done once, here:

- the caller's scope (`Caller`, an explicit value): a caller bound to one tenant acts for that
  tenant only, and names only the agents and features its token allows (a label picks the
  overrides, so one outside the token's scope could loosen its own guard); a tenant's token
  scoped by default uses only configs that enforce every heuristic, and names no label it does
  not list that picks one of the config's overrides;
- the fields the server reserves for its own events, and the protocol's required fields;
- an event the engine cannot read is answered as an `invalid_event` verdict naming the field
  (in the protocol's names for a protocol event), not an exception;
- the incidents the engine raised while deciding, handed back with the verdict.

Framework-free: no NeMo, no HTTP. A protocol event (`ToolCallRequested`, ...: Colang field
names) comes as `decide(engine, kind, fields, caller)` and is answered as the verdict dict the
flows send; a trace-format or typed event (replay, the drop-ins) as `decide_event`, answered as
a typed `Decision`.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import heuristics as H
from ._aio import without_blocking
from ._byref import PAYLOAD_REF
from .events import InvalidEventError, is_id
from .protocol import BY_COLANG, BY_NAME, EventKind, missing_fields, to_engine_event
from .verdicts import BreakerIncident, Incident, ResultVerdict, Verdict, observation

if TYPE_CHECKING:
    from .config import AgentBreakerConfig
    from .engine import Engine

#: the name NeMo's actions take the engine by (registered by `init(app)`)
ENGINE_PARAM = "agent_breaker_engine"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sends the events: the tenant its token acts for, and the agents and features it may
    name (each None: any). A tenant's token whose entry lists no configs uses only those that
    enforce every heuristic (`enforcing_only`), and an agent or a feature its entry does not list
    may pick none of the config's overrides (`listed_overrides_only`): an observe config, or
    another agent's looser override, would loosen its own guard."""

    tenant: str | None = None
    agents: frozenset[str] | None = None
    features: frozenset[str] | None = None
    enforcing_only: bool = False
    listed_overrides_only: bool = False

    def problem(self, fields: Mapping[str, Any], config: AgentBreakerConfig | None = None) -> tuple[str, str] | None:
        """(field, reason) when an event names a tenant other than the one this caller acts
        for, or an agent or a feature it may not name; given the config the event is for, also
        when the caller may not use that config (field "") or a label picks an override of it
        the caller was not granted."""
        tenant = fields.get("tenant")
        if self.tenant is not None and tenant is not None and tenant != self.tenant:
            return "tenant", "this API token acts for one tenant only, and it is not this one"
        if config is not None and self.enforcing_only and (loose := _not_enforced(config)) is not None:
            return "", (
                f"this API token may use only configs that enforce every heuristic, and this one sets {loose}: "
                "list the config in the token's configs to allow it"
            )
        for name, allowed in (("agent", self.agents), ("feature", self.features)):
            value = fields.get(name)
            if value is None:
                continue
            if allowed is not None and value not in allowed:
                return name, f"this API token may not act as {name} {value!r}"
            if allowed is None and self.listed_overrides_only and config is not None and self._picks(config, name, value):
                return name, (
                    f"this API token may not act as {name} {value!r}, which picks an override of this config: "
                    f"list it in the token's {name}s to allow it"
                )
        return None

    def _picks(self, config: AgentBreakerConfig, label: str, value: Any) -> bool:
        """Whether a label's value picks an override that may apply to this caller's tenant
        (another tenant's overrides never apply to its events)."""
        return any(getattr(o, label) == value and o.tenant in (None, self.tenant) for o in config.overrides)

    def bound(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of `fields` with the caller's tenant where it names none (a bound caller's
        events are its tenant's)."""
        if self.tenant is None or fields.get("tenant") is not None:
            return dict(fields)
        return {**fields, "tenant": self.tenant}


#: a caller that may do anything: in-process use, replay, the hook command (the user's own)
ANYONE = Caller()
#: the caller, for an edge that cannot pass it: NeMo calls its actions itself (the server sets
#: it for each request; a task, a `to_thread` and `run_coroutine_threadsafe` carry it along)
CALLER: contextvars.ContextVar[Caller] = contextvars.ContextVar("agent_breaker_caller", default=ANYONE)


@dataclass(frozen=True, slots=True)
class Decision:
    """The engine's answer to one event: its verdict (an `invalid_event` refusal when the event
    could not be read, with `invalid` saying why) and the incidents it raised."""

    verdict: Verdict | ResultVerdict
    invalid: InvalidEventError | None = None
    incidents: tuple[Incident | BreakerIncident, ...] = field(default_factory=tuple)


#: incidents the engine raised during the current decision (see `collect_incident`)
_incidents: contextvars.ContextVar[list[Incident | BreakerIncident] | None] = contextvars.ContextVar(
    "agent_breaker_incidents", default=None
)


def collect_incident(incident: Incident | BreakerIncident) -> None:
    """Engine listener: keep the incident for the caller of the decision that raised it (the
    NeMo flows hand it to their alerting action); one raised outside a decision (an operator
    forcing a breaker) goes to the incident log."""
    bucket = _incidents.get()
    if bucket is not None:
        bucket.append(incident)
    else:
        deliver_incidents([incident.to_dict()])


def deliver_incidents(incidents: Iterable[Mapping[str, Any]]) -> int:
    """Incidents to the `agent_breaker.incidents` logger, a JSON line each. Returns how many."""
    from .engine import incident_log  # the engine's logger; imported here: this module loads light

    n = 0
    for data in incidents:
        incident_log.warning(json.dumps(dict(data), sort_keys=True))
        n += 1
    return n


def _not_enforced(config: AgentBreakerConfig) -> str | None:
    """What keeps a config from enforcing every heuristic ("mode observe", "modes.oscillation
    observe"), judged on its top level: an override's mode is the operator's for its tenant."""
    if config.mode != "enforce":
        return f"mode {config.mode}"
    return next((f"modes.{h} {mode}" for h, mode in sorted(config.modes.items()) if mode != "enforce"), None)


def _scope_problem(fields: Mapping[str, Any], caller: Caller, config: AgentBreakerConfig) -> tuple[str, str] | None:
    if PAYLOAD_REF in fields:
        return PAYLOAD_REF, "reserved for the server's own events (or the request ended)"
    return caller.problem(fields, config)


def decide_event(engine: Engine, event: Mapping[str, Any] | Any, caller: Caller = ANYONE) -> Decision:
    """A trace-format event (a mapping with its `type`) or a typed one through the engine."""
    bucket: list[Incident | BreakerIncident] = []
    token = _incidents.set(bucket)
    try:
        if isinstance(event, Mapping):
            problem = _scope_problem(event, caller, engine.config)
            if problem is not None:
                raise InvalidEventError.of([problem])
            event = caller.bound(event)
        elif caller != ANYONE:
            labels = {name: getattr(event, name, None) for name in ("tenant", "agent", "feature")}
            problem = caller.problem(labels, engine.config)
            if problem is not None:
                raise InvalidEventError.of([problem])
            if event.tenant is None and caller.tenant is not None:
                event = event.model_copy(update={"tenant": caller.tenant})
        verdict: Verdict | ResultVerdict = engine.process(event)
    except InvalidEventError as exc:
        kind = _kind_of(event)
        tool = event.get("tool") if isinstance(event, Mapping) else getattr(event, "tool", None)
        verdict = invalid_verdict(f"invalid {kind} event: {exc}", tool)
        return Decision(verdict, exc, tuple(bucket))
    finally:
        _incidents.reset(token)
    return Decision(verdict, None, tuple(bucket))


def _kind_of(event: Any) -> str:
    kind = event.get("type") if isinstance(event, Mapping) else getattr(event, "type", None)
    return kind if isinstance(kind, str) and kind in BY_NAME else "agent"


def invalid_verdict(reason: str, tool: Any) -> Verdict:
    """The refusal of an event the guard cannot read."""
    shown = tool if is_id(tool) else None
    obs = observation(H.INVALID_EVENT, shown, reason, "Send a well-formed event.", None)
    return Verdict(False, H.INVALID_EVENT, "block", "call", reason, observation=obs)


def decide(engine: Engine, kind: EventKind | str, fields: Mapping[str, Any], caller: Caller = ANYONE) -> dict[str, Any]:
    """One protocol event of `kind` (Colang field names) through the engine: the verdict as
    the dict the flows read, with session_id, call_id, accepted and the incidents it raised.
    Errors name the protocol's fields."""
    kind = BY_NAME[kind] if isinstance(kind, str) else kind
    bucket: list[Incident | BreakerIncident] = []
    token = _incidents.set(bucket)
    try:
        problem = _scope_problem(fields, caller, engine.config)
        if problem is not None:
            raise InvalidEventError.of([problem])
        fields = caller.bound(fields)
        missing = missing_fields(kind, fields)
        if missing:
            raise InvalidEventError.of([(name, "Field required") for name in missing])
        # the handler the table names answers a Verdict or a ResultVerdict
        out: dict[str, Any] = getattr(engine, kind.handler)(to_engine_event(kind, fields)).to_dict()
    except InvalidEventError as exc:
        reason = f"invalid {kind.colang} event: {exc.renamed(kind.colang_name)}"
        refused = invalid_verdict(reason, fields.get("tool_name"))
        out = {
            "allowed": False,
            "accepted": False,
            "heuristic": refused.heuristic,
            "severity": refused.severity,
            "scope": refused.scope,
            "reason": reason,
            "observation": refused.observation,
        }
    finally:
        _incidents.reset(token)
    out["incidents"] = [i.to_dict() for i in bucket]
    out["session_id"] = _echo(fields, "session_id")
    out["call_id"] = _echo(fields, "call_id") or out.get("call_id")
    out.setdefault("accepted", out.get("allowed", False))
    return out


def _echo(fields: Mapping[str, Any], name: str) -> str | None:
    """An id of the event, repeated in its verdict only when it is a valid id (a megabyte of
    text, or a lone surrogate, is not repeated)."""
    value = fields.get(name)
    return value if is_id(value) else None


async def decide_async(
    engine: Engine, kind: EventKind | str, fields: Mapping[str, Any], caller: Caller = ANYONE
) -> dict[str, Any]:
    """`decide` without blocking the event loop."""
    return await without_blocking(engine, decide, engine, kind, fields, caller)


def verdict_event(engine: Engine, event: Mapping[str, Any], caller: Caller = ANYONE) -> dict[str, Any]:
    """One protocol event (a dict with its `type`) through the engine, answered with the
    verdict event the flows would send; its incidents go to the incident log."""
    kind = BY_COLANG.get(event.get("type", ""))
    if kind is None:
        reason = f"unknown agent-breaker event type; expected one of {sorted(BY_COLANG)}"
        return {
            "type": "ToolCallVerdict",
            "session_id": event.get("session_id"),
            "call_id": event.get("call_id"),
            "allowed": False,
            "heuristic": H.INVALID_EVENT,
            "severity": "block",
            "reason": reason,
            "observation": None,
        }
    out = decide(engine, kind, event, caller)
    deliver_incidents(out["incidents"])
    return {"type": kind.verdict, **{name: out.get(name) for name in kind.verdict_fields}}
