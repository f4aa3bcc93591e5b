"""Detectors over assistant turns: one agent saying the same thing in other words
(semantic_echo), and agents trading the same status messages (agent_deadlock). A tool result
that is new, or a user turn, clears the stretch they look at."""

from __future__ import annotations

from ..config import AgentBreakerConfig
from ..heuristics import AGENT_DEADLOCK, SEMANTIC_ECHO
from ..session import MAX_TURNS, SessionState
from .base import Trip, similarity


def record_turn(s: SessionState, agent: int, fp: tuple[int, ...], cfg: AgentBreakerConfig) -> tuple[int, int, int]:
    """Add one assistant turn; returns (this agent's similar turns, turns that repeat an
    earlier turn of any agent, distinct agents), over the stretch since the last progress."""
    own_threshold = cfg.semantic_echo.similarity
    any_threshold = cfg.agent_deadlock.similarity
    own_repeat = any_repeat = False
    for other_agent, other_fp, _, _ in s.turns:
        sim = similarity(fp, other_fp)
        any_repeat = any_repeat or sim >= any_threshold
        own_repeat = own_repeat or (other_agent == agent and sim >= own_threshold)
    if len(s.turns) >= MAX_TURNS:
        del s.turns[0]
    s.turns.append((agent, fp, own_repeat, any_repeat))
    own_run = 1 + sum(1 for a, _, own, _ in s.turns if a == agent and own)
    repeats = sum(1 for _, _, _, rep in s.turns if rep)
    agents = len({a for a, _, _, _ in s.turns})
    return own_run, repeats, agents


def check_turn(own_run: int, repeats: int, agents: int, cfg: AgentBreakerConfig) -> list[Trip]:
    trips = []
    if agents >= 2 and repeats >= cfg.agent_deadlock.max_turns:
        trips.append(
            Trip(
                AGENT_DEADLOCK,
                "session",
                f"{agents} agents exchanged {repeats} repeated status messages with no tool progress",
                "The agents are waiting on each other. Break the deadlock: one agent must act on what it has, "
                "or hand the task to a human.",
                {"agents": agents, "repeats": repeats, "max_turns": cfg.agent_deadlock.max_turns},
            )
        )
    if own_run >= cfg.semantic_echo.max_repeats:
        trips.append(
            Trip(
                SEMANTIC_ECHO,
                "session",
                f"{own_run} assistant turns in a row say the same thing with no tool progress",
                "You are repeating yourself. Ask the user one clear question, act, or give your final answer.",
                {"repeats": own_run, "max_repeats": cfg.semantic_echo.max_repeats},
            )
        )
    return trips
