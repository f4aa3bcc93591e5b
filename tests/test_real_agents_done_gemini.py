"""test_real_agents_done.py's tests, on Gemini CLI."""

from __future__ import annotations

from _agents import GEMINI_CLI
from test_real_agents_done import *  # noqa: F403  (its tests and fixtures, for this agent)

AGENTS = [GEMINI_CLI]
