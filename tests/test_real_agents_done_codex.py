"""test_real_agents_done.py's tests, on Codex."""

from __future__ import annotations

from _agents import CODEX
from test_real_agents_done import *  # noqa: F403  (its tests and fixtures, for this agent)

AGENTS = [CODEX]
