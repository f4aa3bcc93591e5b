"""Per-session state: plain, bounded, and free of payload text.

What the engine keeps about a run is hashes (of canonical calls and results), token-hash
fingerprints for fuzzy comparison, counters and numbers. Every collection is capped, so a
session that runs for days stays small.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass, field, replace
from typing import Any

from ._ledger import Ledger
from ._windows import BucketWindow
from ._work import Work
from .breaker import BreakerState

# caps on per-session collections: together they bound a session's stored size (the codec's
# test builds the largest session these allow; see README "Sessions and what is kept")
#: bytes of a session's parts in memory, roughly (weight()): an int kept in a tuple or list, a
#: dict entry with its int key, a hash in a reference pool (two arrays), and the fixed part of
#: each record
_INT, _ENTRY, _POOLED, _POOL = 36, 70, 18, 250
_BASE, _PENDING, _KEY, _CHAIN, _ANSWER, _ROW, _DONE, _TURN = 2_400, 700, 330, 420, 200, 150, 200, 160
_BREAKER, _BUCKET, _RECEIPT, _FAILING = 900, 120, 1_200, 250

MAX_KEYS = 256
MAX_FAILING = 32  # identical_failure: failing calls followed (only failures enter: reads cannot push one out)
MAX_RETRIED_KEYS = 8  # ... and the distinct calls of a tool's streak kept
MAX_RETRIED_TOOLS = 8  # tools failing the same way under other arguments followed at once
MAX_PENDING = 64  # calls in flight; past it a new call is refused (invalid_event), lost ones aside
MAX_TURNS = 16
MAX_SEEN = 1024  # (call, result) and (tool, answer) pairs: what is news
MAX_TOOLS = 256  # per-tool counters a session keeps (spend, session-scoped breakers)
MAX_CHAINS = 32  # near-duplicate chains, one per recently used tool (each holds fingerprints)
MAX_ANSWER_KEYS = 64  # same_answer: the distinct calls of one streak kept
MAX_SAID = 64  # user turns remembered (hashes), to tell a repeated answer from new information
MAX_VALUES = 64  # argument values of a call kept (hashes): to tell an echo, and what stays while salts churn
MAX_TOPIC = 16  # the words of a call's argument values kept (same_answer: what it asks about)
MAX_TOPIC_WORDS = 16  # ... and of its arguments' words, to compare two calls (same_answer) ...
MAX_ASKED = 4  # ... of the newest calls of a same_answer streak
MAX_CHURN_CHAINS = 4  # session_churn: chains of one tool view, one per outcome
MAX_CHURN_MEMBERS = 32  # ... and the sessions each one follows
MAX_TENANT_EFFECTS = 256  # duplicate_mutation: a tenant's effects in flight, and done, kept each

FAILED = -1  # result hash of a failed execution: any two failures compare equal
#: a session stored before openings: the one tool its calls were all of, or this once several
_MIXED = -1


def put_bounded(d: dict[Any, Any], key: Any, value: Any, cap: int) -> None:
    """Insert into a dict that keeps at most `cap` keys (the oldest inserted go first)."""
    if key not in d:
        while len(d) >= cap:
            del d[next(iter(d))]
    d[key] = value


@dataclass(slots=True)  # not frozen: built on every call, and frozen init is slower
class CallFacts:
    """What one tool call is, reduced to hashes and numbers (computed once per call)."""

    tool: str
    key: int  # hash of tool + canonical args
    # None, both, when near_duplicate and identical_failure (their readers) are off: not fingerprinted
    fp_text: tuple[int, ...] | None  # token hashes of the canonical args
    fp_shape: tuple[int, ...] | None  # the same with digit runs folded (ids, numbers)
    fp_thought: tuple[int, ...] | None
    tokens: int
    cost_usd: float
    depth: int
    mutating: bool
    # duplicate_mutation: what the call does, for a mutating, non-idempotent tool (_effects: its
    # arguments in one spelling, made-up keys and free text aside); None for every other call
    effect: int | None = None
    # carries content (a file body, a message text): its answer is an acknowledgement
    writes: bool = False
    # keyed 32-bit hashes of its argument values (at most MAX_VALUES, the smallest): a result
    # field that gives one back is an echo, and failing calls that share one are one call retried
    values: tuple[int, ...] = ()
    # the model step that asked for it (keyed hash), for a mutating call: None when not told
    turn: int | None = None
    # the lengths of its argument values: only a result value as long may be an echo of one
    sizes: frozenset[int] = frozenset()
    # duplicate_mutation: the free text of a mutating call (its memo's words; a hash, 0 for none),
    # and whether its effect names an amount (done twice, it moves twice as much)
    effect_text: int = 0
    moves_amount: bool = False
    # same_answer: what it asks about, its argument values' words (their first letters, digits
    # folded: keyed 32-bit hashes, at most MAX_TOPIC): calls that share none ask about other things
    topic: tuple[int, ...] = ()


@dataclass(slots=True)
class KeyStat:
    """One distinct call (tool + canonical args) and what its runs returned."""

    runs: int = 0  # runs in the current streak without progress
    last_result: int | None = None
    last_ts: float = 0.0
    polling: bool = False
    poll_ts: list[float] = field(default_factory=list)  # unchanged polls in the window
    transient: bool = False  # the streak's last failure looked transient (timeout, 429, 503)
    epoch: int = 0  # the session's progress epoch at the last run
    since: float = 0.0  # when the current streak began (stuck_polling's wall-time budget)
    silent: bool = False  # the last result was blank (a command that prints nothing)


@dataclass(slots=True)
class Chain:
    """The latest streak of similar calls to one tool with no progress (near_duplicate)."""

    fp_text: tuple[int, ...]
    fp_shape: tuple[int, ...]
    fp_thought: tuple[int, ...] | None
    length: int
    last_result: int
    failed: bool
    transient: bool = False
    epoch: int = 0
    last_ts: float = 0.0
    last_key: int = 0  # the last call of the chain ...
    variant: bool = False  # ... and whether the chain holds calls of other wording (other keys)


@dataclass(slots=True)
class Answer:
    """same_answer: the latest streak of one tool's calls with different arguments and one result."""

    result: int
    keys: list[int]  # the distinct calls of the streak
    epoch: int  # the session's progress epoch after the streak's last call
    topic: list[int] = field(default_factory=list)  # what its calls asked about (CallFacts.topic, at most MAX_VALUES)
    nothing: bool = False  # the answer is that nothing was found (an empty list, "no results")
    # the argument words of its latest calls (each sorted, at most MAX_TOPIC_WORDS; the newest
    # MAX_ASKED calls): a call that reads like one of them asks it again
    asked: list[tuple[int, ...]] = field(default_factory=list)

    def to_wire(self) -> list[Any]:
        return [self.result, self.keys, self.epoch, self.topic, self.nothing, [_fp(w) for w in self.asked]]

    @classmethod
    def from_wire(cls, d: list[Any]) -> Answer:
        if len(d) < 6:  # stored before a streak kept what it asked about
            return cls(d[0], list(d[1]), d[2])
        return cls(d[0], list(d[1]), d[2], list(d[3]), d[4], [_unfp(w) for w in d[5]])


