"""The configuration tree: frozen pydantic models, validated as they are built.

The same tree sits under `custom_data: agent_breaker:` in a NeMo `config.yml`, or stands alone
in a YAML file for `agent-breaker replay --config`. Every default is a named constant below and
documented in the README.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator

from . import heuristics as H
from ._canonical import DEFAULT_VOLATILE_FIELDS
from ._errors import ConfigError as ConfigError
from ._frozen import Frozen as _Frozen
from ._schemas import Check, SchemaError, compile_check
from ._text import normalize_name
from .breaker.config import BreakerConfig as BreakerConfig

#: the sessions' defaults (`sessions:`); a store built without a config starts from them too
DEFAULT_SESSION_TTL_S = 3600.0
DEFAULT_MAX_SESSIONS = 100_000
DEFAULT_MAX_SESSION_BYTES = 1 << 30  # the in-process sessions' memory, by their weight()

# The store URLs, written once: the store picks its backend by them, the config validates
# `storage.url` (and the escalations' and fleet's Redis) by them.
#: a Redis Cluster's URL schemes (the URL names any one of its nodes), each with its one-server scheme
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
#: the URL schemes of a Redis: one server, or a cluster
REDIS_SCHEMES = ("redis", "rediss", "unix", *CLUSTER_SCHEMES)
REDIS_URL_PREFIXES = tuple(f"{scheme}://" for scheme in REDIS_SCHEMES)
#: one SQLite file (sqlite:///path/to/file.db): the processes of one machine share it
SQLITE_SCHEME = "sqlite"
#: the schemes as an error message lists them
REDIS_URLS_TEXT = ", ".join(REDIS_URL_PREFIXES[:-1]) + " or " + REDIS_URL_PREFIXES[-1]


Mode = Literal["enforce", "observe", "off"]

DEFAULT_MAX_ARGS_BYTES = 65_536


DEFAULT_IDENTICAL_FAILURES = 3
DEFAULT_TRANSIENT_FAILURES = 5
DEFAULT_RETRY_SIMILARITY = 0.8
DEFAULT_IDENTICAL_REPEATS = 3
DEFAULT_IDENTICAL_WINDOW_S = 600.0
#: stops a coding agent is sent back to work in one turn for an unsupported claim (done_claim)
DEFAULT_MAX_DONE_REFUSALS = 2
DEFAULT_MAX_POLLS = 15
DEFAULT_POLL_WINDOW_S = 600.0
DEFAULT_MAX_WAIT_S = 1800.0
DEFAULT_MIN_SLOW_POLLS = 5
DEFAULT_SILENT_REPEATS = 3
DEFAULT_SAME_ANSWER_CALLS = 5
DEFAULT_DUPLICATE_WINDOW_S = 3600.0
DEFAULT_IN_FLIGHT_S = 120.0
DEFAULT_IDEMPOTENCY_FIELDS = (
    "idempotency_key",
    "idempotencykey",
    "idempotency_token",
    "dedup_key",
    "dedupe_key",
    "deduplication_id",
    "client_token",
    "client_request_id",
)
# user turns that carry no information: a bare nudge to go on, every word of which is one of
# these (case and punctuation aside): "continue", "Go on!", "please keep trying", an empty turn
DEFAULT_NUDGE_WORDS = (
    "continue",
    "go",
    "on",
    "keep",
    "going",
    "trying",
    "carry",
    "proceed",
    "resume",
    "next",
    "more",
    "try",
    "again",
    "retry",
    "please",
    "and",
    "so",
    "then",
    "now",
    "just",
    # what a nudge is padded with: "continue with the task where you left off", "keep working on it"
    "with",
    "the",
    "a",
    "task",
    "work",
    "working",
    "where",
    "you",
    "left",
    "off",
    "it",
    "at",
    "from",
    "there",
    "this",
    "what",
    "were",
    "doing",
    "moving",
    "forward",
    "to",
    "up",
)
# a turn made only of these words is a confirmation ("yes", "Yes, go ahead", "I already said
# yes"): the first one of a session is an answer, every later one repeats it, however worded
DEFAULT_CONFIRMATION_WORDS = (
    "yes",
    "yeah",
    "yep",
    "yup",
    "y",
    "sure",
    "ok",
    "okay",
    "confirm",
    "confirmed",
    "correct",
    "right",
    "exactly",
    "fine",
    "agreed",
    "approved",
    "affirmative",
    "go",
    "ahead",
    "proceed",
    "please",
    "do",
    "it",
    "that",
    "i",
    "already",
    "said",
    "told",
    "you",
    "so",
    "as",
)
# each starts with a word and checks the boundary before it by looking back: re then skips to
# the word's first letter instead of trying a boundary at every place
DEFAULT_AUTO_REPLY_PATTERNS = (
    r"auto(?<=\bauto)(?:matic|mated)?[- ]?(?:reply|response|generated)\b",
    r"out(?<=\bout) of (?:the )?office\b",
    r"do(?<=\bdo) not reply\b",
    r"this(?<=\bthis) (?:is an? )?(?:automated|automatic) (?:message|reply|response)\b",
    # the canned turn agent harnesses send when the model stops without finishing (OpenHands)
    r"^\W*please continue (?:working )?on the task\b",
)
DEFAULT_POLLING_TOOLS = ("*status*", "*poll*", "*wait*", "*progress*")
DEFAULT_IN_PROGRESS_VALUES = (
    "pending",
    "queued",
    "running",
    "in_progress",
    "inprogress",
    "processing",
    "started",
    "waiting",
    "scheduled",
    "not_ready",
)
DEFAULT_ARGS_SIMILARITY = 0.9
DEFAULT_THOUGHT_SIMILARITY = 0.5
DEFAULT_NEAR_DUPLICATE_REPEATS = 3
DEFAULT_MAX_PERIOD = 4
DEFAULT_MIN_CYCLES = 2
DEFAULT_ECHO_SIMILARITY = 0.65
DEFAULT_ECHO_REPEATS = 3
DEFAULT_DEADLOCK_SIMILARITY = 0.6
DEFAULT_DEADLOCK_TURNS = 3
# graduated heuristics: how many of a pattern's trips only warn before the next one cuts
DEFAULT_WARN_FIRST = dict.fromkeys(sorted(H.GRADUATED), 1)
MAX_WARN_FIRST = 10
DEFAULT_CHURN_SESSIONS = 3
DEFAULT_CHURN_OPENING_CALLS = 3
DEFAULT_CHURN_WINDOW_S = 60.0

# room for a long run: max_steps (500) at a 40k-token context each; a coding agent re-sends its
# whole context every step, so 100 steps of a big repository can pass 5M
DEFAULT_MAX_TOKENS = 20_000_000
DEFAULT_MAX_COST_USD = 10.0
DEFAULT_SOFT_LIMIT_PCT = 85.0
DEFAULT_MAX_TOKENS_PER_S = 50_000.0
DEFAULT_VELOCITY_WINDOW_S = 10.0
DEFAULT_MAX_STEPS = 500
DEFAULT_MAX_DEPTH = 4

DEFAULT_RECEIPT_KEY_ENV = "AGENT_BREAKER_RECEIPT_KEYS"
# an uppercase prefix, a dash and digits (TX-99482), but not the names of standards an honest
# answer may mention (ISO-8601, SHA-256, RFC-7231, ...)
# (the lookahead and back-reference make the letter run atomic: no backtracking into it)
DEFAULT_REFERENCE_PATTERNS = (r"\b(?!(?:ISO|RFC|SHA|AES|UTF|CVE|PEP|GPT|COVID|IEEE|ANSI|ECMA|HTTP)-)(?=([A-Z]{2,}))\1-\d{3,}\b",)
DEFAULT_CLAIM_VERBS = {
    "transferred": "transfer",
    "sent": "send",
    "booked": "book",
    "refunded": "refund",
    "deleted": "delete",
    "created": "create",
    "completed": "complete",
    "paid": "pay",
    "cancelled": "cancel",
    "canceled": "cancel",
    "charged": "charge",
    "submitted": "submit",
    "wired": "wire",
    "updated": "update",
    # other words for a done deed; "completed" and these name no action of their own (any action
    # tried may back them), so they count only in a sentence about an action tried, or a sum
    "processed": "complete",
    "executed": "complete",
    "settled": "pay",
    "went through": "complete",
    "gone through": "complete",
    "on its way": "send",
    "on their way": "send",
    "taken care of": "complete",
    "all done": "complete",
    "successful": "complete",
    "left your account": "transfer",
    "left the account": "transfer",
    "issued": "complete",
    "finalized": "complete",
    "finalised": "complete",
    "deployed": "deploy",
    "released": "deploy",
    "rolled out": "deploy",
    # the same in the languages agents most often answer in
    "realizado": "complete",
    "realizada": "complete",
    "efectuado": "complete",
    "efectuada": "complete",
    "completado": "complete",
    "completada": "complete",
    "procesado": "complete",
    "procesada": "complete",
    "enviado": "send",
    "enviada": "send",
    "enviados": "send",
    "envié": "send",
    "enviei": "send",
    "transferí": "transfer",
    "pagué": "pay",
    "paguei": "pay",
    "reembolsé": "refund",
    "realicé": "complete",
    "procesé": "complete",
    "transferido": "transfer",
    "transferida": "transfer",
    "pagado": "pay",
    "pagada": "pay",
    "reembolsado": "refund",
    "reembolsada": "refund",
    "reservado": "book",
    "reservada": "book",
    "cancelado": "cancel",
    "cancelada": "cancel",
    "effectué": "complete",
    "effectuée": "complete",
    "effectue": "complete",
    "effectuee": "complete",
    "envoyé": "send",
    "envoyée": "send",
    "transféré": "transfer",
    "transférée": "transfer",
    "payé": "pay",
    "payée": "pay",
    "remboursé": "refund",
    "remboursée": "refund",
    "réservé": "book",
    "réservée": "book",
    "annulé": "cancel",
    "annulée": "cancel",
    "terminé": "complete",
    "terminée": "complete",
    "ausgeführt": "complete",
    "durchgeführt": "complete",
    "abgeschlossen": "complete",
    "erledigt": "complete",
    "überwiesen": "transfer",
    "gesendet": "send",
    "versendet": "send",
    "verschickt": "send",
    "bezahlt": "pay",
    "erstattet": "refund",
    "gebucht": "book",
    "storniert": "cancel",
    "concluída": "complete",
    "concluído": "complete",
    "efetuada": "complete",
    "efetuado": "complete",
    "reembolsou": "refund",
    "effettuato": "complete",
    "effettuata": "complete",
    "inviato": "send",
    "inviata": "send",
    "pagato": "pay",
    "completato": "complete",
    "completata": "complete",
}

# what tools can do each generic claim verb's action, by name stems (besides the verb's own stem):
# "I sent the $500" is backed by a transfer, "cancelled" by a deletion; "*": any action
DEFAULT_CLAIM_FAMILIES = {
    "transfer": ("transfer", "wire", "send", "pay", "remit", "payout"),
    "send": (
        "send",
        "email",
        "mail",
        "message",
        "sms",
        "notify",
        "post",
        "reply",
        "forward",
        "dispatch",
        "publish",
        "share",
        "transfer",
        "wire",
        "pay",
        "submit",
        "invite",
    ),
    "book": ("book", "reserve", "reservation", "schedule", "purchase", "buy"),
    "deploy": ("deploy", "release", "rollout", "ship", "publish", "launch", "promote"),
    "refund": ("refund", "return", "cancel", "credit", "reimburse", "reverse"),
    "delete": ("delete", "remove", "cancel", "drop", "purge", "erase", "destroy", "archive", "revoke"),
    "create": (
        "create",
        "add",
        "insert",
        "make",
        "new",
        "open",
        "register",
        "book",
        "post",
        "upload",
        "generate",
        "write",
        "file",
        "submit",
    ),
    "complete": ("*",),
    "pay": ("pay", "charge", "transfer", "wire", "purchase", "buy", "checkout", "remit"),
    "cancel": ("cancel", "void", "revoke", "delete", "remove", "terminate", "abort", "refund"),
    "charge": ("charge", "pay", "bill", "purchase", "buy", "checkout"),
    "submit": ("submit", "send", "post", "file", "upload", "create", "apply", "request"),
    "wire": ("wire", "transfer", "send", "pay", "remit"),
    "update": (
        "update",
        "modify",
        "change",
        "edit",
        "set",
        "patch",
        "exchange",
        "upgrade",
        "move",
        "rename",
        "assign",
        "replace",
        "save",
        "write",
    ),
}

# more verbs a tool's name may be named after (besides the claim verbs' stems): it acts on the
# world. Words that are nouns as often as verbs (order, file, ticket) are left out; "email" and
# "message" stay: a tool that only reads them says so (get_messages, list_emails are readers).
DEFAULT_ACTION_STEMS = (
    "post",
    "email",
    "sms",
    "message",
    "notify",
    "publish",
    "insert",
    "remove",
    "approve",
    "reject",
    "purchase",
    "buy",
    "forward",
    "reply",
    "invite",
    "upload",
    "deploy",
    "merge",
    "escalate",
    "grant",
    "revoke",
    "assign",
    "dispatch",
    "modify",
    "exchange",
    "schedule",
)
# a tool named with one of these only looks (get_update_status, check_payment): never inferred mutating
DEFAULT_READ_STEMS = (
    "get",
    "list",
    "search",
    "read",
    "fetch",
    "find",
    "check",
    "view",
    "lookup",
    "query",
    "show",
    "describe",
    "count",
    "preview",
    "validate",
    "estimate",
    "calculate",
    "status",
)

FINGERPRINT_SECRET_ENV = "AGENT_BREAKER_FINGERPRINT_SECRET"


class Alternative(_Frozen):
    """fallback.alternatives[]: an equivalent tool, and how this tool's arguments map onto its."""

    tool: str = Field(min_length=1, description="The equivalent tool (it has its own breaker).")
    args: dict[str, str] = Field(
        default_factory=dict,
        description="Its argument <- a path in the refused call's arguments ('customer.id'); empty: the same arguments.",
    )
    constants: dict[str, Any] = Field(default_factory=dict, description="Arguments of fixed value.")

    @field_validator("tool")
    @classmethod
    def _normalized(cls, tool: str) -> str:
        return normalize_name(tool)

    def mapped(self, args: Any) -> dict[str, Any] | None:
        """The alternative's arguments, or None when the refused call lacks a mapped path."""
        if not self.args:
            return {**args, **self.constants} if isinstance(args, dict) else None
        out: dict[str, Any] = {}
        for target, path in self.args.items():
            value: Any = args
            for part in path.split("."):
                if not isinstance(value, dict) or part not in value:
                    return None
                value = value[part]
            out[target] = value
        return {**out, **self.constants}


