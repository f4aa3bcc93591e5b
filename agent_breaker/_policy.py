"""Policy resolution: the config in force for one tenant / feature / agent, and what is derived
from it once (canonicalizers, the claim checker, the ordered tables of enabled checks)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from . import _schemas as schemas
from . import heuristics as H
from ._canonical import Canonicalizer, Fingerprinter, normalize_key
from ._churn import ChurnMask, is_timing_key
from ._claims import ClaimChecker
from ._state import CallFacts, SessionState
from ._text import caseless_matcher
from ._work import Commands
from .config import DEFAULT_AUTO_REPLY_PATTERNS, AgentBreakerConfig, Mode
from .detectors import failures, loops
from .governor import budget
from .verdicts import Trip

RESULT_MAX_BYTES = 16 * 1024 * 1024
RESULT_MAX_DEPTH = 64
MAX_CACHED = 10_000  # policies, and per-tool answers within one
_NAME_TOKENS = re.compile(r"[a-z]+")
_WORDS = re.compile(r"\w+")
_SCANNED_TURN_CHARS = 4096
CONFIRMATION = "\x00confirmation"  # the key of every confirmation, however worded


def plain_words(text: str) -> str:
    """A turn's words, lower-cased, without punctuation or extra spacing ("Continue!" -> "continue")."""
    return " ".join(_WORDS.findall(text[:_SCANNED_TURN_CHARS].lower()))


def auto_reply_matcher(patterns: tuple[str, ...]) -> Callable[[str], bool] | None:
    """Whether a text matches any of the patterns, case-insensitively; None for no pattern."""
    if not patterns:
        return None
    alternation = "|".join(f"(?:{p})" for p in patterns)
    if patterns == DEFAULT_AUTO_REPLY_PATTERNS:
        # the shipped patterns hold no upper-case letter literal (a user's may: (?-i:...), \W)
        return caseless_matcher(alternation)
    any_case = re.compile(alternation, re.IGNORECASE)
    return lambda text: any_case.search(text) is not None


@dataclass(slots=True)
class CheckContext:
    """What the checks of one decision read (built once per decision)."""

    s: SessionState
    f: CallFacts | None
    cfg: AgentBreakerConfig
    now: float
    polling: bool
    similar: loops.Similarity


Check = Callable[[CheckContext], "Trip | None"]
EnabledCheck = tuple[str, Mode, Check]


def _facts(c: CheckContext) -> CallFacts:
    assert c.f is not None  # call checks run on tool calls only
    return c.f


#: spend ceilings, checked on every step (tool calls and assistant turns), in this order
SESSION_LIMITS: tuple[tuple[str, Check], ...] = (
    (H.STEP_LIMIT, lambda c: budget.check_step_limit(c.s, c.cfg)),
    (H.TOKEN_BUDGET, lambda c: budget.check_token_budget(c.s, c.cfg)),
    (H.COST_BUDGET, lambda c: budget.check_cost_budget(c.s, c.cfg)),
    (H.TOKEN_VELOCITY, lambda c: budget.check_velocity(c.s, c.cfg, c.now)),
)
#: the checks of a tool call, in this order; the breaker comes after them
CALL_CHECKS: tuple[tuple[str, Check], ...] = SESSION_LIMITS + (
    (H.DEPTH_LIMIT, lambda c: budget.check_depth_limit(_facts(c).depth, c.cfg)),
    (H.BUDGET_SOFT_LIMIT, lambda c: budget.check_soft_limit(c.s, c.cfg, _facts(c).tool, _facts(c).mutating)),
    (H.TOOL_TOKEN_BUDGET, lambda c: budget.check_tool_token_budget(c.s, c.cfg, _facts(c).tool)),
    (H.DUPLICATE_MUTATION, lambda c: loops.check_duplicate_mutation(c.s, _facts(c), c.cfg, c.now)),
    (H.EARLY_RETRY, lambda c: loops.check_early_retry(c.s, _facts(c), c.now)),
    (H.IDENTICAL_FAILURE, lambda c: failures.check(c.s, _facts(c), c.cfg)),
    (H.IDENTICAL_CALL, lambda c: loops.check_identical_call(c.s, _facts(c), c.cfg, c.now, c.polling)),
    (H.STUCK_POLLING, lambda c: loops.check_stuck_polling(c.s, _facts(c), c.cfg, c.now, c.polling)),
    (H.NEAR_DUPLICATE, lambda c: loops.check_near_duplicate(c.s, _facts(c), c.cfg, c.similar, c.polling)),
    (H.OSCILLATION, lambda c: loops.check_oscillation(c.s, _facts(c), c.cfg)),
    (H.SAME_ANSWER, lambda c: loops.check_same_answer(c.s, _facts(c), c.cfg, c.polling)),
)