@dataclass(slots=True)
class Pending:
    """A call let through, waiting for its result."""

    facts: CallFacts
    call_id: str
    breaker_key: str
    probe: int | None  # the breaker probe id, when admitted as a half-open probe
    similar_text: bool  # similar to its tool's chain, as text
    similar_shape: bool  # similar to its tool's chain, ids and numbers aside
    history_index: int
    ts: float = 0.0  # when it was let through (a call in flight for long is taken as lost)
    own_probe: int | None = None  # the probe id of the session's own breaker, when half-open
    warning: dict[str, Any] | None = None  # the observation of the warning it was let through with


@dataclass(slots=True)
class ChurnChain:
    """session_churn: calls of one tool from sessions that made no other, with one outcome and
    some argument values in common, and how many calls each session made."""

    outcome: int  # the result hash, or the failure's error hash
    common: list[int]  # the argument values every call of the chain held (keyed hashes)
    calls: int
    members: dict[int, int]  # session (keyed hash) -> its calls in the chain
    last_ts: float
    failed: bool = False  # the outcome is a failure (the call's own)

    def to_wire(self) -> list[Any]:
        return [self.outcome, self.common, self.calls, [[m, n] for m, n in self.members.items()], self.last_ts, self.failed]

    @classmethod
    def from_wire(cls, d: list[Any]) -> ChurnChain:
        return cls(d[0], list(d[1]), d[2], {m: n for m, n in d[3]}, d[4], d[5])


