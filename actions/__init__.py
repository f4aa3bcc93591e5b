"""agent-breaker's NeMo Guardrails actions, and the `init(app)` every config folder calls.

A config folder's `config.py` holds one line, `from agent_breaker.actions import init`; NeMo
then calls `init(app)` with its LLMRails, which validates the `custom_data: agent_breaker:`
block (a bad value stops start-up with the key and the value in the message), builds the
engine, and registers the actions and the engine as an action parameter.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from agent_breaker.actions.guards import ACTIONS, collect_incident
from agent_breaker.actions.native import NATIVE_ACTIONS

from agent_breaker.config import ConfigError, parse_config
from agent_breaker.engine import Engine

__all__ = ["ENGINE_PARAM", "build_engine", "init"]

ENGINE_PARAM = "agent_breaker_engine"


def build_engine(custom_data: dict[str, Any] | None) -> Engine:
    """The engine for one NeMo config: its `custom_data: agent_breaker:` block, validated.
    Incidents go to the flows (which call the incident action), not straight to the log."""
    config = parse_config((custom_data or {}).get("agent_breaker"))
    return Engine(config, listeners=[collect_incident])


def init(app: Any) -> None:
    """Called by NeMo with the LLMRails of a config folder that imports this."""
    try:
        engine = build_engine(app.config.custom_data)
    except ConfigError as exc:
        if _in_nemo_chat():
            # NeMo's chat prints two tracebacks around the cause: the person at the terminal
            # gets the cause, which names the fix, alone
            print(f"agent-breaker: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        raise
    app.register_action_param(ENGINE_PARAM, engine)
    for fn in ACTIONS + NATIVE_ACTIONS:
        app.register_action(fn, name=fn.action_meta["name"])


def _in_nemo_chat() -> bool:
    """Whether this process is `nemoguardrails chat` (a person at a terminal, not a program)."""
    program = Path(sys.argv[0])  # the `nemoguardrails` script, or nemoguardrails/__main__.py under -m
    return sys.argv[1:2] == ["chat"] and "nemoguardrails" in (program.name, program.parent.name)
