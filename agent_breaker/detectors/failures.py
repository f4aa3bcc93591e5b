"""identical_failure: a call that keeps failing the same way.

Progress belongs to the pattern. A failing call is followed on its own: the distinct call (tool
and canonical arguments) and its failure, noise masked (`_churn`: a shell's line numbers,
process ids, temp names, timings, ids made up for the run), whatever other calls return in
between: a read that tells something new elsewhere (a clock, random bytes, a listing that grows)
says nothing about this call. Its streak ends when the call succeeds, when it fails otherwise
beyond that noise (its error reads differently, or it counts differently: 5 failed, then 4), when
the agent changes the world it runs in (a write or an action that did something new: an edit
between two runs of failing tests is work), or at a user turn. A warning given on a streak is
given back only when that streak ends.

One tool failing the same way under arguments that change (a salt, a fresh element ref, a new
edit the linter rejects) is followed too, per tool: a call that shares an argument value with
every call of the streak, or reads like the last one (ids and numbers aside), and fails with an
error that reads the same (its own echoed words aside) is one more retry.
"""

from __future__ import annotations

from .. import heuristics as H
from .._state import (
    FAILED,
    MAX_FAILING,
    MAX_RETRIED_KEYS,
    MAX_RETRIED_TOOLS,
    MAX_VALUES,
    CallFacts,
    Failing,
    Retried,
    SessionState,
    put_bounded,
)
from ..config import AgentBreakerConfig
from ..verdicts import Trip
from .base import similarity

#: two failures of one tool whose errors' words are this similar (ids and numbers aside) failed
#: the same way (a retry under other arguments)
SAME_ERROR = 0.8
#: two failures of one call whose words are this similar failed the same way: one word in ten
#: (a word the command made up); two lint runs that list other files read 0.58 to 0.89 alike
SAME_WORDS = 0.9


def failure_limit(cfg: AgentBreakerConfig, limit: int, transient: bool) -> int:
    """Transient errors (timeouts, 429, 503) are expected to clear: they get more retries."""
    return max(limit, cfg.identical_failure.max_transient_failures) if transient else limit


def check(s: SessionState, f: CallFacts, cfg: AgentBreakerConfig) -> Trip | None:
    """Refuse a call that failed the same way `max_failures` times (its own streak), or a
    retry of a tool that did under other arguments."""
    c = cfg.identical_failure
    streak = s.failures.calls.get(f.key)
    if streak is not None:
        limit = failure_limit(cfg, c.max_failures, streak.transient)
        if streak.run >= limit:
            return Trip(
                H.IDENTICAL_FAILURE,
                "session",
                f"{f.tool} failed {streak.run} times with the same arguments and the same error",
                "Stop retrying this call: it fails the same way every time. Report the error or try a different approach.",
                {"failures": streak.run, "max_failures": limit},
                pattern=call_pattern(f.key),
            )
    retried = s.failures.tools.get(f.tool)
    # a streak of one call repeated is that call's (above): a call changed after it may be the
    # way out; and a call that takes up a value its errors named (the amount the error asked
    # for) acts on what it was told, whatever it shares with the streak
    if (
        retried is not None
        and retried.run >= c.max_failures
        and len(retried.keys) > 1
        and is_retry(retried, f, cfg)
        and not acts_on_error(retried, f)
    ):
        return Trip(
            H.IDENTICAL_FAILURE,
            "session",
            f"{f.tool} failed {retried.run} times with the same error under {len(retried.keys)} sets of arguments",
            "Stop: changing the arguments does not change the error. Fix its cause, or report it.",
            {"failures": retried.run, "max_failures": c.max_failures, "same_error": 1, "variants": len(retried.keys)},
            pattern=tool_pattern(f.tool),
        )
    return None


def call_pattern(key: int) -> str:
    return f"call {key:x}"


def tool_pattern(tool: str) -> str:
    return f"tool {tool}"


def is_retry(r: Retried, f: CallFacts, cfg: AgentBreakerConfig) -> bool:
    """Is this call a retry of the tool's failing streak: it shares an argument value with every
    call of it, or its arguments read like the last one's (ids and numbers aside)."""
    if not set(r.common).isdisjoint(f.values):
        return True
    if r.shape is None or f.fp_shape is None:
        return False
    return similarity(f.fp_shape, r.shape) >= cfg.identical_failure.args_similarity


def acts_on_error(r: Retried, f: CallFacts) -> bool:
    """Does the call hold a value the streak's last error named and none of its calls held."""
    told = set(r.told).difference(r.tried)
    return not told.isdisjoint(f.values)


def _unechoed(error: tuple[int, ...], call: tuple[int, ...] | None) -> tuple[int, ...]:
    """A failure's words without the call's own: an error that echoes a salt reads the same."""
    if not call:
        return error
    own = set(call)
    return tuple(w for w in error if w not in own)