def enabled(cfg: AgentBreakerConfig, checks: tuple[tuple[str, Check], ...]) -> tuple[EnabledCheck, ...]:
    """The checks a config has on, each with its mode (worked out once per config)."""
    return tuple((name, cfg.mode_of(name), check) for name, check in checks if cfg.mode_of(name) != "off")


def graded(cfg: AgentBreakerConfig, s: SessionState | None, trip: Trip, *, call: bool = False) -> Trip | None:
    """The trip as an advisory (the call runs, the agent is warned) while its heuristic has
    warnings left in this pattern of the session (`warn_first`; the count starts over with
    progress), that warning spent; None once they are: the trip counts in full. A warning is
    spent whatever else the decision finds (a refusal by another check stopped the agent too).
    A tool `call` judged after a warning the agent cannot have read yet (no call made since it
    has answered: the parallel calls of the turn it was warned in) is warned again, nothing
    spent: only a result after the warning that shows no progress is evidence to cut."""
    n = cfg.warn_first.get(trip.heuristic, 0)
    if not n or s is None or trip.certain:
        return None
    key = trip.heuristic if trip.pattern is None else f"{trip.heuristic}:{trip.pattern}"
    spent, at = s.loops.warned.get(key, (0, -1))
    if spent and call and s.loops.answered < at:
        return replace(trip, advisory=True)
    if spent >= n:
        return None
    s.loops.warned[key] = (spent + 1, s.loops.history_base + len(s.loops.history) if call else -1)
    return replace(trip, advisory=True)


def _warning(warn: Trip | None, trip: Trip) -> Trip:
    """The warning a verdict shows: the first, but a reported trip (one that enforce mode would
    cut) before an advisory."""
    return trip if warn is None or (warn.advisory and not trip.advisory) else warn


def _decide(
    cfg: AgentBreakerConfig, s: SessionState | None, found: Iterable[tuple[Mode, Trip | None]], call: bool
) -> tuple[Trip | None, Trip | None]:
    """(the first blocking trip, the warning to show) of trips found in order, each with its
    heuristic's mode; graded against session `s`. Stops at the first block."""
    warn = None
    for mode, trip in found:
        if trip is None or mode == "off":
            continue
        advisory = graded(cfg, s, trip, call=call)
        if advisory is None and mode == "enforce":
            return trip, warn
        warn = _warning(warn, advisory or trip)
    return None, warn


def run_checks(checks: tuple[EnabledCheck, ...], ctx: CheckContext) -> tuple[Trip | None, Trip | None]:
    """Run (name, mode, check) in order, lazily: (first blocking trip, the warning to show)."""
    return _decide(ctx.cfg, ctx.s, ((mode, check(ctx)) for _name, mode, check in checks), ctx.f is not None)


def judge(
    cfg: AgentBreakerConfig, trips: list[Trip | None], s: SessionState | None = None, *, call: bool = False
) -> tuple[Trip | None, Trip | None]:
    """The same for trips found outside the check tables, by their heuristics' modes (graded
    against session `s`, when given, for a tool `call` or not)."""
    return _decide(cfg, s, ((cfg.mode_of(t.heuristic), t) if t is not None else ("off", None) for t in trips), call)


