"""A failing call retried over new sessions and agent ids (`session_churn`).

Per-session detectors see one try per session when an agent (or whoever drives it) opens a new
session, or takes a new agent id, for every retry. A tool view, one per (tenant, tool), follows
the sessions in their opening (their first `opening_calls` calls: a retry opens a session,
tries, and gives up, maybe after one other call): calls that fail the same way, the call's own
failure, and share their arguments' values (what stays while a salt or a fresh id churns) form
a chain, and a chain that spans enough sessions trips. Chains of other failures live beside it,
and a session that goes past its opening leaves its chains: parallel runs of one task, which go
on to real work, are no loop. Churn is about retries: a successful call is never churn (many
users of one deployment open their sessions with the same lookup).
"""

from __future__ import annotations

from .._state import MAX_CHURN_CHAINS, MAX_CHURN_MEMBERS, ChurnChain, ChurnView
from ..config import AgentBreakerConfig
from ..heuristics import SESSION_CHURN
from ..verdicts import Trip

#: the argument values of a call without any: the tool alone is what stays
NO_VALUES = (0,)


def check(view: ChurnView | None, values: tuple[int, ...], tool: str, cfg: AgentBreakerConfig, now: float) -> Trip | None:
    """Does this call continue a chain that spans sessions: it holds every value the chain's
    calls kept, and the chain is long enough and recent."""
    c = cfg.session_churn
    if view is None:
        return None
    held = set(values or NO_VALUES)
    for chain in view.chains:
        # sessions, not calls: a loop inside one session is the per-session detectors' (another
        # session that meets the same failure once is not a retry)
        if not chain.failed or len(chain.members) < c.max_sessions or abs(now - chain.last_ts) > c.window_s:
            continue
        if held.issuperset(chain.common):
            return Trip(
                SESSION_CHURN,
                "call",
                f"{tool} failed the same way {chain.calls} times across {len(chain.members)} new sessions",
                "Starting a new session or a new agent does not change the outcome. Report the error, or change your approach.",
                {"calls": chain.calls, "sessions": len(chain.members), "max_sessions": c.max_sessions, "window_s": c.window_s},
            )
    return None


def record_outcome(
    view: ChurnView, member: int, values: tuple[int, ...], outcome: int, failed: bool, now: float, cfg: AgentBreakerConfig
) -> None:
    """The failure of a call (the call's own, `outcome` its error's hash) from a session in its
    opening."""
    values = values or NO_VALUES
    window = cfg.session_churn.window_s
    for i, chain in enumerate(view.chains):
        common = set(chain.common).intersection(values)
        if chain.outcome == outcome and chain.failed == failed and common and abs(now - chain.last_ts) <= window:
            chain.calls += 1
            chain.members[member] = chain.members.get(member, 0) + 1
            while len(chain.members) > MAX_CHURN_MEMBERS:
                chain.calls -= chain.members.pop(next(iter(chain.members)))
            chain.common = sorted(common)
            chain.last_ts = now
            view.chains.append(view.chains.pop(i))  # the most recent last
            return
    # chains idle past the window are over; then, over the cap, the shortest older chain goes: a
    # run of one-off outcomes must not push a long chain out
    view.chains[:] = [chain for chain in view.chains if abs(now - chain.last_ts) <= window]
    view.chains.append(ChurnChain(outcome, sorted(set(values)), 1, {member: 1}, now, failed))
    if len(view.chains) > MAX_CHURN_CHAINS:
        older = view.chains[:-1]
        older.remove(min(older, key=lambda chain: chain.calls))
        view.chains[:-1] = older


def leave(view: ChurnView, member: int) -> bool:
    """A session went past its opening: its calls leave every chain. Returns whether the view
    changed."""
    changed = False
    for chain in view.chains:
        n = chain.members.pop(member, 0)
        if n:
            chain.calls -= n
            changed = True
    if changed:
        view.chains[:] = [chain for chain in view.chains if chain.members]
    return changed
