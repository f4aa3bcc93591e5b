"""test_real_agents.py's tests, on Codex."""

from __future__ import annotations

from _agents import CODEX
from test_real_agents import *  # noqa: F403  (its tests and fixtures, for this agent)

AGENTS = [CODEX]
