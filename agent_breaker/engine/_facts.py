"""Reading an event: what a decision needs of it, reduced to hashes and numbers before the
session is touched (keyed by the deployment's fingerprint key, so no caller can aim a hash)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson

from .._canonical import CanonicalError, Fingerprinter, collapse_whitespace
from .._churn import counts, mask_failure_ids
from .._effects import effect_of
from .._ledger import Refs
from .._outcomes import Outcome, is_blank, says_nothing, writes
from .._policy import Policy
from .._state import MAX_TOPIC, MAX_VALUES, CallFacts, SessionState
from .._text import normalize_name, normalize_text
from ..config import AgentBreakerConfig
from ..events import Assistant, Final, InvalidEventError, ToolCall, ToolResult, User
from ..governor import budget
from ..store.base import key_parts

#: labels of keyed hashes: a tool's name, a failure's error, an argument's value (a result may
#: echo it), a session in a tool view, the model step of a call, what a repeated action did,
#: what a user said
TOOL = "tool"
FAILURE = "failure"
ECHO = "echo"
MEMBER = "member"
TURN = "turn"
EFFECT = "effect"
TOPIC = "topic"
SAID = "user"  # what a user said (sessions already stored hold hashes made with this label)
#: a word of an argument value as a call's topic holds it: its first letters (a stem, roughly)
TOPIC_CHARS = 5
_TOPIC_WORD = re.compile(r"[^\W_]+")
_DIGITS = re.compile(r"[0-9]+")
_NUMBER = re.compile(r"[0-9]+")
#: a value an error may name: a number or a word (an id, a name), as an argument would hold it
_ERROR_VALUE = re.compile(r"[0-9]+(?:\.[0-9]+)?|[a-z_][a-z0-9_.-]*[a-z0-9]")
#: joins tenant and session id in a session key: ids cannot hold control characters
TENANT_SEPARATOR = "\x1f"
#: a call's argument values hashed, and a result's fields looked at for echoes (bounds per event)
MAX_LEAVES = 256
MAX_ECHOED = 32
MAX_ECHO_CHARS = 1024  # a longer result value is content, not an echo
#: how much of a failure's error and payload its shape is read from
MAX_ERROR_CHARS = 4096
#: the words of a failure kept to compare it: the smallest of its keyed word hashes (a sample
#: of its words no caller can choose; the whole of a short error), so a session's failing
#: streaks stay small
MAX_FAILURE_WORDS = 64

AnyEvent = ToolCall | ToolResult | Assistant | User | Final
E = TypeVar("E", ToolCall, ToolResult, Assistant, User, Final)


@dataclass(slots=True)
class Step(Generic[E]):
    """One event on its way through the engine: the event, its session's key, the time it is
    decided at, and the policy in force for it."""

    ev: E
    key: str
    now: float
    p: Policy

    def session(self, state: object | None) -> SessionState:
        if isinstance(state, SessionState):
            return state
        ev = self.ev
        return SessionState(self.key, tenant=ev.tenant, feature=ev.feature, agent=ev.agent, created_s=self.now)


def call_facts(fp: Fingerprinter, ev: ToolCall, p: Policy) -> CallFacts:
    """A tool call as the deciders read it."""
    try:
        canonical = p.canon.canonical(ev.args)
    except CanonicalError as exc:
        raise InvalidEventError.of([("args", str(exc))]) from None
    key = fp.hash64(ev.tool, canonical)
    mutating = ev.mutating if ev.mutating is not None else p.mutating(ev.tool)
    effect, effect_text, moves_amount = None, 0, False
    if mutating and not p.cfg.tool(ev.tool).idempotent:
        # what it does, in one spelling (amounts, ids, made-up keys aside), and its free text apart
        done = effect_of(ev.args, p.idempotency_fields)
        effect = fp.hash64(EFFECT, normalize_name(ev.tool), *done.parts)
        effect_text = fp.hash64(EFFECT, *done.words) if done.words else 0
        moves_amount = done.amount
    fingerprinted = p.fingerprint_calls
    leaves = _leaves(ev.args)
    values, sizes = _values(fp, leaves)
    return CallFacts(
        tool=ev.tool,
        key=key,
        fp_text=fp.tokens(canonical) if fingerprinted else None,
        fp_shape=fp.shapes(canonical) if fingerprinted else None,
        fp_thought=tuple(sorted(fp.shapes(normalize_text(ev.thought)))) if ev.thought and fingerprinted else None,
        tokens=ev.input_tokens + ev.output_tokens,
        cost_usd=budget.step_cost_usd(p.cfg, ev.input_tokens, ev.output_tokens, ev.cost_usd, ev.model),
        depth=ev.depth or 0,
        mutating=mutating,
        effect=effect,
        effect_text=effect_text,
        moves_amount=moves_amount,
        writes=writes(ev.args),
        values=values,
        sizes=frozenset(sizes),
        topic=_topic(fp, leaves),
        turn=None if effect is None or ev.turn is None else fp.hash64(TURN, ev.turn),
    )


def result_canonical(p: Policy, result: Any) -> str:
    try:
        return p.result_canon.canonical(result)
    except CanonicalError as exc:
        raise InvalidEventError.of([("result", str(exc))]) from None


@dataclass(slots=True)
class ResultFacts:
    """A tool result as the deciders read it. The loop detectors compare results without what
    churns: repeats of a call without timings or identities (ids, refs), answers to other calls
    without timings only."""

    canonical_hash: int  # what a receipt vouches for
    timed: str  # the canonical text, timings masked
    timed_hash: int
    masked: str  # timings and identities masked
    repeat_hash: int
    failure: int | None  # a failure's error and payload, noise masked (None: it did not fail)
    failure_shape: tuple[int, ...] | None  # its words, sorted, digits folded
    failure_words: tuple[int, ...] | None  # its words, sorted
    failure_counts: int  # what a failure counted ("5 failed"; a hash, 0 for none)
    failure_values: tuple[int, ...]  # the values it named (numbers, words), hashed as argument values are
    tool_key: int
    blank: bool
    references: Refs | None  # what a successful result names (ids a final answer may cite)


def result_facts(fp: Fingerprinter, ev: ToolResult, p: Policy, out: Outcome) -> ResultFacts:
    canonical = result_canonical(p, ev.result)
    result_hash = fp.hash64(canonical)
    timed = p.churn.timing(canonical)
    timed_hash = result_hash if timed == canonical else fp.hash64(timed)
    masked = p.churn.identity(timed)
    repeat_hash = timed_hash if masked == timed else fp.hash64(masked)
    failure, failure_shape, failure_words, failure_counts = None, None, None, 0
    failure_values: tuple[int, ...] = ()
    if out.failed:
        # what a failure says beyond the noise of its run: the same masks as a repeated
        # result's, and the ids made up for the run (read from its first MAX_ERROR_CHARS)
        error = mask_failure_ids(p.churn(json_text(ev.error)[:MAX_ERROR_CHARS]))
        payload = mask_failure_ids(masked[:MAX_ERROR_CHARS])
        failure = fp.hash64(FAILURE, payload, error)
        said = f"{error} {payload}"[:MAX_ERROR_CHARS]
        failure_shape = tuple(sorted(fp.shapes(said))[:MAX_FAILURE_WORDS])
        failure_words = tuple(sorted(fp.tokens(said))[:MAX_FAILURE_WORDS])
        counted = counts(said)
        failure_counts = fp.hash64(FAILURE, *counted) if counted else 0
        # what the error named that a next call might take up (the amount it asked for)
        failure_values = tuple(sorted({_value_hash(fp, w) for w in _ERROR_VALUE.findall(_normalized(said))})[:MAX_VALUES])
    return ResultFacts(
        result_hash,
        timed,
        timed_hash,
        masked,
        repeat_hash,
        failure,
        failure_shape,
        failure_words,
        failure_counts,
        failure_values,
        fp.labeled(TOOL, ev.tool),
        is_blank(ev.result),
        p.claims.result_references(canonical) if not out.failed else None,
    )


def effect_hash(fp: Fingerprinter, masked: str) -> int:
    """What a repeated action did: its result with ids, timings and numbers aside."""
    return fp.hash64(EFFECT, _NUMBER.sub("0", masked))


def json_text(value: Any) -> str:
    return "" if value is None else orjson.dumps(value).decode() if type(value) is str else str(value)


def _leaves(args: Any) -> list[str]:
    """The non-empty strings and the integers of a call's arguments, as text (what a result
    may echo back)."""
    out: list[str] = []
    stack = [args]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if v:
                out.append(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, int) and not isinstance(v, bool):
            out.append(str(v))
    return out


def _value_hash(fp: Fingerprinter, normalized: str) -> int:
    """An argument's or a result's value as they are compared (an echo, what stays while salts
    churn): a keyed 32-bit hash of its normalized text (`_normalized`: case and spacing aside)."""
    return fp.labeled(ECHO, normalized) & 0xFFFF_FFFF


def _normalized(value: str) -> str:
    return normalize_text(collapse_whitespace(value))


def _topic(fp: Fingerprinter, leaves: list[str]) -> tuple[int, ...]:
    """What a call asks about: the words of its argument values, each as its first TOPIC_CHARS
    letters with digits folded ("refunds" and "refund" ask about one thing, page 5 and page 6
    too), keyed 32-bit hashes, the smallest MAX_TOPIC."""
    words = {w[:TOPIC_CHARS] for leaf in leaves[:MAX_LEAVES] for w in _TOPIC_WORD.findall(_DIGITS.sub("0", _normalized(leaf)))}
    return tuple(sorted(fp.labeled(TOPIC, w) & 0xFFFF_FFFF for w in words)[:MAX_TOPIC])


def _values(fp: Fingerprinter, leaves: list[str]) -> tuple[tuple[int, ...], set[int]]:
    """A call's argument values as kept: the hashes of at most MAX_VALUES of them, the smallest
    (keyed: no caller can choose which are kept by adding values), and their normalized lengths."""
    normalized = map(_normalized, leaves[:MAX_LEAVES])
    hashed = sorted((_value_hash(fp, v), len(v)) for v in normalized)[:MAX_VALUES]
    return tuple(h for h, _ in hashed), {n for _, n in hashed}


def echo_masked(fp: Fingerprinter, p: Policy, timed: str, result: Any, f: CallFacts) -> str:
    """A result's canonical text with the fields that only give back one of the call's argument
    values masked (at the top, or one level down: {"meta": {"query": "x"}}), when the rest of it
    says nothing (an empty list, zeros, timings): the answer of a search for "x" that says
    {"query": "x", "hits": []} is the answer for "y" too. Beside a record ({"order_id": 7,
    "status": "shipped"}, {"sku": 4, "in_stock": 0}) the echo names what the answer is about, and
    stays. Only a value as long as an argument's is hashed; at most MAX_ECHOED fields are looked at."""
    if not f.values or type(result) is not dict or len(result) > MAX_ECHOED:
        return timed
    echoed: dict[str, Any] = {}
    rest: list[Any] = []
    for k, v in result.items():
        if type(k) is not str:
            return timed
        if type(v) is dict and len(v) > MAX_ECHOED:
            rest.append(v)
        elif type(v) is dict:
            inner = [(ik, iv) for ik, iv in v.items() if _echoes(fp, iv, f)]
            echoed.update(inner)
            rest.extend(iv for ik, iv in v.items() if (ik, iv) not in inner and not (type(ik) is str and p.quiet_key(ik)))
        elif _echoes(fp, v, f):
            echoed[k] = v
        elif not p.quiet_key(k):
            rest.append(v)
    if not echoed or len(result) > MAX_ECHOED or not rest or not all(map(says_nothing, rest)):
        return timed
    if not any(type(v) in (list, dict) and not v for v in rest):
        return timed  # only zeros and blanks: a record's fields, not an empty answer
    for k, v in echoed.items():
        field = orjson.dumps({k: collapse_whitespace(v) if type(v) is str else v}).decode()[1:-1]
        timed = timed.replace(field, field[: field.index('":') + 2] + '"~"')
    return timed