@dataclass(frozen=True, slots=True)
class Policy:
    """A resolved config plus what is derived from it once."""

    cfg: AgentBreakerConfig
    canon: Canonicalizer
    result_canon: Canonicalizer
    churn: ChurnMask
    in_progress: frozenset[str]
    claims: ClaimChecker
    commands: Commands  # done_claim: what a call runs and edits
    named: Callable[[str], int]  # done_claim: the keyed hash of a file or command head it keeps
    nudge_words: frozenset[str]
    confirmation_words: frozenset[str]
    auto_reply: Callable[[str], bool] | None  # is a user turn an auto-reply
    idempotency_fields: frozenset[str]
    call_checks: tuple[EnabledCheck, ...]
    session_limits: tuple[EnabledCheck, ...]
    #: near_duplicate and identical_failure read the call fingerprints: taken where some policy of
    #: the config runs either
    fingerprint_calls: bool
    _mutating: dict[str, bool]
    _polling: dict[str, bool]
    _checks: dict[tuple[str, bool], schemas.Check | None]  # (tool, of the result): only tools under `tools:`

    @classmethod
    def build(cls, cfg: AgentBreakerConfig, fingerprints: Fingerprinter, *, fingerprint_calls: bool) -> Policy:
        return cls(
            cfg,
            Canonicalizer(cfg.volatile_fields, max_bytes=cfg.max_args_bytes, fold=True),
            Canonicalizer(cfg.volatile_fields, max_bytes=RESULT_MAX_BYTES, max_depth=RESULT_MAX_DEPTH),
            ChurnMask(cfg.progress.result_churn_patterns, builtin=cfg.progress.builtin_churn_patterns),
            frozenset(cfg.stuck_polling.in_progress_values),
            ClaimChecker(cfg, fingerprints),
            Commands(cfg.done_claim.commands),
            functools.partial(fingerprints.labeled, "done"),
            frozenset(w.lower() for w in cfg.user_turns.nudge_words),
            frozenset(w.lower() for w in cfg.user_turns.confirmation_words),
            auto_reply_matcher(cfg.user_turns.auto_reply_patterns),
            frozenset(normalize_key(k) for k in cfg.duplicate_mutation.idempotency_fields),
            enabled(cfg, CALL_CHECKS),
            enabled(cfg, SESSION_LIMITS),
            fingerprint_calls,
            {},
            {},
            {},
        )

    def user_turn(self, text: str) -> str | None:
        """What a user turn says, as the key it is remembered by (a repeat of it adds nothing):
        its words, or CONFIRMATION for any wording of a confirmation; None for a turn that
        carries nothing (a bare nudge, an auto-reply)."""
        words = plain_words(text)
        vocabulary = set(words.split())
        if vocabulary <= self.nudge_words:
            return None
        if self.auto_reply is not None and self.auto_reply(text[:_SCANNED_TURN_CHARS]):
            return None
        return CONFIRMATION if vocabulary <= self.confirmation_words else words

    def quiet_key(self, key: str) -> bool:
        """A result key whose value says nothing of the answer: a volatile one (a timestamp, a
        request id) or a timing (took_ms, attempt)."""
        return self.result_canon.is_volatile(key) or is_timing_key(key)

    def mode(self, heuristic: str) -> Mode:
        return self.cfg.mode_of(heuristic)

    def schema_problem(self, tool: str, value: Any, *, result: bool = False) -> str | None:
        """What is wrong with a call's arguments (or its result) by the tool's schema or model;
        None when it meets them, or the tool has none."""
        policy = self.cfg.tools.get(tool)
        if policy is None or self.mode(H.SCHEMA_VIOLATION) == "off":
            return None
        key = (tool, result)
        if key not in self._checks:
            self._checks[key] = policy.result_check() if result else policy.args_check()
        check = self._checks[key]
        return None if check is None else check(value)

    def polling(self, tool: str) -> bool:
        """Marked `polling` under tools:, or named like a status tool (stuck_polling.polling_tools)."""
        v = self._polling.get(tool)
        if v is None:
            if len(self._polling) > MAX_CACHED:
                self._polling.clear()
            v = self._polling[tool] = self.cfg.tool(tool).polling or self.cfg.stuck_polling.is_polling_tool(tool)
        return v

    def dependency(self, tool: str, args: Any) -> str | None:
        """What a call depends on, when its breaker is that dependency's (`tool@dependency`):
        the host of a URL argument (breaker.dependency_args), or the value of the tool's
        `dependency_arg`. None: the tool's own breaker."""
        if not isinstance(args, dict):
            return None
        named = self.cfg.tool(tool).dependency_arg
        for name in (named,) if named is not None else self.cfg.breaker.dependency_args:
            value = args.get(name)
            if isinstance(value, str) and value:
                host = _host_of(value)
                if host is not None:
                    return host
                if named is not None:
                    return value[:MAX_DEPENDENCY_CHARS].strip().lower() or None
            elif named is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
                return str(value)
        return None

    def mutating(self, tool: str) -> bool:
        """Configured as mutating, or named after an action (wire_transfer, send_email)."""
        v = self._mutating.get(tool)
        if v is None:
            if len(self._mutating) > MAX_CACHED:
                self._mutating.clear()
            policy = self.cfg.tools.get(tool)
            if policy is not None and policy.mutating:
                v = True
            else:
                r = self.cfg.receipts
                tokens = set(_NAME_TOKENS.findall(tool.lower()))
                acts = bool(tokens & self.claims.action_stems) or not tokens.isdisjoint(r.action_stems)
                v = r.infer_mutating and acts and tokens.isdisjoint(r.read_stems)
            self._mutating[tool] = v
        return v


