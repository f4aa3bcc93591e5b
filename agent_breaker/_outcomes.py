"""Result classification: what a tool result says about its call.

Failed (the transport said so, or the payload does, or the tool's own predicate); whose failure
(the dependency's: transport, timeout, 5xx, 429 -- or the call's own: a non-zero exit, a
validation error, not found); slow (over the breaker's slow-call threshold); in progress (a
status that says "not finished yet": the call is a poll). Pure functions of the result.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._canonical import normalize_key
from ._churn import is_timing_key
from ._text import caseless_matcher
from .config import AgentBreakerConfig
from .events import ErrorKind, ToolResult

FailurePredicate = Callable[[Any], bool]
FailureKind = ErrorKind  # whose failure a failed result is

_FAILED_STATUS = frozenset({"error", "failed", "failure", "fail"})
# a dependency failure: the tool (or what it calls) did not answer properly; the call itself
# may be fine. Status codes count only where they read as HTTP statuses, not as any number;
# "try again" does not count (tools say it of bad calls too: "fix your command and try again").
# Each alternative starts with a letter or digit and checks the word boundary before it by
# looking back: re then scans for the first characters alone, ~10x faster than trying a
# boundary and every alternative at each place.
_DEPENDENCY_ALTERNATIVES = (
    *(
        rf"{word}(?<=\b{word}){after}\W{{0,3}}(?:5\d\d|429|408)\b"
        for word, after in (("http", r"(?:/\d(?:\.\d)?)?"), ("status", "(?:[ _]code)?"), ("code", ""), ("error", ""))
    ),
    r"50(?<=\b50)[234]\b",
    r"time[ds]? ?out",  # timeout, timed out, time out
    r"temporar",
    r"unavailable",
    r"rate.?limit",
    r"too many requests",
    r"connection ?(?:was )?(?:reset|refused|aborted|closed|error)",
    r"closed connection",
    r"remote ?disconnected",
    r"socket hang up",
    r"econn(?:refused|reset|aborted)",
    r"overloaded",
    r"throttl",
    r"bad gateway",
    r"internal server error",
    r"could not resolve",
    r"name or service not known",
    r"network (?:is )?unreachable",
    r"broken pipe",
)
_DEPENDENCY = caseless_matcher("|".join(_DEPENDENCY_ALTERNATIVES))
#: how much of an error text is searched
_SCANNED_CHARS = 4096


def names_dependency_failure(text: str) -> bool:
    """The text names a dependency failure (a 503, a timeout, a refused connection...)."""
    return _DEPENDENCY(text[:_SCANNED_CHARS])


_DEPENDENCY_STATUSES = frozenset({408, 429, *range(500, 600)})
_STATUS_FIELDS = ("status", "status_code", "code", "http_status", "statuscode")
_NOT_DONE_FIELDS = ("done", "ready", "complete", "completed", "finished")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one result says about its call."""

    failed: bool
    slow: bool
    # a failure of the dependency (transport, timeout, 5xx, 429): it counts for the tool's breaker
    # and gets the retries of a transient error; any other failure is the call's own (it feeds
    # the loop detectors only)
    dependency: bool
    in_progress: bool
    # a dependency failure that says when to come back (Retry-After), in seconds
    retry_after_s: float | None = None
    # the user stopped the call (the agent's harness says so): neither the tool's failure nor
    # the dependency's, and the user's next turn is new information, whatever it says
    interrupted: bool = False

    @property
    def breaker_ignores(self) -> bool:
        """The call's own failure says nothing of the dependency: for its breaker it is neither
        a failure nor a success (resilience4j's ignored exceptions), and a probe it ends proves
        nothing either way."""
        return self.failed and not self.dependency and not self.slow


def classify(
    ev: ToolResult,
    cfg: AgentBreakerConfig,
    in_progress_values: frozenset[str],
    predicate: FailurePredicate | None,
) -> Outcome:
    failed = (
        not ev.ok
        or (cfg.breaker.semantic_failures and is_semantic_failure(ev.result))
        or (predicate is not None and bool(predicate(ev.result)))
    )
    slow = cfg.breaker.slow_call_ms is not None and ev.latency_ms is not None and ev.latency_ms > cfg.breaker.slow_call_ms
    dependency = failed and failure_kind(ev, cfg) == "dependency"
    return Outcome(
        failed,
        slow,
        dependency,
        in_progress(ev.result, in_progress_values),
        retry_after(ev) if dependency else None,
        ev.interrupted and not ev.ok,
    )


MAX_RETRY_AFTER_S = 3600.0
_RETRY_AFTER_TEXT = re.compile(
    r"retry[-_ ]?after\W{0,3}(\d{1,7}(?:\.\d{1,6})?) ?(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?)?\b",
    re.IGNORECASE,
)
_RETRY_AFTER_FIELDS = frozenset({"retryafter", "retryafters", "retryafterseconds", "retryaftersec"})