@dataclass(slots=True)
class ChurnView:
    """A tool view (session_churn), one per tenant and tool: the chains of calls from sessions
    that made only calls of this tool, the most recent last."""

    chains: list[ChurnChain] = field(default_factory=list)

    def to_wire(self) -> list[Any]:
        return [c.to_wire() for c in self.chains]

    @classmethod
    def from_wire(cls, d: list[Any]) -> ChurnView:
        # a view stored per agent, before tool views, holds one flat chain of another shape: dropped
        if d and not isinstance(d[0], list):
            return cls()
        return cls([ChurnChain.from_wire(c) for c in d])


@dataclass(slots=True)
class Effects:
    """duplicate_mutation across a tenant's sessions (a pseudo-session of the tenant's own):
    the effects of mutating calls in flight and done, each with the session that asked for it
    (keyed hash), when, and its free text (a hash); the newest kept."""

    inflight: dict[int, tuple[int, float, int]] = field(default_factory=dict)
    done: dict[int, tuple[int, float, int]] = field(default_factory=dict)

    def to_wire(self) -> list[Any]:
        return [[[k, *v] for k, v in self.inflight.items()], [[k, *v] for k, v in self.done.items()]]

    @classmethod
    def from_wire(cls, d: list[Any]) -> Effects:
        return cls({k: (m, t, x) for k, m, t, x in d[0]}, {k: (m, t, x) for k, m, t, x in d[1]})


@dataclass(slots=True)
class Spend:
    """The budget governor's slice: what the session has spent."""

    steps: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    tool_tokens: dict[str, int] = field(default_factory=dict)
    velocity: BucketWindow | None = None

    def to_wire(self) -> list[Any]:
        return [
            self.steps,
            self.tokens,
            self.cost_usd,
            self.tool_tokens,
            None if self.velocity is None else self.velocity.to_wire(),
        ]

    @classmethod
    def from_wire(cls, d: list[Any]) -> Spend:
        return cls(d[0], d[1], d[2], dict(d[3]), None if d[4] is None else BucketWindow.from_wire(d[4]))


@dataclass(slots=True)
class Loops:
    """The loop detectors' slice: the calls in flight, and the streaks of the trajectory."""

    pending: dict[str, Pending] = field(default_factory=dict)
    auto_ids: int = 0
    keys: dict[int, KeyStat] = field(default_factory=dict)
    epoch: int = 0  # counts results that were progress
    chains: dict[str, Chain] = field(default_factory=dict)
    history: list[list[Any]] = field(default_factory=list)  # [key, result hash or None]
    history_base: int = 0  # absolute index of history[0]
    seen: dict[int, None] = field(default_factory=dict)  # (call, result) pairs seen: progress test
    # session_churn: the tools (keyed hashes) of the calls of the session's opening, its first
    # `session_churn.opening_calls` calls (None: past it, the session left the tool views)
    opening: list[int] | None = field(default_factory=list)
    answers: dict[str, Answer] = field(default_factory=dict)  # same_answer, per tool
    # duplicate_mutation: effect -> when it succeeded, in which model step (keyed hash, or None),
    # what it did (its result, ids, timings and numbers aside: a keyed hash, or None), and its
    # free text (a keyed hash, 0 for none)
    done: dict[int, tuple[float, int | None, int | None, int]] = field(default_factory=dict)
    said: dict[int, None] = field(default_factory=dict)  # hashes of the user turns so far
    wait: dict[str, float] = field(default_factory=dict)  # early_retry: tool -> no call before (Retry-After)
    # graduated heuristics: warnings given (warn_first), per heuristic since the last progress,
    # or per heuristic and pattern (`heuristic:pattern`) since that pattern's last progress, each
    # with the history index of the call last warned (-1: not a call)
    warned: dict[str, tuple[int, int]] = field(default_factory=dict)
    # the highest history index whose call's result came back: a warning counts as read once a
    # call made at or after it has answered
    answered: int = -1
    # the user stopped a call, and has not spoken since: their next turn is new information
    interrupted: bool = False

    def to_wire(self) -> dict[str, Any]:
        return {
            "pending": {
                cid: [
                    _facts(p.facts),
                    p.call_id,
                    p.breaker_key,
                    p.probe,
                    p.similar_text,
                    p.similar_shape,
                    p.history_index,
                    p.ts,
                    p.own_probe,
                    p.warning,
                ]
                for cid, p in self.pending.items()
            },
            "auto_ids": self.auto_ids,
            "keys": [
                [k, st.runs, st.last_result, st.last_ts, st.polling, st.poll_ts, st.transient, st.epoch, st.since, st.silent]
                for k, st in self.keys.items()
            ],
            "epoch": self.epoch,
            "chains": {
                tool: [
                    _fp(c.fp_text),
                    _fp(c.fp_shape),
                    _fp(c.fp_thought),
                    c.length,
                    c.last_result,
                    c.failed,
                    c.transient,
                    c.epoch,
                    c.last_ts,
                    c.last_key,
                    c.variant,
                ]
                for tool, c in self.chains.items()
            },
            "history": [self.history, self.history_base],
            "seen": list(self.seen),
            "opening": self.opening,
            "answers": {tool: a.to_wire() for tool, a in self.answers.items()},
            "done": [[k, *d] for k, d in self.done.items()],
            "said": list(self.said),
            "wait": self.wait,
            "warned": {k: list(v) for k, v in self.warned.items()},
            "answered": self.answered,
            "interrupted": self.interrupted,
        }

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> Loops:
        history, history_base = d["history"]
        return cls(
            pending={cid: Pending(_unfacts(p[0]), *p[1:10]) for cid, p in d["pending"].items()},
            auto_ids=d["auto_ids"],
            # a streak stored before `since` existed began no later than its last run
            keys={k[0]: KeyStat(k[1], k[2], k[3], k[4], list(k[5]), k[6], k[7], *(k[8:] or [k[3]])) for k in d["keys"]},
            epoch=d["epoch"],
            chains={
                tool: Chain(_unfp(c[0]), _unfp(c[1]), _unfp_or_none(c[2]), c[3], c[4], c[5], c[6], c[7], c[8], *c[9:11])
                for tool, c in d["chains"].items()
            },
            history=[list(h) for h in history],
            history_base=history_base,
            seen=dict.fromkeys(d["seen"]),
            opening=_opening(d),
            # sessions written before these detectors existed have none of their state
            answers={tool: Answer.from_wire(a) for tool, a in d.get("answers", {}).items()},
            # a success stored before model steps and effects were kept has neither
            done={k: _done(t, rest) for k, t, *rest in d.get("done", [])},
            said=dict.fromkeys(d.get("said", [])),
            wait=dict(d.get("wait", {})),
            # a warning stored as a bare count, before warnings waited for evidence, is read
            warned={k: (v, -1) if isinstance(v, int) else (v[0], v[1]) for k, v in d.get("warned", {}).items()},
            answered=d.get("answered", -1),
            interrupted=bool(d.get("interrupted", False)),
        )