class Policies:
    """The policy of each (tenant, feature, agent), resolved on first use (overrides applied;
    in observe mode, every enforcing heuristic reports instead)."""

    def __init__(self, config: AgentBreakerConfig, fingerprints: Fingerprinter, *, observe: bool) -> None:
        self.config = config
        self.fingerprints = fingerprints
        self.observe = observe
        self._cache: dict[tuple[Any, ...], Policy] = {}

    def get(self, tenant: str | None, feature: str | None, agent: str | None) -> Policy:
        # keyed by the overrides that apply, not by the names: a caller who makes up tenants,
        # features or agents gets the policies that exist, not a new one each
        overrides = self.config.overrides  # most configs have none: no generator to run then
        k = tuple(i for i, o in enumerate(overrides) if o.matches(tenant, feature, agent)) if overrides else ()
        p = self._cache.get(k)
        if p is None:
            cfg = self.config.resolve_overrides([self.config.overrides[i] for i in k])
            if self.observe:
                cfg = observe_only(cfg)
            if len(self._cache) > MAX_CACHED:
                self._cache.clear()
            # whole-config, not this policy's: a session's events may come under several
            # policies, and what one writes into the session another reads
            # near_duplicate and identical_failure (arguments that read alike) read them
            fingerprinted = self.runs(H.NEAR_DUPLICATE) or self.runs(H.IDENTICAL_FAILURE)
            p = self._cache[k] = Policy.build(cfg, self.fingerprints, fingerprint_calls=fingerprinted)
        return p

    def runs(self, heuristic: str) -> bool:
        """May some policy of this config run `heuristic`: the base config does, or an override
        sets modes (overrides combine, so each is not judged alone)."""
        if any("mode" in o.settings or "modes" in o.settings for o in self.config.overrides):
            return True
        return self.config.mode_of(heuristic) != "off"


def observe_only(cfg: AgentBreakerConfig) -> AgentBreakerConfig:
    """The same config with every enforcing heuristic reporting instead."""
    if cfg.mode == "off":
        return cfg
    modes = {h: ("off" if cfg.mode_of(h) == "off" else "observe") for h in H.CONFIGURABLE}
    return cfg.model_copy(update={"mode": "observe", "modes": modes})


#: a dependency named by a value longer than this is known by its first characters
MAX_DEPENDENCY_CHARS = 253


def _host_of(value: str) -> str | None:
    """The host (and port) of a URL, lower-cased; None if `value` is no URL with a host."""
    if "://" not in value[:16]:
        return None
    try:
        parts = urlsplit(value.strip())
        host = parts.hostname
        port = parts.port
    except ValueError:
        return None
    if not host:
        return None
    host = host[:MAX_DEPENDENCY_CHARS]
    return host if port is None else f"{host}:{port}"