class FallbackConfig(_Frozen):
    """fallback: where a call goes when the tool's breaker refuses it, tier by tier: the first
    alternative whose breaker lets calls through, else the static answer, else a human."""

    alternatives: tuple[Alternative, ...] = ()
    static: str | None = Field(None, min_length=1, max_length=4000, description="A deterministic answer, as the observation.")
    escalate: bool = Field(False, description="Hand the session to a human (the escalation queue) when nothing else serves.")


class ToolPolicy(_Frozen):
    """What the guard knows of one tool (under `tools:`, by its normalized name)."""

    mutating: bool = Field(False, description="Changes the world (payments, writes, e-mail); results get receipts.")
    read_only: bool = Field(False, description="May still run past the budget's soft limit.")
    polling: bool = Field(False, description="A status tool polled on purpose: stuck_polling applies, not identical_call.")
    max_tokens: int | None = Field(None, ge=1, description="Token allocation of this tool per session (tool_token_budget).")
    claim_phrases: tuple[str, ...] = Field(
        (), description="Phrases by which a final answer claims this tool's action happened (unverified_claim)."
    )
    idempotent: bool = Field(
        False, description="Running the same call twice has the effect of once: duplicate_mutation leaves it alone."
    )
    failures: Literal["auto", "dependency", "call"] = Field(
        "auto",
        description="Whose are this tool's failures: read from each error (auto), always the dependency's (they "
        "count for its breaker), or always the call's own (they feed the loop detectors only).",
    )
    args_schema: dict[str, Any] | None = Field(None, description="JSON Schema the arguments must meet (schema_violation).")
    args_model: str | None = Field(None, description="A pydantic model ('package.module:Model') the arguments must meet.")
    result_schema: dict[str, Any] | None = Field(
        None, description="JSON Schema a successful result must meet; one that does not is a failed call (the call's own)."
    )
    result_model: str | None = Field(None, description="A pydantic model a successful result must meet.")
    fallback: FallbackConfig | None = Field(None, description="Where a call goes when this tool's breaker refuses it.")
    dependency_arg: str | None = Field(
        None,
        description="The top-level argument that names what this tool's calls depend on: each value gets a breaker "
        "of its own (a URL: its host). Default: breaker.dependency_args, URLs only.",
    )

    @model_validator(mode="after")
    def _schemas_compile(self) -> ToolPolicy:
        # a schema that cannot check anything fails the config now, not the first call
        try:
            compile_check(self.args_schema, self.args_model)
            compile_check(self.result_schema, self.result_model)
        except SchemaError as exc:
            raise ValueError(str(exc)) from None
        return self

    def args_check(self) -> Check | None:
        return compile_check(self.args_schema, self.args_model)

    def result_check(self) -> Check | None:
        return compile_check(self.result_schema, self.result_model)