@dataclass(slots=True)
class Failing:
    """identical_failure: one distinct call (tool + canonical arguments) failing the same way."""

    run: int  # failures in a row of this call, whatever other calls did in between
    out: int  # the failure: its noise-masked error and payload (a hash; FAILED for a dependency's)
    words: tuple[int, ...] | None  # its words (sorted hashes), to judge "the same way" by similarity
    counts: int  # what it counted ("5 failed"; a hash, 0 for none): other counts are news
    transient: bool  # it looked transient (timeout, 429, 503): more retries are expected
    acts: int  # the session's successful calls when it failed (`Failures.acts`)

    def to_wire(self) -> list[Any]:
        return [self.run, self.out, _fp(self.words), self.counts, self.transient, self.acts]

    @classmethod
    def from_wire(cls, d: list[Any]) -> Failing:
        return cls(d[0], d[1], _unfp_or_none(d[2]), d[3], d[4], d[5])


@dataclass(slots=True)
class Retried:
    """identical_failure: one tool failing the same way under other arguments that share a
    value or read alike (a salt, a fresh ref, a new edit the linter rejects)."""

    run: int
    error: tuple[int, ...]  # the error's words' shapes, the call's own echoed words aside
    common: list[int]  # the argument values every call of the streak held (keyed hashes)
    shape: tuple[int, ...] | None  # the last call's argument shapes (None: not fingerprinted)
    keys: list[int]  # its distinct calls (at most MAX_RETRIED_KEYS): repeats of one are that call's streak
    tried: list[int]  # the argument values its calls held (keyed hashes, at most MAX_VALUES)
    told: list[int]  # the values its last error named (keyed hashes as argument values are, at most MAX_VALUES)

    def to_wire(self) -> list[Any]:
        return [self.run, _fp(self.error), self.common, _fp(self.shape), self.keys, self.tried, self.told]

    @classmethod
    def from_wire(cls, d: list[Any]) -> Retried:
        return cls(d[0], _unfp(d[1]), list(d[2]), _unfp_or_none(d[3]), list(d[4]), list(d[5]), list(d[6]))


