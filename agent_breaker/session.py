"""Per-session state: plain, bounded, and free of payload text.

What the engine keeps about a run is hashes (of canonical calls and results), token-hash
fingerprints for fuzzy comparison, counters and numbers. Every collection is capped, so a
session that runs for days stays small.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .breaker import BreakerState
from .receipts import Ledger
from .windows import BucketWindow

# caps on per-session collections: together they bound a session's stored size (the codec's
# test builds the largest session these allow; see README "Sessions and what is kept")
MAX_KEYS = 256
MAX_PENDING = 64  # calls in flight; a result of an evicted one is refused (invalid_event)
MAX_TURNS = 16
MAX_SEEN = 512
MAX_TOOLS = 256  # per-tool counters a session keeps (spend, session-scoped breakers)
MAX_CHAINS = 32  # near-duplicate chains, one per recently used tool (each holds fingerprints)

FAILED = -1  # result hash of a failed execution: any two failures compare equal
MIXED = -1  # SessionState.only_key once the session's calls differ (call hashes are >= 0)


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
    fp_text: tuple[int, ...]  # token hashes of the canonical args
    fp_shape: tuple[int, ...]  # the same with digit runs folded (ids, numbers)
    fp_thought: tuple[int, ...] | None
    tokens: int
    cost_usd: float
    depth: int
    mutating: bool


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


@dataclass(slots=True)
class ChurnView:
    """An agent view (session_churn): the latest chain of sessions that each made only one and
    the same call, and how often it returned the same outcome."""

    key: int = 0  # the call's hash (0: no chain)
    outcome: int = 0  # its result hash, or FAILED
    calls: int = 0
    sessions: int = 0
    last_session: str = ""
    last_ts: float = 0.0


@dataclass(slots=True)
class SessionState:
    key: str
    tenant: str | None = None
    feature: str | None = None
    agent: str | None = None
    created_s: float = 0.0
    # spend
    steps: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    tool_tokens: dict[str, int] = field(default_factory=dict)
    velocity: BucketWindow | None = None
    # a session-terminal trip: (heuristic, reason)
    halted: tuple[str, str] | None = None
    # calls and results
    pending: dict[str, Pending] = field(default_factory=dict)
    auto_ids: int = 0
    keys: dict[int, KeyStat] = field(default_factory=dict)
    fail_key: int | None = None  # identical_failure: the call failing in a row ...
    fail_run: int = 0  # ... and how many times
    fail_transient: bool = False  # ... and whether its last error looked transient
    epoch: int = 0  # counts results that were progress
    chains: dict[str, Chain] = field(default_factory=dict)
    history: list[list[Any]] = field(default_factory=list)  # [key, result hash or None]
    history_base: int = 0  # absolute index of history[0]
    seen: dict[int, None] = field(default_factory=dict)  # (call, result) pairs seen: progress test
    # assistant turns since the last progress: (agent, fingerprint, repeats own turn, repeats any turn)
    turns: list[tuple[int, tuple[int, ...], bool, bool]] = field(default_factory=list)
    # session-scoped breakers (when breakers are not shared)
    breakers: dict[str, BreakerState] = field(default_factory=dict)
    ledger: Ledger = field(default_factory=Ledger)
    # session_churn: the one call key every allowed call so far had (None: no call yet;
    # MIXED: calls differ)
    only_key: int | None = None
    # set only on the pseudo-session that holds an agent view
    churn: ChurnView | None = None
    version: int = 0

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
        """New information from outside (a user turn): the run starts over."""
        self.keys.clear()
        self.fail_key = None
        self.fail_run = 0
        self.epoch += 1
        self.chains.clear()
        self.history_base += len(self.history)
        self.history.clear()
        self.turns.clear()
        self.restart_breaker_streaks()

    def restart_breaker_streaks(self) -> None:
        """Session-scoped breakers (replay) judge this run alone: new information (a user turn,
        a new result) restarts their failure streaks. Shared breakers judge the tool's health
        and are not touched."""
        for breaker in self.breakers.values():
            breaker.consecutive_failures = 0