class IdenticalFailureConfig(_Frozen):
    """identical_failure: the same call failing in a row."""

    max_failures: int = Field(
        DEFAULT_IDENTICAL_FAILURES, ge=1, description="The same call failing this many times in a row blocks the next."
    )
    max_transient_failures: int = Field(
        DEFAULT_TRANSIENT_FAILURES,
        ge=1,
        description="The same, for dependency failures (timeouts, 429, 5xx: expected to clear); also raises "
        "identical_call and near_duplicate limits for them.",
    )
    args_similarity: float = Field(
        DEFAULT_RETRY_SIMILARITY,
        gt=0,
        le=1,
        description="Calls of one tool that fail with the same error count as one call retried when they share an "
        "argument value, or when their arguments are this similar (ids and numbers aside): a salt, a fresh id or a "
        "new edit does not make a retry new.",
    )


class IdenticalCallConfig(_Frozen):
    """identical_call: the same call again with no new result."""

    max_repeats: int = Field(
        DEFAULT_IDENTICAL_REPEATS, ge=2, description="Runs of the same call with no progress before the next is blocked."
    )
    max_silent_repeats: int = Field(
        DEFAULT_SILENT_REPEATS,
        ge=2,
        description="The same for a call whose result is empty (a command that prints nothing, cd, export): "
        "re-running one is cheap and often a recovery step.",
    )
    window_s: float = Field(DEFAULT_IDENTICAL_WINDOW_S, gt=0, description="Repeats further apart than this start over.")


