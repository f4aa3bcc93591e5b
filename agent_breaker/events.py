"""Typed events of an agent run (shared/spec/traces.md), validated on the way in.

Bad input gets an InvalidEventError that says what is wrong: never a crash, never a silent allow.
Unknown keys are ignored, as the trace format says.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, TypeGuard

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ._errors import AgentBreakerError
from ._text import has_invalid_chars, normalize_name

MAX_ID_CHARS = 256
MAX_TEXT_CHARS = 1_000_000

# ids are printable: no control characters (lone surrogates pydantic refuses itself)
_Id = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS, pattern=r"^[^\x00-\x1f\x7f]+$")]


def _printable(value: str) -> str:
    if not value.isprintable():
        raise ValueError("an id of printable characters (no line or paragraph separator, no format character)")
    return value


#: the ids an operator reads back (a session, its tenant and labels): printable, as the
#: escalation queue holds them, so a session frozen for a human is always listed
_Name = Annotated[_Id, AfterValidator(_printable)]


def is_id(value: object) -> TypeGuard[str]:
    """An id as events carry them: 1 to MAX_ID_CHARS characters, printable, valid Unicode."""
    return isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS and value.isprintable() and not has_invalid_chars(value)


# a tool is known by its normalized name: look-alike letters, invisible characters and case
# do not make another tool
_ToolName = Annotated[_Id, AfterValidator(normalize_name), Field(min_length=1)]
_Tokens = Annotated[int, Field(ge=0, le=10**12)]
_Money = Annotated[float, Field(ge=0, allow_inf_nan=False)]
_Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]


#: whose failure a failed tool result is: the dependency's (an outage) or the call's own
ErrorKind = Literal["dependency", "call"]


class InvalidEventError(AgentBreakerError, ValueError):
    """An event the engine refuses to decide on; the message says why, naming fields, never
    repeating their values. `problems` holds (field, problem) pairs, so an adapter can say
    them in its own protocol's field names (`renamed`)."""

    def __init__(self, message: str, problems: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.problems = tuple(problems)

    @classmethod
    def of(cls, problems: Sequence[tuple[str, str]]) -> InvalidEventError:
        return cls("; ".join(f"{where}: {what}" if where else what for where, what in problems), problems)

    def renamed(self, name: Callable[[str], str]) -> str:
        """The message with each field's first part named by `name` (tool -> tool_name)."""
        if not self.problems:
            return str(self)
        parts = []
        for where, what in self.problems:
            head, dot, rest = where.partition(".")
            parts.append(f"{name(head)}{dot}{rest}: {what}" if where else what)
        return "; ".join(parts)


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    session: _Name | None = None
    ts: Annotated[float, Field(allow_inf_nan=False)] | None = None
    tenant: _Name | None = None
    feature: _Name | None = None
    agent: _Name | None = None
    depth: Annotated[int, Field(ge=0, le=10_000)] | None = None
    # fingerprint of the conversation, used as the session key when `session` is absent
    conversation: _Text | None = None


class _Spend(BaseModel):
    input_tokens: _Tokens = 0
    output_tokens: _Tokens = 0
    cost_usd: _Money | None = None
    model: _Id | None = None


class ToolCall(_Event, _Spend):
    """The agent asks to run a tool; the guard decides before it runs."""

    type: Literal["tool_call"] = "tool_call"
    tool: _ToolName
    args: dict[str, Any] = Field(default_factory=dict)
    call_id: _Id | None = None
    thought: _Text | None = None
    mutating: bool | None = None
    # the model step that asked for it: the parallel tool calls of one step share it
    turn: _Id | None = None
    # the session that started this one (a sub-agent's parent): a failing call's streak is the
    # family's (identical_failure), whichever of its sessions retries it
    parent_session: _Name | None = None
    # the sender reports a result for every call it lets run (the gateway, the flows, the
    # drop-ins): past MAX_PENDING calls in flight a new one is refused rather than one in flight
    # forgotten. A coding agent's hooks promise none (a call the user declined, an interrupted
    # one, a settings file without PostToolUse): there the oldest call in flight is forgotten.
    result_promised: bool = True


class ToolResult(_Event):
    """What a tool returned; it counts only for a call the guard let through."""

    type: Literal["tool_result"] = "tool_result"
    tool: _ToolName
    ok: bool
    call_id: _Id | None = None
    result: Any = None
    error: _Text | None = None
    latency_ms: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    mutating: bool | None = None
    parent_session: _Name | None = None  # see ToolCall
    # whose failure: the dependency's (transport, timeout, 5xx, 429) or the call's own; when
    # absent the engine reads it from the error and the payload
    error_kind: ErrorKind | None = None
    # the harness's own word that its user stopped the call (Claude Code's `is_interrupt`): never
    # read from an error's text, which the tool (and so the agent) writes
    interrupted: bool = False


class Assistant(_Event, _Spend):
    """An assistant turn with text and no tool call."""

    type: Literal["assistant"] = "assistant"
    text: _Text = ""


class User(_Event):
    """A user turn: new information."""

    type: Literal["user"] = "user"
    text: _Text = ""


class Final(_Event):
    """A final answer, checked before it reaches the user."""

    type: Literal["final"] = "final"
    text: _Text = ""
    # the agent's own word that a stop hook already sent it back to work this turn (Claude Code's
    # `stop_hook_active`): False starts the turn's count of refused stops anew (done_claim)
    continued: bool | None = None


Event = Annotated[ToolCall | ToolResult | Assistant | User | Final, Field(discriminator="type")]
EVENT_TYPES = ("tool_call", "tool_result", "assistant", "user", "final")

_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def _describe(exc: ValidationError, *, tagged: bool = True) -> InvalidEventError:
    problems = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"][1 if tagged else 0 :])
        if err["type"] == "union_tag_invalid":
            problems.append(("", f"unknown event type; expected one of {', '.join(EVENT_TYPES)}"))
        elif err["type"] == "union_tag_not_found":
            problems.append(("", f"event has no 'type'; expected one of {', '.join(EVENT_TYPES)}"))
        else:
            # the value itself is never repeated: it may be payload
            problems.append((where or "event", err["msg"]))
    return InvalidEventError.of(problems)


def parse_event(data: Any) -> ToolCall | ToolResult | Assistant | User | Final:
    """Validate one event dict (a trace line, or a NeMo event's fields)."""
    if not isinstance(data, dict):
        raise InvalidEventError(f"an event must be a JSON object, but was {type(data).__name__}")
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise _describe(exc) from None


def parse_typed(cls: type[_Event], data: dict[str, Any]) -> Any:
    """Validate an event a handler already knows the type of (no dispatch on `type`)."""
    kind = data.get("type", cls.model_fields["type"].default)
    if kind != cls.model_fields["type"].default:
        if kind in EVENT_TYPES:
            raise InvalidEventError(f"expected a {cls.model_fields['type'].default} event, but got type {kind!r}")
        raise InvalidEventError(f"unknown event type; expected one of {', '.join(EVENT_TYPES)}")
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise _describe(exc, tagged=False) from None