def retry_after(ev: ToolResult) -> float | None:
    """The wait a failed result asks for: `Retry-After: 30` in the error text, or a
    `retry_after` field (at the top, or under `error` / `headers`) of the payload. Capped at an
    hour, so no tool can lock a session out for longer."""
    m = _RETRY_AFTER_TEXT.search(ev.error[:_SCANNED_CHARS]) if ev.error else None
    seconds = float(m.group(1)) * _unit_s(m.group(2)) if m else _retry_after_field(ev.result, 0)
    if seconds is None or seconds <= 0:
        return None
    return min(seconds, MAX_RETRY_AFTER_S)


def _retry_after_field(value: Any, depth: int) -> float | None:
    if not isinstance(value, dict) or depth > 2:
        return None
    for k, v in value.items():
        if isinstance(k, str) and _ALNUM.sub("", k.lower()) in _RETRY_AFTER_FIELDS:
            if isinstance(v, str) and _NUMBER.fullmatch(v.strip()):
                v = float(v)
            if isinstance(v, int) and not isinstance(v, bool):
                return float(min(v, MAX_RETRY_AFTER_S))  # no float() of a 400-digit number
            if isinstance(v, float) and math.isfinite(v):
                return v
    for name in ("error", "headers"):
        found = _retry_after_field(value.get(name), depth + 1)
        if found is not None:
            return found
    return None


def _unit_s(unit: str | None) -> float:
    if not unit:
        return 1.0
    unit = unit.lower()
    if unit.startswith("ms") or unit.startswith("milli"):
        return 0.001
    if unit.startswith("h"):
        return 3600.0
    if unit.startswith("m"):
        return 60.0
    return 1.0


_ALNUM = re.compile(r"[^0-9a-z]+")
_NUMBER = re.compile(r"\d{1,5}(?:\.\d+)?")


def failure_kind(ev: ToolResult, cfg: AgentBreakerConfig) -> FailureKind:
    """Whose failure is it: the event says (`error_kind`), else the tool's config
    (`tools.<name>.failures`), else the error and the payload do."""
    if ev.error_kind is not None:
        return ev.error_kind
    configured = cfg.tool(ev.tool).failures
    if configured != "auto":
        return configured
    if ev.error and names_dependency_failure(ev.error):
        return "dependency"
    return "dependency" if _dependency_payload(ev.result, 0) else "call"


def _dependency_payload(value: Any, depth: int) -> bool:
    """A payload that reports a dependency failure: an HTTP-ish status field (at the top or in an
    `error` object), or an error message that names one."""
    if not isinstance(value, dict) or depth > 2:
        return isinstance(value, str) and depth > 0 and names_dependency_failure(value)
    for name in _STATUS_FIELDS:
        status = value.get(name)
        # ASCII digits only, and no more than a status has ("²".isdigit() is True; int() of a
        # 5,000-digit string raises)
        if isinstance(status, str) and status.isascii() and status.isdigit() and len(status) <= 3:
            status = int(status)
        if isinstance(status, int) and not isinstance(status, bool) and status in _DEPENDENCY_STATUSES:
            return True
    return any(_dependency_payload(value.get(name), depth + 1) for name in ("error", "message", "detail", "errors"))


def is_blank(result: Any, depth: int = 0) -> bool:
    """A result that says nothing: null, blank text, an empty object, or a wrapper of only
    blank text ({"output": ""}). A command that prints nothing returns one. An empty list,
    bare or under a name ({"orders": []}), is an answer: nothing matched."""
    if result is None or (isinstance(result, str) and not result.strip()):
        return True
    if depth >= 3 or not isinstance(result, (dict, list)):
        return False
    if not result:
        return depth == 0 and isinstance(result, dict)
    values = result.values() if isinstance(result, dict) else result
    return all(is_blank(v, depth + 1) for v in values)


#: what an acknowledgement says ("OK.", "Field updated", {"status": "done"}) ...
_ACK_WORDS = frozenset(
    {
        "ok",
        "okay",
        "done",
        "success",
        "successful",
        "successfully",
        "succeeded",
        "saved",
        "created",
        "updated",
        "set",
        "stored",
        "recorded",
        "accepted",
        "applied",
        "completed",
        "sent",
        "deleted",
        "removed",
        "added",
        "true",
    }
)
#: ... and what it never says
_NOT_ACK_WORDS = frozenset({"not", "no", "none", "error", "failed", "failure", "invalid", "denied", "unknown", "empty"})
_ACK_WORD = re.compile(r"[a-z]+")
MAX_ACK_WORDS = 6


def is_acknowledgement(result: Any) -> bool:
    """A result that only says the call went through: a few words that say so and none that say
    otherwise ("OK.", "Field updated"), or an object of such texts and trues ({"ok": true},
    {"status": "saved"}). The same acknowledgement to calls with other arguments is no answer
    repeated (a form filled field by field), and no loop by itself."""
    if isinstance(result, str):
        words = set(_ACK_WORD.findall(result[: MAX_ACK_WORDS * 16].lower()))
        return 0 < len(words) <= MAX_ACK_WORDS and not _ACK_WORDS.isdisjoint(words) and _NOT_ACK_WORDS.isdisjoint(words)
    if isinstance(result, dict) and result:
        return all(v is True or v is None or (isinstance(v, str) and is_acknowledgement(v)) for v in result.values())
    return False