def same_failure(streak: Failing, out: int, words: tuple[int, ...] | None, counts: int, acts: int) -> bool:
    """Did the call fail as it did before: the same failure once noise is masked, or one that
    counts the same and reads alike (SAME_WORDS: a word the command made up in a long message),
    or, when no call succeeded since (nothing the agent did can have changed the world), any
    failure that counts the same: a command printing a new random word each time."""
    if out == streak.out:
        return True
    if out == FAILED or streak.out == FAILED or counts != streak.counts:
        return False  # a dependency's failures are all one; other counts are news
    if acts == streak.acts:
        return True
    return words is not None and streak.words is not None and similarity(words, streak.words) >= SAME_WORDS


def record(
    s: SessionState,
    f: CallFacts,
    cfg: AgentBreakerConfig,
    *,
    failed: bool,
    transient: bool,
    out: int,
    words: tuple[int, ...] | None,
    shape: tuple[int, ...] | None,
    told: tuple[int, ...],
    counts: int,
) -> bool:
    """Follow one result of call `f`; True when it failed otherwise than the call last did
    (news: only the world changes a call's error, its arguments being the same)."""
    fs = s.failures
    streak = fs.calls.get(f.key)
    if not failed:
        fs.acts += 1
        if streak is not None:
            del fs.calls[f.key]
            s.loops.warned.pop(f"{H.IDENTICAL_FAILURE}:{call_pattern(f.key)}", None)
        if fs.tools.pop(f.tool, None) is not None:
            s.loops.warned.pop(f"{H.IDENTICAL_FAILURE}:{tool_pattern(f.tool)}", None)
        return False
    same = streak is not None and same_failure(streak, out, words, counts, fs.acts)
    changed = streak is not None and not same and not transient
    if streak is not None and not same:
        s.loops.warned.pop(f"{H.IDENTICAL_FAILURE}:{call_pattern(f.key)}", None)
    fs.calls.pop(f.key, None)  # the newest last: the oldest streak goes first at the cap
    run = streak.run + 1 if same and streak is not None else 1
    put_bounded(fs.calls, f.key, Failing(run, out, words, counts, transient, fs.acts), MAX_FAILING)
    if not transient and shape is not None:
        _record_retry(s, f, cfg, shape, told, changed)
    return changed


def _record_retry(
    s: SessionState, f: CallFacts, cfg: AgentBreakerConfig, shape: tuple[int, ...], told: tuple[int, ...], changed: bool
) -> None:
    """The tool's streak of retries under other arguments: one more when the call is a retry of
    it and fails with an error that reads the same; else it starts over with this call."""
    fs = s.failures
    error = _unechoed(shape, f.fp_shape)
    r = fs.tools.get(f.tool)
    same = r is not None and not changed and similarity(error, r.error) >= SAME_ERROR and is_retry(r, f, cfg)
    if r is not None and same:
        common = set(r.common).intersection(f.values)
        r.run += 1
        r.error, r.shape, r.told = error, f.fp_shape, list(told)
        r.common = sorted(common) if common else list(f.values)
        if f.key not in r.keys and len(r.keys) < MAX_RETRIED_KEYS:
            r.keys.append(f.key)
        r.tried = sorted(set(r.tried).union(f.values))[:MAX_VALUES]
        return
    if r is not None:
        s.loops.warned.pop(f"{H.IDENTICAL_FAILURE}:{tool_pattern(f.tool)}", None)
    retried = Retried(1, error, list(f.values), f.fp_shape, [f.key], list(f.values), list(told))
    put_bounded(fs.tools, f.tool, retried, MAX_RETRIED_TOOLS)


def world_changed(s: SessionState) -> None:
    """A write or an action did something new: every failing streak starts over (what failed
    may not fail now), and its warning is given back."""
    fs = s.failures
    if not fs.calls and not fs.tools:
        return
    fs.calls.clear()
    fs.tools.clear()
    s.loops.warned = {k: n for k, n in s.loops.warned.items() if not k.startswith(f"{H.IDENTICAL_FAILURE}:")}


def check_family(parent: SessionState | None, f: CallFacts, cfg: AgentBreakerConfig) -> Trip | None:
    """A sub-agent's call against its family's streaks (its parent session's, which every session
    of the family records its failures into): refused at once once the family has failed past
    the point where the call's own session would have been warned, whichever session retries."""
    if parent is None:
        return None
    c = cfg.identical_failure
    streak = parent.failures.calls.get(f.key)
    if streak is None:
        return None
    limit = failure_limit(cfg, c.max_failures, streak.transient) + cfg.warn_first.get(H.IDENTICAL_FAILURE, 0)
    if streak.run < limit:
        return None
    return Trip(
        H.IDENTICAL_FAILURE,
        "session",
        f"{f.tool} failed {streak.run} times with the same arguments and the same error in this agent's family",
        "Stop retrying this call: it fails the same way in every agent that tries it. Report the error or try a "
        "different approach.",
        {"failures": streak.run, "max_failures": limit, "family": 1},
        certain=True,
        pattern=call_pattern(f.key),
    )