@dataclass(slots=True)
class Failures:
    """identical_failure's slice: each failing call's streak, and each tool's, counted on their
    own (what other calls return in between is not news about these)."""

    calls: dict[int, Failing] = field(default_factory=dict)
    tools: dict[str, Retried] = field(default_factory=dict)
    acts: int = 0  # successful calls so far: what may have changed the world between two failures

    def to_wire(self) -> list[Any]:
        return [[[k, f.to_wire()] for k, f in self.calls.items()], {t: r.to_wire() for t, r in self.tools.items()}, self.acts]

    @classmethod
    def from_wire(cls, d: list[Any] | None) -> Failures:
        if d is None:  # a session stored before failures had a slice of their own
            return cls()
        calls = {k: Failing.from_wire(f) for k, f in d[0]}
        return cls(calls, {t: Retried.from_wire(r) for t, r in d[1].items()}, d[2])

    def weight(self) -> int:
        return sum(_FAILING + _INT * len(f.words or ()) for f in self.calls.values()) + sum(
            _CHAIN + _INT * (len(r.error) + len(r.common) + len(r.shape or ()) + len(r.keys) + len(r.tried) + len(r.told))
            for r in self.tools.values()
        )


def _done(ts: float, rest: list[Any]) -> tuple[float, int | None, int | None, int]:
    # a success stored before model steps, effects and free text were kept has none of them
    turn, effect, text = (rest + [None, None, 0][len(rest) :])[:3]
    return ts, turn, effect, text


def _opening(d: dict[str, Any]) -> list[int] | None:
    if "opening" in d:
        return None if d["opening"] is None else list(d["opening"])
    only_key = d.get("only_key")  # stored before openings: the one tool so far, or several
    return [] if only_key is None else None if only_key == _MIXED else [only_key]


#: an assistant turn since the last progress: (agent, fingerprint, repeats its own turn, repeats any turn)
Turn = tuple[int, tuple[int, ...], bool, bool]


def turns_to_wire(turns: list[Turn]) -> list[Any]:
    return [[a, _fp(fp), own, rep] for a, fp, own, rep in turns]


def turns_from_wire(d: list[Any]) -> list[Turn]:
    return [(a, _unfp(fp), own, rep) for a, fp, own, rep in d]


