"""Detectors over assistant turns: one agent saying the same thing in other words
(semantic_echo), and agents trading the same status messages (agent_deadlock). A tool result
that is new, or a user turn, clears the stretch they look at."""

from __future__ import annotations

from typing import NamedTuple

from .._state import MAX_TURNS, SessionState
from ..config import AgentBreakerConfig
from ..heuristics import AGENT_DEADLOCK, SEMANTIC_ECHO
from ..verdicts import Trip
from .base import similarity


class Turn(NamedTuple):
    """An assistant turn against the stretch since the last progress: this agent's similar
    turns in a row, turns repeating an earlier one of any agent, distinct agents, and the best
    similarity to an earlier turn of this agent and of any agent (the evidence)."""

    own_run: int
    repeats: int
    agents: int
    own_similarity: float
    any_similarity: float


def record_turn(s: SessionState, agent: int, fp: tuple[int, ...], cfg: AgentBreakerConfig) -> Turn:
    """Add one assistant turn and say how it compares with the stretch."""
    own_best = any_best = 0.0
    for other_agent, other_fp, _, _ in s.turns:
        sim = similarity(fp, other_fp)
        any_best = max(any_best, sim)
        if other_agent == agent:
            own_best = max(own_best, sim)
    if len(s.turns) >= MAX_TURNS:
        del s.turns[0]
    s.turns.append((agent, fp, own_best >= cfg.semantic_echo.similarity, any_best >= cfg.agent_deadlock.similarity))
    own_run = 1 + sum(1 for a, _, own, _ in s.turns if a == agent and own)
    repeats = sum(1 for _, _, _, rep in s.turns if rep)
    agents = len({a for a, _, _, _ in s.turns})
    return Turn(own_run, repeats, agents, own_best, any_best)


def check_turn(turn: Turn, cfg: AgentBreakerConfig) -> list[Trip]:
    trips = []
    agents, repeats, own_run = turn.agents, turn.repeats, turn.own_run
    if agents >= 2 and repeats >= cfg.agent_deadlock.max_turns:
        trips.append(
            Trip(
                AGENT_DEADLOCK,
                "session",
                f"{agents} agents exchanged {repeats} repeated status messages with no tool progress",
                "The agents are waiting on each other. Break the deadlock: one agent must act on what it has, "
                "or hand the task to a human.",
                {
                    "agents": agents,
                    "repeats": repeats,
                    "max_turns": cfg.agent_deadlock.max_turns,
                    "similarity": round(turn.any_similarity, 3),
                    "similarity_threshold": cfg.agent_deadlock.similarity,
                },
            )
        )
    if own_run >= cfg.semantic_echo.max_repeats:
        trips.append(
            Trip(
                SEMANTIC_ECHO,
                "session",
                f"{own_run} assistant turns in a row say the same thing with no tool progress",
                "You are repeating yourself. Ask the user one clear question, act, or give your final answer.",
                {
                    "repeats": own_run,
                    "max_repeats": cfg.semantic_echo.max_repeats,
                    "similarity": round(turn.own_similarity, 3),
                    "similarity_threshold": cfg.semantic_echo.similarity,
                },
            )
        )
    return trips
