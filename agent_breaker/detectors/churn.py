"""A loop spread over new session ids (`session_churn`).

Per-session detectors see one call per session when an agent (or whoever drives it) opens a
new session for every call. An agent view, one per (tenant, agent), follows the sessions whose
calls so far are all one and the same call: when that call keeps returning the same outcome
across sessions, the view trips. A session that makes any other call leaves the chain, so
parallel runs of the same task (which go on to other calls) are not a loop.
"""

from __future__ import annotations

from ..config import AgentBreakerConfig
from ..heuristics import SESSION_CHURN
from ..session import ChurnView
from .base import Trip


def check(view: ChurnView | None, key: int, tool: str, cfg: AgentBreakerConfig, now: float) -> Trip | None:
    c = cfg.session_churn
    if view is None or view.key != key or view.sessions < 2 or view.calls < c.max_calls:
        return None
    if abs(now - view.last_ts) > c.window_s:
        return None
    return Trip(
        SESSION_CHURN,
        "call",
        f"{tool} returned the same outcome {view.calls} times across {view.sessions} new sessions of this agent",
        "Starting a new session does not change the outcome. Use the result you have, or change your approach.",
        {"calls": view.calls, "sessions": view.sessions, "max_calls": c.max_calls, "window_s": c.window_s},
    )


def record_outcome(view: ChurnView, session: str, key: int, outcome: int, now: float, cfg: AgentBreakerConfig) -> None:
    """The outcome of a call from a session whose every call so far was this one."""
    if view.key == key and view.outcome == outcome and abs(now - view.last_ts) <= cfg.session_churn.window_s:
        view.calls += 1
        if view.last_session != session:
            view.sessions += 1
    else:
        view.key, view.outcome, view.calls, view.sessions = key, outcome, 1, 1
    view.last_session = session
    view.last_ts = now


def leave(view: ChurnView, session: str) -> bool:
    """A session made another call: if it was the chain's latest, the chain ends. Returns
    whether the view changed."""
    if view.last_session != session or not view.calls:
        return False
    view.key, view.calls, view.sessions = 0, 0, 0
    return True