@dataclass(slots=True)
class SessionState:
    """One session's guard state: plain slices of hashes and numbers, each owning its wire
    form (`to_wire` / `from_wire`, composed by store/codec.py)."""

    key: str
    tenant: str | None = None
    feature: str | None = None
    agent: str | None = None
    created_s: float = 0.0
    spend: Spend = field(default_factory=Spend)
    # a session-terminal trip: (heuristic, reason)
    halted: tuple[str, str] | None = None
    # the escalation that froze the session (a human resolves it); every call is refused until then
    escalation: str | None = None
    loops: Loops = field(default_factory=Loops)
    failures: Failures = field(default_factory=Failures)
    turns: list[Turn] = field(default_factory=list)
    # session-scoped breakers (when breakers are not shared)
    breakers: dict[str, BreakerState] = field(default_factory=dict)
    ledger: Ledger = field(default_factory=Ledger)
    # set only on the pseudo-sessions that hold a tool view, and a tenant's effects
    churn: ChurnView | None = None
    effects: Effects | None = None
    # done_claim: what the session's tools did (set on a coding agent's first command or edit)
    work: Work | None = None
    version: int = 0

    def weight(self) -> int:
        """Roughly the bytes this state takes in memory (CPython, 64-bit): what an in-process
        store's byte budget counts. Every part that grows is counted, from its lengths only, so
        it costs microseconds; tests/test_retention.py holds it to what tracemalloc measures."""
        lp, led = self.loops, self.ledger
        w = _BASE
        for p in lp.pending.values():
            f = p.facts
            w += _PENDING + _INT * (len(f.fp_text or ()) + len(f.fp_shape or ()) + len(f.fp_thought or ()) + len(f.values))
        w += sum(_KEY + _INT * len(st.poll_ts) for st in lp.keys.values())
        w += sum(_CHAIN + _INT * (len(c.fp_text) + len(c.fp_shape) + len(c.fp_thought or ())) for c in lp.chains.values())
        w += sum(_ANSWER + _INT * (len(a.keys) + len(a.topic) + sum(map(len, a.asked))) for a in lp.answers.values())
        w += _ROW * len(lp.history) + _ENTRY * (len(lp.seen) + len(lp.said) + len(lp.wait) + len(lp.warned))
        w += _DONE * len(lp.done) + _INT * len(lp.opening or ()) + self.failures.weight()
        w += sum(_TURN + _INT * len(t[1]) for t in self.turns)
        w += sum(_BREAKER + _BUCKET * (len(b.window.buckets) if b.window is not None else 0) for b in self.breakers.values())
        w += _RECEIPT * len(led.receipts) + 3 * _POOL + _POOLED * (len(led.references) + len(led.confirmed) + len(led.runs))
        w += _ENTRY * (len(led.mutating) + len(self.spend.tool_tokens))
        if self.churn is not None:
            w += sum(_CHAIN + _INT * len(c.common) + _ENTRY * len(c.members) for c in self.churn.chains)
        if self.effects is not None:
            w += _DONE * (len(self.effects.inflight) + len(self.effects.done))
        if self.work is not None:
            w += self.work.weight()
        return w

    def compacted(self) -> SessionState:
        """The same session with its detectors' state dropped: its halt, escalation, spend and
        breakers stay. What an in-process store keeps of a halted session it must make room for."""
        return replace(self, loops=Loops(), failures=Failures(), turns=[], ledger=Ledger(), churn=None, effects=None, work=None)

    @property
    def sid(self) -> str:
        """The session id as the caller knows it (the key without its tenant)."""
        return self.key.rpartition("\x1f")[2]

    def breaker(self, key: str) -> BreakerState:
        """A session-scoped breaker (created closed)."""
        st = self.breakers.get(key)
        if st is None:
            st = BreakerState(key)
            put_bounded(self.breakers, key, st, MAX_TOOLS)
        return st

    def reset_streaks(self) -> None:
        """New information from outside (a user turn): the run starts over, and an action
        already done may be asked for again."""
        loops = self.loops
        loops.keys.clear()
        loops.answers.clear()
        loops.done.clear()
        self.failures = Failures()
        loops.epoch += 1
        loops.chains.clear()
        loops.history_base += len(loops.history)
        loops.history.clear()
        loops.warned.clear()
        self.turns.clear()
        self.restart_breaker_streaks()

    def restart_breaker_streaks(self) -> None:
        """Session-scoped breakers (replay) judge this run alone: new information (a user turn,
        a new result) restarts their failure streaks. Shared breakers judge the tool's health
        and are not touched."""
        for breaker in self.breakers.values():
            breaker.consecutive_failures = 0


def _fp(fp: tuple[int, ...] | None) -> str | None:
    """A 32-bit fingerprint as base64 (about half the size of its JSON numbers)."""
    return None if fp is None else base64.b64encode(struct.pack(f">{len(fp)}I", *fp)).decode("ascii")


def _unfp(d: str) -> tuple[int, ...]:
    raw = base64.b64decode(d)
    return struct.unpack(f">{len(raw) // 4}I", raw)


def _unfp_or_none(d: str | None) -> tuple[int, ...] | None:
    return None if d is None else _unfp(d)


def _facts(f: CallFacts) -> list[Any]:
    return [
        f.tool,
        f.key,
        _fp(f.fp_text),
        _fp(f.fp_shape),
        _fp(f.fp_thought),
        f.tokens,
        f.cost_usd,
        f.depth,
        f.mutating,
        f.effect,
        f.writes,
        _fp(f.values),
        f.turn,
        sorted(f.sizes),
        f.effect_text,
        f.moves_amount,
        _fp(f.topic),
    ]


def _unfacts(d: list[Any]) -> CallFacts:
    # facts stored before duplicate_mutation have nine fields, before writes ten; before argument
    # values and model steps eleven
    effect, writes = (d + [None, False][len(d) - 9 :])[9:11] if len(d) < 11 else d[9:11]
    values, turn, sizes = (_unfp(d[11]), d[12], frozenset(d[13])) if len(d) > 13 else ((), None, frozenset())
    fp_text, fp_shape, fp_thought = _unfp_or_none(d[2]), _unfp_or_none(d[3]), _unfp_or_none(d[4])
    effect_text, moves_amount = (d[14], d[15]) if len(d) > 15 else (0, False)  # stored before free text was kept apart
    topic = _unfp(d[16]) if len(d) > 16 else ()
    facts = (d[5], d[6], d[7], d[8], effect, writes, values, turn, sizes, effect_text, moves_amount, topic)
    return CallFacts(d[0], d[1], fp_text, fp_shape, fp_thought, *facts)