def _echoes(fp: Fingerprinter, value: Any, f: CallFacts) -> bool:
    """Does a result's value give back one of the call's argument values (case and spacing aside)."""
    t = type(value)
    if t is int:
        text = str(value)
    elif t is str and len(value) <= MAX_ECHO_CHARS:
        text = _normalized(value)
    else:
        return False
    return len(text) in f.sizes and _value_hash(fp, text) in f.values


def view_key_of(tenant: str | None, tool_key: int) -> str:
    """The key of a tool view (session_churn). It starts with a control character, which no
    session id may hold, so it never names a real session."""
    return f"\x1eview{TENANT_SEPARATOR}{tenant or ''}{TENANT_SEPARATOR}{tool_key:016x}"


def effects_key_of(tenant: str | None) -> str:
    """The key of a tenant's effects (duplicate_mutation across its sessions), named as a view is."""
    return f"\x1eeffects{TENANT_SEPARATOR}{tenant or ''}"


def said_hash(fp: Fingerprinter, words: str) -> int:
    """What a user said, as the session remembers it (a user turn with news, the "yes" that
    duplicate_mutation asks for)."""
    return fp.hash64(SAID, words)


def session_key_of(fp: Fingerprinter, ev: AnyEvent) -> str:
    """The key of an event's session: its id within its tenant, so tenants cannot reach each
    other's sessions whatever ids they choose."""
    if ev.session is not None:
        sid = ev.session
    elif ev.conversation is not None:
        sid = f"conv:{fp.hash64(ev.conversation):016x}"
    else:
        raise InvalidEventError.of([("session", "an event needs a session id, or a conversation to fingerprint")])
    return _in_tenant(ev.tenant, sid)


def family_key(ev: ToolCall | ToolResult) -> str | None:
    """The key of the session whose failing streaks a sub-agent's call shares (its parent's)."""
    parent = ev.parent_session
    if parent is None or parent == ev.session:
        return None
    return _in_tenant(ev.tenant, parent)


def _in_tenant(tenant: str | None, sid: str) -> str:
    return sid if tenant is None else f"{tenant}{TENANT_SEPARATOR}{sid}"


def breaker_key_of(cfg: AgentBreakerConfig, tenant: str | None, tool: str, *, shared: bool) -> str:
    """The store key of a tool's breaker (`tool@host` for a dependency's): per tenant when
    `breaker.key_by_tenant`; a breaker that is not shared is the session's, under the tool's name."""
    if not shared:
        return tool
    return key_parts(tenant or "", tool) if cfg.breaker.key_by_tenant else key_parts(tool)