def says_nothing(value: Any, depth: int = 0) -> bool:
    """A value that carries no answer: null, blank text, zero, false, or containers of only
    such values (an empty page, a count of none)."""
    if value is None or value is False or (isinstance(value, str) and not value.strip()):
        return True
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value == 0
    if depth >= 3 or not isinstance(value, (dict, list)):
        return False
    return all(says_nothing(v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))


_NOTHING_FOUND = re.compile(
    r"\b(?:no|0|zero)\s+(?:results?|matches|entries|records|hits|items|rows|documents|pages)\b|\bnot found\b"
    r"|\bnothing (?:found|matched)\b|\bno match\b|\bcould ?n[o']?t find\b|\bdid not match\b|\bdoes not exist\b"
)
#: a text this long is an answer of its own, not a note that nothing was found
_NOTE_CHARS = 200


def finds_nothing(result: Any, depth: int = 0) -> bool:
    """An answer that nothing was found: empty (`says_nothing`), a short text that says so ("No
    entries match your query."), or a record whose only values besides an empty list are short
    texts (the query echoed beside `"matches": []`)."""
    if says_nothing(result):
        return True
    if isinstance(result, str):
        return len(result) <= _NOTE_CHARS and _NOTHING_FOUND.search(result.lower()) is not None
    if not isinstance(result, dict) or depth >= 2:
        return False
    values = list(result.values())
    if any(isinstance(v, str) and finds_nothing(v, depth + 1) for v in values):
        return True
    empty = any(isinstance(v, (list, dict)) and not v for v in values)
    return empty and all(_only_notes(k, v) for k, v in result.items())


def _only_notes(key: Any, value: Any, depth: int = 0) -> bool:
    """A value beside an empty answer that says nothing of its own: nothing, a timing
    (`took_ms`), a short text (the query echoed), or a record of only such values."""
    if says_nothing(value) or (isinstance(key, str) and is_timing_key(key)):
        return True
    if isinstance(value, str):
        return len(value) <= _NOTE_CHARS
    return isinstance(value, dict) and depth < 2 and all(_only_notes(k, v, depth + 1) for k, v in value.items())


CONTENT_CHARS = 500  # a string argument this long is content, not a question
CONTENT_LINE_CHARS = 80  # ... or this long with a line break (a file body, a message text)


#: argument names that hold what a call writes (an edit's new text, a patch, a file's body),
#: normalized as keys are compared (lower case, letters and digits only)
WRITE_KEYS = frozenset(
    ("newstring", "newstr", "newtext", "newcontent", "filetext", "content", "contents", "patch", "diff", "edits", "inserttext")
)


def writes(args: Any) -> bool:
    """A call that writes something: an argument names what it writes (`new_string`, `patch`,
    `content`, ...) or is content itself (`carries_content`). The same answer to such calls is
    an acknowledgement, and a new one changes the world the agent's other calls run in."""
    if isinstance(args, dict) and any(type(k) is str and normalize_key(k) in WRITE_KEYS for k in args):
        return True
    return carries_content(args)


def carries_content(args: Any, depth: int = 0) -> bool:
    """One of a call's string arguments is content (a file body, an e-mail text), not a query."""
    if isinstance(args, str):
        return len(args) >= CONTENT_CHARS or (len(args) >= CONTENT_LINE_CHARS and "\n" in args)
    if depth >= 3 or not isinstance(args, (dict, list)):
        return False
    values = args.values() if isinstance(args, dict) else args
    return any(carries_content(v, depth + 1) for v in values)


def is_semantic_failure(result: Any) -> bool:
    """A payload that says the call failed even though the transport said ok: a failed status,
    an error, `success` or `ok` false, or a process's non-zero exit code."""
    if not isinstance(result, dict):
        return False
    status = result.get("status")
    if isinstance(status, str) and status.lower() in _FAILED_STATUS:
        return True
    if result.get("error") not in (None, "", False, {}, []):
        return True
    if any(_nonzero(result.get(name)) for name in _EXIT_FIELDS):
        return True
    return result.get("success") is False or result.get("ok") is False


_EXIT_FIELDS = ("exit_code", "exitcode", "exitCode", "returncode", "return_code", "exit_status")


def _nonzero(code: Any) -> bool:
    return type(code) is int and code != 0


def in_progress(result: Any, values: frozenset[str], depth: int = 0) -> bool:
    """A result that says "not finished yet", at its top or in an object it holds ({"job":
    {"state": "running"}}): its call is a poll."""
    if not isinstance(result, dict):
        return False
    for name in ("status", "state", "phase"):
        v = result.get(name)
        if isinstance(v, str) and v.lower().replace(" ", "_").replace("-", "_") in values:
            return True
    if any(result.get(name) is False for name in _NOT_DONE_FIELDS):
        return True
    return depth < _NESTED_STATUS_DEPTH and any(in_progress(v, values, depth + 1) for v in result.values() if type(v) is dict)


#: how deep a status is looked for in a result ({"data": {"job": {"state": ...}}})
_NESTED_STATUS_DEPTH = 2