class DoneClaimConfig(_Frozen):
    """done_claim: a coding agent's last message checked against what its tools did."""

    max_refusals_per_turn: int = Field(
        DEFAULT_MAX_DONE_REFUSALS,
        ge=0,
        le=100,
        description="Stops refused per turn: past this many the agent stops, its unsupported claim recorded (incident, report).",
    )
    commands: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="Your own commands by kind (test, build, typecheck, lint, commit, push): regular expressions matched "
        "against each command of a shell line, beside the common tools' (pytest, npm test, cargo test, tsc, git push...).",
    )

    @field_validator("commands")
    @classmethod
    def _known_kinds(cls, commands: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        kinds = ("test", "build", "typecheck", "lint", "commit", "push")
        for kind, patterns in commands.items():
            if kind not in kinds:
                raise ValueError(f"done_claim.commands: unknown kind {kind!r}; one of {', '.join(kinds)}")
            _compiled(patterns, f"done_claim.commands.{kind}:")
        return commands


class StuckPollingConfig(_Frozen):
    """stuck_polling: a poll whose result never changes."""

    max_polls: int = Field(DEFAULT_MAX_POLLS, ge=2, le=1000, description="Polls with an unchanged result allowed in the window.")
    window_s: float = Field(DEFAULT_POLL_WINDOW_S, gt=0)
    max_wait_s: float | None = Field(
        DEFAULT_MAX_WAIT_S,
        gt=0,
        description="Slow polls: a poll whose result has not changed for this long (wall time, at least "
        "min_slow_polls polls) blocks the next, however far apart the polls are (null: off).",
    )
    min_slow_polls: int = Field(DEFAULT_MIN_SLOW_POLLS, ge=2, description="Unchanged polls max_wait_s needs.")
    polling_tools: tuple[str, ...] = Field(
        DEFAULT_POLLING_TOOLS, description="Glob patterns of tool names that are polled on purpose."
    )
    in_progress_values: tuple[str, ...] = Field(
        DEFAULT_IN_PROGRESS_VALUES,
        description="A result whose status/state field holds one of these marks its call as a poll.",
    )

    @field_validator("polling_tools")
    @classmethod
    def _patterns_normalized(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        # tool names are compared normalized (case and look-alikes aside): so are the patterns
        return tuple(normalize_name(p) for p in patterns)

    def is_polling_tool(self, tool: str) -> bool:
        return any(fnmatch.fnmatchcase(tool, p) for p in self.polling_tools)


class NearDuplicateConfig(_Frozen):
    """near_duplicate: the same call in other words."""

    args_similarity: float = Field(DEFAULT_ARGS_SIMILARITY, gt=0, le=1)
    thought_similarity: float = Field(DEFAULT_THOUGHT_SIMILARITY, ge=0, le=1)
    max_repeats: int = Field(DEFAULT_NEAR_DUPLICATE_REPEATS, ge=2)
    window_s: float = Field(DEFAULT_IDENTICAL_WINDOW_S, gt=0, description="A chain idle longer than this starts over.")


class OscillationConfig(_Frozen):
    """oscillation: A-B-A-B and longer cycles with unchanged results."""

    max_period: int = Field(DEFAULT_MAX_PERIOD, ge=2, le=8, description="Longest cycle looked for (A-B: 2).")
    min_cycles: int = Field(DEFAULT_MIN_CYCLES, ge=2, le=5, description="Full turns of the cycle, the blocked call included.")


class SameAnswerConfig(_Frozen):
    """same_answer: many calls of one tool, with other arguments each time, and one answer."""

    max_calls: int = Field(
        DEFAULT_SAME_ANSWER_CALLS,
        ge=2,
        description="Calls of one tool with different arguments in a row that all returned the same non-blank "
        "result; the next is blocked. Mutating and polling tools, writes of content, failures and blank results "
        "do not count.",
    )


class DuplicateMutationConfig(_Frozen):
    """duplicate_mutation: a mutating call repeated after it succeeded."""

    window_s: float = Field(
        DEFAULT_DUPLICATE_WINDOW_S, gt=0, description="A repeat later than this after the success is allowed."
    )
    in_flight_s: float = Field(
        DEFAULT_IN_FLIGHT_S,
        gt=0,
        description="A call identical to one let through this recently whose result has not come back is refused at "
        "once (parallel tool calls of one model turn); an older one is taken as lost.",
    )
    idempotency_fields: tuple[str, ...] = Field(
        DEFAULT_IDEMPOTENCY_FIELDS,
        description="Argument keys (compared ignoring case and punctuation) holding an idempotency key: left out of "
        "a call's effect, as the model makes them up (besides any key naming a nonce, a dedupe, client or "
        "operation reference).",
    )


class UserTurnsConfig(_Frozen):
    """Which user turns are new information (they restart loop streaks and lift loop halts)."""

    nudge_words: tuple[str, ...] = Field(
        DEFAULT_NUDGE_WORDS,
        description="A turn made only of these words (case and punctuation aside) is a bare nudge: not new information.",
    )
    confirmation_words: tuple[str, ...] = Field(
        DEFAULT_CONFIRMATION_WORDS,
        description="A turn made only of these words is a confirmation: the session's first is information, "
        "later ones repeat it.",
    )
    auto_reply_patterns: tuple[str, ...] = Field(
        DEFAULT_AUTO_REPLY_PATTERNS, description="Regexes (case-insensitive) of auto-replies: not new information."
    )

    @field_validator("auto_reply_patterns")
    @classmethod
    def _patterns_compile(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        return _compiled(patterns, "auto_reply pattern")


class ProgressConfig(_Frozen):
    """What is not progress in a result: what churns while nothing changes."""

    result_churn_patterns: tuple[str, ...] = Field(
        (),
        description="Regexes over a result's canonical JSON whose matches are ignored when judging whether "
        "a result is new, added to the built-in ones (ids, timestamps, durations, element refs, run numbers).",
    )
    builtin_churn_patterns: bool = Field(True, description="Use the built-in churn patterns.")

    @field_validator("result_churn_patterns")
    @classmethod
    def _patterns_compile(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        return _compiled(patterns, "result churn pattern")


def _compiled(patterns: tuple[str, ...], what: str) -> tuple[str, ...]:
    for p in patterns:
        try:
            re.compile(p)
        except re.error as exc:
            raise ValueError(f"{what} {p!r} is not a valid regex: {exc}") from None
    return patterns


class SemanticEchoConfig(_Frozen):
    """semantic_echo: an assistant saying the same thing in other words."""

    similarity: float = Field(DEFAULT_ECHO_SIMILARITY, gt=0, le=1)
    max_repeats: int = Field(DEFAULT_ECHO_REPEATS, ge=2, description="Similar assistant turns in a row that trip.")


class AgentDeadlockConfig(_Frozen):
    """agent_deadlock: agents trading the same status messages."""

    similarity: float = Field(DEFAULT_DEADLOCK_SIMILARITY, gt=0, le=1)
    max_turns: int = Field(DEFAULT_DEADLOCK_TURNS, ge=2, description="Repeated status turns across agents that trip.")


class SessionChurnConfig(_Frozen):
    """session_churn: the same failing call retried across new sessions (or agent ids) of one tenant."""

    max_sessions: int = Field(
        DEFAULT_CHURN_SESSIONS,
        ge=2,
        description="New sessions of one tenant, whatever their agent, in whose opening a call failed the same way "
        "(the call's own failure) with calls sharing their argument values: this many block the next such call. "
        "Successful calls are never churn: many users open sessions with the same lookup.",
    )
    opening_calls: int = Field(
        DEFAULT_CHURN_OPENING_CALLS,
        ge=1,
        le=64,
        description="A session counts toward the chains while it has made at most this many calls: a retry opens a "
        "session, tries, and gives up; a session that goes on to real work leaves them.",
    )
    window_s: float = Field(DEFAULT_CHURN_WINDOW_S, gt=0, description="A chain idle longer than this starts over.")


class Price(_Frozen):
    """A model's price per million tokens."""

    input_per_mtok_usd: float = Field(ge=0)
    output_per_mtok_usd: float = Field(ge=0)


class BudgetConfig(_Frozen):
    """Session budgets: token_budget, cost_budget, budget_soft_limit."""

    max_tokens: int | None = Field(DEFAULT_MAX_TOKENS, ge=1, description="Session tokens, input + output (null: off).")
    max_cost_usd: float | None = Field(DEFAULT_MAX_COST_USD, gt=0, description="Session spend (null: off).")
    soft_limit_pct: float = Field(
        DEFAULT_SOFT_LIMIT_PCT, gt=0, le=100, description="Past this share of a limit, soft_limit_blocks are refused."
    )
    soft_limit_blocks: Literal["mutating", "all_but_read_only"] = Field(
        "mutating",
        description="What the soft limit refuses: tools that act (mutating; the rest may finish the work), or "
        "every tool not marked read_only.",
    )
    prices: dict[str, Price] = Field(default_factory=dict, description="Price per model, used when cost_usd is absent.")
    default_model: str | None = Field(None, description="Model priced when an event names none.")

    @model_validator(mode="after")
    def _default_model_priced(self) -> BudgetConfig:
        if self.default_model is not None and self.default_model not in self.prices:
            raise ValueError(f"default_model must be one of prices ({sorted(self.prices)}), but was {self.default_model!r}")
        return self


class VelocityConfig(_Frozen):
    """token_velocity: tokens per second over a short window."""

    max_tokens_per_s: float = Field(DEFAULT_MAX_TOKENS_PER_S, gt=0)
    window_s: float = Field(DEFAULT_VELOCITY_WINDOW_S, gt=0)


class StepLimitConfig(_Frozen):
    """step_limit: model steps per session."""

    max_steps: int = Field(DEFAULT_MAX_STEPS, ge=1, description="Model steps (tool calls and assistant turns) per session.")


class DepthLimitConfig(_Frozen):
    """depth_limit: how deep agents may delegate."""

    max_depth: int = Field(DEFAULT_MAX_DEPTH, ge=0, description="Deepest agent nesting allowed (0 = top level only).")


class ReceiptsConfig(_Frozen):
    """Execution receipts and the final-answer check (unverified_claim)."""

    key_env: str = Field(DEFAULT_RECEIPT_KEY_ENV, description="Environment variable holding 'kid:key[,kid:key]'.")
    key_file: str | None = Field(None, description='JSON file {"current": kid, "keys": {kid: key}}; wins over key_env.')
    dev_ephemeral_key: bool = Field(False, description="Development only: sign with a random per-process key.")
    infer_mutating: bool = Field(True, description="Treat tools named after an action (wire_transfer, send_email) as mutating.")
    action_stems: tuple[str, ...] = Field(
        DEFAULT_ACTION_STEMS, description="Name tokens that make a tool mutating (infer_mutating), besides claim verbs' stems."
    )
    read_stems: tuple[str, ...] = Field(
        DEFAULT_READ_STEMS, description="Name tokens that make a tool a reader: never inferred mutating."
    )
    reference_patterns: tuple[str, ...] = Field(
        DEFAULT_REFERENCE_PATTERNS, description="Regexes of reference ids an answer must not invent."
    )
    claim_verbs: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_CLAIM_VERBS),
        description="Generic completion claims, each with the tool-name stem it is about.",
    )
    claim_families: dict[str, tuple[str, ...]] = Field(
        default_factory=lambda: dict(DEFAULT_CLAIM_FAMILIES),
        description="Per claim-verb stem, the tool-name stems of tools that can do that action (a generic claim needs "
        "a receipted success of one; '*': any mutating tool). A stem not listed is backed by its own tools only.",
    )

    @field_validator("reference_patterns")
    @classmethod
    def _patterns_compile(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        return _compiled(patterns, "reference pattern")

    #: the signing keys `key_env` held when the config was read (`with_environment`): kept out of
    #: the config's fields, so no dump, print or override carries them
    _keys: str | None = PrivateAttr(None)

    @property
    def keys(self) -> str | None:
        """'kid:key[,kid:key]' from `key_env`, as the environment held it when the config was read."""
        return self._keys


STORAGE_SCHEMES = ("memory://", f"{SQLITE_SCHEME}:///", *REDIS_URL_PREFIXES)
STORAGE_SCHEMES_TEXT = f"memory://, {SQLITE_SCHEME}:///, {REDIS_URLS_TEXT}"


class StorageConfig(_Frozen):
    """Where guard state lives (process-level: not per tenant)."""

    url: str = Field(
        "memory://",
        description="memory:// (in process), or a Redis shared by a fleet: redis://host:port/db, rediss://, unix://, "
        "or redis+cluster://host:port (rediss+cluster://) for a Redis Cluster, naming any one of its nodes.",
    )
    url_env: str | None = Field(None, description="An environment variable that, when set, holds the URL instead.")
    key_prefix: str = Field("ab", min_length=1, description="Prefix of every Redis key.")
    on_error: Literal["local", "fail_closed", "fail_open"] = Field(
        "local",
        description="Redis down or slow: keep guarding with in-process state (local), refuse every call "
        "(fail_closed), or let every call through with a warning (fail_open).",
    )
    timeout_ms: float = Field(250.0, gt=0, description="No decision waits longer than this on Redis.")
    retry_s: float = Field(1.0, gt=0, description="After a Redis error, try Redis again after this long.")
    near_cache_s: float = Field(1.0, ge=0, description="How long a worker trusts a breaker it knows is closed.")

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, url: str) -> str:
        if not url.startswith(STORAGE_SCHEMES):
            # no part of the value in the message: a URL without its scheme may still hold a password
            raise ValueError(f"url must start with {STORAGE_SCHEMES_TEXT}")
        return url

    @property
    def in_process(self) -> bool:
        """Whether the state lives in this process's memory alone (`memory://`)."""
        return self.url.startswith("memory://")


INCIDENT_WEBHOOK_ENV = "AGENT_BREAKER_INCIDENT_WEBHOOK"


class WebhookConfig(_Frozen):
    """incidents.webhook: each incident POSTed as JSON (typed fields and a Slack-compatible `text`)."""

    url: str | None = Field(None, description="http(s) URL to POST each incident to.")
    url_env: str | None = Field(INCIDENT_WEBHOOK_ENV, description="An environment variable that, when set, holds the URL.")
    timeout_s: float = Field(5.0, gt=0, le=60, description="Longest wait for one delivery attempt.")
    retries: int = Field(3, ge=0, le=10, description="Attempts after the first, with exponential backoff.")
    backoff_s: float = Field(0.5, gt=0, description="Wait before the first retry; doubled each retry.")
    max_backoff_s: float = Field(30.0, gt=0, description="Longest wait between two attempts.")
    queue_size: int = Field(1000, ge=1, le=1_000_000, description="Incidents waiting past this are dropped (and counted).")

    @field_validator("url")
    @classmethod
    def _http(cls, url: str | None) -> str | None:
        return _checked_url(url or None, HTTP_URL)


class IncidentsConfig(_Frozen):
    """Where incidents (trips and breaker transitions) go besides the `agent_breaker.incidents`
    logger (process-level). Delivery never blocks a decision: a bounded queue, one thread."""

    webhook: WebhookConfig = WebhookConfig()
    file: str | None = Field(None, description="Append each incident as a JSON line to this file.")


ESCALATIONS_DB_ENV = "AGENT_BREAKER_ESCALATIONS_DB"
QUEUE_URL_ENV = "AGENT_BREAKER_QUEUE_URL"
DEFAULT_QUEUE_NAME = "agent_breaker.escalations"
DEFAULT_MAX_EXCERPT_CHARS = 200
#: open escalations per tenant before the next ones are collapsed: one tenant holds at most a
#: fifth of the 100 a listing shows by default, so a flood cannot hide another tenant's case
DEFAULT_MAX_OPEN_PER_TENANT = 20


class EscalationsConfig(_Frozen):
    """escalations: the human escalation queue (a SQLite file) and where its outbox is relayed
    (RabbitMQ, besides the incident sinks). Where things live, and the open escalations a tenant
    may have, are process-level; whether a record may carry payload excerpts is set per tenant
    (overrides)."""

    store: Literal["auto", "sqlite", "redis"] = Field(
        "auto",
        description="Where escalations live: sqlite (the file below, one per machine), redis (the Redis of `storage`, "
        "shared by a fleet), or auto: redis when storage.url is a Redis URL (" + REDIS_URLS_TEXT + "), else sqlite.",
    )
    db: str | None = Field(
        None,
        description=f"The SQLite file (${ESCALATIONS_DB_ENV} wins when set; neither: "
        "$XDG_STATE_HOME/agent-breaker/escalations.db, else ~/.local/state/agent-breaker/escalations.db).",
    )
    db_env: str | None = Field(ESCALATIONS_DB_ENV, description="An environment variable that, when set, holds the file's path.")
    queue_url: str | None = Field(None, description="amqp:// or amqps:// URL of a RabbitMQ broker the relay publishes to.")
    queue_url_env: str | None = Field(QUEUE_URL_ENV, description="An environment variable that, when set, holds the URL.")
    queue: str = Field(
        DEFAULT_QUEUE_NAME,
        min_length=1,
        max_length=255,
        pattern=r"^[A-Za-z0-9_.:-]+$",
        description="The durable quorum queue the relay publishes to.",
    )
    excerpts: bool = Field(
        False,
        description="Records may carry short payload excerpts (off: names, numbers and hashes only); set it per "
        "tenant with an override.",
    )
    max_excerpt_chars: int = Field(DEFAULT_MAX_EXCERPT_CHARS, ge=1, le=2000, description="Longest excerpt kept, when on.")
    max_open_per_tenant: int = Field(
        DEFAULT_MAX_OPEN_PER_TENANT,
        ge=1,
        le=1000,
        description="Open escalations one tenant (or the sessions without one) may have. Past it a new escalation is "
        "collapsed onto the tenant's newest open one: its session frozen all the same, counted in that record's "
        "`collapsed` and decided with it, and the first one alerted. Keep it well under the listing's default 100, "
        "so one tenant's flood leaves room for the others' cases.",
    )

    @field_validator("queue_url")
    @classmethod
    def _amqp(cls, url: str | None) -> str | None:
        return _checked_url(url or None, AMQP_URL)


#: the schemes of the URLs the environment may supply, as their error messages name them
HTTP_URL = (("http://", "https://"), "an http:// or https:// URL")
AMQP_URL = (("amqp://", "amqps://"), "an amqp:// or amqps:// URL")


def _checked_url(url: str | None, kind: tuple[tuple[str, ...], str]) -> str | None:
    """`url` when it is of `kind` (or None); else ValueError (no part of the value in the
    message: a URL may hold a password)."""
    if url is not None and not url.startswith(kind[0]):
        raise ValueError(f"must be {kind[1]}")
    return url


def _from_environment(url: str, kind: tuple[tuple[str, ...], str], variable: str | None) -> None:
    try:
        _checked_url(url, kind)
    except ValueError as exc:
        raise ConfigError(f"${variable} {exc}") from None


def default_db_path(environ: Mapping[str, str]) -> Path:
    """$XDG_STATE_HOME/agent-breaker/escalations.db, else ~/.local/state/agent-breaker/escalations.db.

    State, not cache (it must survive) nor config; per user, and the same file wherever a
    command starts: the server, `agent-breaker escalations` and `agent-breaker relay` run from
    other working directories must all see one queue (a path relative to the working directory
    would split it silently)."""
    state = environ.get("XDG_STATE_HOME") or ""
    base = Path(state) if Path(state).is_absolute() else Path.home() / ".local" / "state"  # the XDG rule: relative is ignored
    return base / "agent-breaker" / "escalations.db"


class GlobalBudgetConfig(_Frozen):
    """global_budget: spend per tenant and feature across every worker."""

    max_tokens: int | None = Field(None, ge=1, description="Tokens per tenant and feature in the window, all workers.")
    max_cost_usd: float | None = Field(None, gt=0, description="Spend per tenant and feature in the window, all workers.")
    tenant_max_tokens: int | None = Field(
        None,
        ge=1,
        description="Tokens per tenant, all its features together (default: max_tokens); read from the "
        "tenant's settings, not a feature's or an agent's.",
    )
    tenant_max_cost_usd: float | None = Field(
        None,
        gt=0,
        description="Spend per tenant, all its features together (default: max_cost_usd): a new feature "
        "label per request does not multiply the ceiling.",
    )
    window_s: float = Field(86_400.0, gt=0, description="The window (fixed, aligned on the epoch).")


class SessionsConfig(_Frozen):
    """How long idle sessions are kept, and how many (process-level)."""

    ttl_s: float = Field(DEFAULT_SESSION_TTL_S, gt=0, description="Idle sessions are forgotten after this.")
    max_sessions: int = Field(DEFAULT_MAX_SESSIONS, ge=1, description="Least recently used sessions go past this.")
    max_bytes: int = Field(
        DEFAULT_MAX_SESSION_BYTES,
        ge=1 << 20,
        description="The in-process sessions' memory (estimated per session); past it the heaviest tenant's least "
        "recently used sessions go first (a halted one is compacted, not dropped).",
    )
    max_sessions_per_tenant: int | None = Field(
        None, ge=1, description="A tenant's sessions kept in process; past it, that tenant's least recently used go."
    )


class Override(_Frozen):
    """Settings for one tenant / feature / agent, merged over the base config."""

    tenant: str | None = None
    feature: str | None = None
    agent: str | None = None
    settings: dict[str, Any] = Field(description="A partial config tree merged over the base one.")

    def matches(self, tenant: str | None, feature: str | None, agent: str | None) -> bool:
        return (
            (self.tenant is None or self.tenant == tenant)
            and (self.feature is None or self.feature == feature)
            and (self.agent is None or self.agent == agent)
        )

    def specificity(self) -> int:
        return sum(x is not None for x in (self.tenant, self.feature, self.agent))


class AgentBreakerConfig(_Frozen):
    """The whole config tree (`custom_data: agent_breaker:`), frozen and validated when built."""

    mode: Mode = Field("enforce", description="enforce: block; observe: report only; off: do nothing.")
    modes: dict[str, Mode] = Field(default_factory=dict, description="Mode per heuristic, over `mode`.")
    volatile_fields: tuple[str, ...] = Field(
        DEFAULT_VOLATILE_FIELDS, description="Argument/result keys ignored when comparing calls."
    )
    max_args_bytes: int = Field(DEFAULT_MAX_ARGS_BYTES, ge=64, description="Largest canonical args accepted.")
    fingerprint_secret: str = Field(
        "",
        description=f"Key of every hash the engine keeps (empty: ${FINGERPRINT_SECRET_ENV}, else a random "
        "per-process key; shared storage needs one secret for the whole fleet). Prefer the variable to a file.",
    )
    breaker: BreakerConfig = BreakerConfig()
    tools: dict[str, ToolPolicy] = Field(default_factory=dict)
    identical_failure: IdenticalFailureConfig = IdenticalFailureConfig()
    identical_call: IdenticalCallConfig = IdenticalCallConfig()
    stuck_polling: StuckPollingConfig = StuckPollingConfig()
    done_claim: DoneClaimConfig = DoneClaimConfig()
    near_duplicate: NearDuplicateConfig = NearDuplicateConfig()
    oscillation: OscillationConfig = OscillationConfig()
    same_answer: SameAnswerConfig = SameAnswerConfig()
    duplicate_mutation: DuplicateMutationConfig = DuplicateMutationConfig()
    user_turns: UserTurnsConfig = UserTurnsConfig()
    progress: ProgressConfig = ProgressConfig()
    semantic_echo: SemanticEchoConfig = SemanticEchoConfig()
    agent_deadlock: AgentDeadlockConfig = AgentDeadlockConfig()
    session_churn: SessionChurnConfig = SessionChurnConfig()
    budget: BudgetConfig = BudgetConfig()
    token_velocity: VelocityConfig = VelocityConfig()
    step_limit: StepLimitConfig = StepLimitConfig()
    depth_limit: DepthLimitConfig = DepthLimitConfig()
    receipts: ReceiptsConfig = ReceiptsConfig()
    global_budget: GlobalBudgetConfig = GlobalBudgetConfig()
    storage: StorageConfig = StorageConfig()
    sessions: SessionsConfig = SessionsConfig()
    incidents: IncidentsConfig = IncidentsConfig()
    escalations: EscalationsConfig = EscalationsConfig()
    warn_first: dict[str, int] = Field(
        default_factory=lambda: dict(DEFAULT_WARN_FIRST),
        description="Heuristics that can be wrong warn first: the first N trips of a pattern let the call run and "
        "tell the agent; the next trip, with no progress in between, cuts (0: cut at once). Only the loop "
        "heuristics and duplicate_mutation may be listed; a heuristic left out cuts at once.",
    )
    overrides: tuple[Override, ...] = Field(
        (), description="Settings per tenant / feature / agent; the more specific override wins."
    )

    @field_validator("tools")
    @classmethod
    def _tool_names_normalized(cls, tools: dict[str, ToolPolicy]) -> dict[str, ToolPolicy]:
        # events name tools by their normalized spelling (look-alikes, invisible characters, case)
        out: dict[str, ToolPolicy] = {}
        for name, policy in tools.items():
            key = normalize_name(name)
            if key in out:
                raise ValueError(f"tools names {key!r} twice (tool names compare normalized: case and look-alikes aside)")
            out[key] = policy
        return out

    @field_validator("modes")
    @classmethod
    def _known_heuristics(cls, modes: dict[str, Mode]) -> dict[str, Mode]:
        unknown = sorted(set(modes) - set(H.CONFIGURABLE))
        if unknown:
            raise ValueError(f"modes names unknown heuristics {unknown}; known: {list(H.CONFIGURABLE)}")
        return modes

    @field_validator("warn_first")
    @classmethod
    def _graduated_heuristics(cls, warn_first: dict[str, int]) -> dict[str, int]:
        wrong = sorted(set(warn_first) - H.GRADUATED)
        if wrong:
            raise ValueError(
                f"warn_first names heuristics that cut at once or do not exist {wrong}; graduated: {sorted(H.GRADUATED)}"
            )
        for heuristic, n in warn_first.items():
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_WARN_FIRST:
                raise ValueError(f"warn_first.{heuristic} must be an integer from 0 to {MAX_WARN_FIRST}, but was {n!r}")
        return warn_first

    @model_validator(mode="after")
    def _overrides_are_valid(self) -> AgentBreakerConfig:
        base = self.model_dump(exclude={"overrides"})
        for i, override in enumerate(self.overrides):
            if "overrides" in override.settings:
                raise ValueError(f"overrides[{i}].settings may not hold overrides")
            for path in _process_level_keys(override.settings):
                raise ValueError(
                    f"overrides[{i}].settings.{path} is a process-level setting: set it at the top of the config, "
                    "not per tenant / feature / agent"
                )
            try:
                AgentBreakerConfig.model_validate(_deep_merge(base, override.settings))
            except ValidationError as exc:
                raise ValueError(f"overrides[{i}].settings: {_describe(exc)}") from None
        return self

    def with_environment(self, environ: Mapping[str, str]) -> AgentBreakerConfig:
        """This config with what the environment supplies put in place: the storage URL
        (`storage.url_env`), the webhook and queue URLs, the escalation file (its variable, else
        the XDG state folder), the receipt keys (`receipts.key_env`) and the fingerprint secret.
        The config loaders call it, at the edges (the CLI, `serve`, the hook command, NeMo's
        `init`, `Engine(dict)`); nothing after them reads the environment. A config built in code
        holds what it was given."""

        def given(name: str | None) -> str | None:
            return (environ.get(name) or None) if name else None

        storage, webhook, esc = self.storage, self.incidents.webhook, self.escalations
        storage_url = given(storage.url_env)
        if storage_url is not None:
            if not storage_url.startswith(STORAGE_SCHEMES):
                raise ConfigError(f"${storage.url_env} must start with {STORAGE_SCHEMES_TEXT}")
            storage = storage.model_copy(update={"url": storage_url})
        webhook_url = given(webhook.url_env)
        if webhook_url is not None:
            _from_environment(webhook_url, HTTP_URL, webhook.url_env)
            webhook = webhook.model_copy(update={"url": webhook_url})
        queue_url = given(esc.queue_url_env)
        if queue_url is not None:
            _from_environment(queue_url, AMQP_URL, esc.queue_url_env)
        db = given(esc.db_env) or esc.db or str(default_db_path(environ))
        esc = esc.model_copy(update={"db": db, "queue_url": queue_url or esc.queue_url})
        receipts = self.receipts.model_copy()
        receipts._keys = given(receipts.key_env)
        return self.model_copy(
            update={
                "storage": storage,
                "incidents": self.incidents.model_copy(update={"webhook": webhook}),
                "escalations": esc,
                "receipts": receipts,
                "fingerprint_secret": self.fingerprint_secret or environ.get(FINGERPRINT_SECRET_ENV, ""),
            }
        )

    def mode_of(self, heuristic: str) -> Mode:
        if self.mode == "off":
            return "off"
        return self.modes.get(heuristic, self.mode)

    def tool(self, name: str) -> ToolPolicy:
        return self.tools.get(name, _DEFAULT_TOOL)

    def resolve(self, tenant: str | None, feature: str | None, agent: str | None) -> AgentBreakerConfig:
        """The config in force for one tenant / feature / agent (overrides applied)."""
        return self.resolve_overrides([o for o in self.overrides if o.matches(tenant, feature, agent)])

    def resolve_overrides(self, matching: list[Override]) -> AgentBreakerConfig:
        """This config with these of its overrides applied, the more specific last."""
        if not matching:
            return self
        merged = self.model_dump(exclude={"overrides"})
        for override in sorted(matching, key=Override.specificity):
            merged = _deep_merge(merged, override.settings)
        return AgentBreakerConfig.model_validate(merged)


_DEFAULT_TOOL = ToolPolicy()


#: settings that hold for the whole process (one store, one key set, one fingerprint secret):
#: an override cannot change them
PROCESS_LEVEL = (
    "storage",
    "sessions",
    "incidents",
    "escalations.store",
    "escalations.db",
    "escalations.db_env",
    "escalations.queue_url",
    "escalations.queue_url_env",
    "escalations.queue",
    "escalations.max_open_per_tenant",
    "fingerprint_secret",
    "receipts.key_env",
    "receipts.key_file",
    "receipts.dev_ephemeral_key",
)


def _process_level_keys(settings: Mapping[str, Any]) -> list[str]:
    found = []
    for path in PROCESS_LEVEL:
        head, _, tail = path.partition(".")
        value = settings.get(head)
        if value is not None and (not tail or (isinstance(value, Mapping) and tail in value)):
            found.append(path)
    return found


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(root)"
        msg = err["msg"].removeprefix("Value error, ")
        # a URL is not echoed: it may hold a password or a token
        url = bool(err["loc"]) and str(err["loc"][-1]).endswith("url")
        if "input" in err and err["type"] not in ("missing",) and not isinstance(err["input"], (dict, list)) and not url:
            parts.append(f"{where}: {msg} (got {err['input']!r})")
        else:
            parts.append(f"{where}: {msg}")
    return "; ".join(parts)


def parse_config(data: Mapping[str, Any] | None, environ: Mapping[str, str] = os.environ) -> AgentBreakerConfig:
    """Validate a config dict (the `agent_breaker:` block), with what `environ` supplies in
    place (`with_environment`). Raises ConfigError naming the bad value."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"agent_breaker config must be a mapping, but was {type(data).__name__}")
    try:
        config = AgentBreakerConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(f"invalid agent_breaker config: {_describe(exc)}") from None
    return config.with_environment(environ)


def config_file(folder: Path) -> Path | None:
    """A NeMo config folder's YAML file (`config.yml`, else `config.yaml`), or None."""
    for name in ("config.yml", "config.yaml"):
        if (folder / name).is_file():
            return folder / name
    return None


def config_folders(root: Path) -> dict[str, Path]:
    """The NeMo config folders under `root`, by name: `root` itself when it is one, else its
    sub-folders that are (what `nemoguardrails server` and `agent-breaker serve` serve)."""
    if not root.is_dir():
        raise ConfigError(f"config root {root} is not a folder")
    if config_file(root) is not None:
        return {root.name: root}
    folders = {p.name: p for p in sorted(root.iterdir()) if p.is_dir() and config_file(p) is not None}
    if not folders:
        raise ConfigError(f"{root} holds no config folder (a folder with a config.yml)")
    return folders


#: top-level keys of a NeMo config.yml: a file holding one is read as NeMo's, not as the bare tree
_NEMO_KEYS = frozenset({"custom_data", "models", "colang_version", "rails", "instructions", "prompts", "sample_conversation"})


def nemo_block(custom_data: Any, where: str | Path, environ: Mapping[str, str] = os.environ) -> AgentBreakerConfig:
    """The config in a NeMo config's `custom_data: agent_breaker:` (the defaults when absent)."""
    if custom_data is not None and not isinstance(custom_data, Mapping):
        raise ConfigError(f"{where}: custom_data must be a mapping, but was {type(custom_data).__name__}")
    return parse_config((custom_data or {}).get("agent_breaker"), environ)


def load_config(path: str | Path, environ: Mapping[str, str] = os.environ) -> AgentBreakerConfig:
    """Load a YAML file: either the bare config tree, or a NeMo config.yml whose
    `custom_data: agent_breaker:` holds it; or a NeMo config folder (its config.yml, read as
    NeMo's: no `agent_breaker` block means the defaults)."""
    path = Path(path)
    folder = path.is_dir()
    if folder:
        found = config_file(path)
        if found is None:
            raise ConfigError(f"config folder {path} holds no config.yml")
        path = found
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"cannot read config {path}: {getattr(exc, 'strerror', None) or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {path} is not valid YAML: {exc}") from None
    if folder or (isinstance(data, Mapping) and not _NEMO_KEYS.isdisjoint(data)):
        if data is not None and not isinstance(data, Mapping):
            raise ConfigError(f"config {path} must be a mapping, but was {type(data).__name__}")
        return nemo_block((data or {}).get("custom_data"), path, environ)
    return parse_config(data, environ)
