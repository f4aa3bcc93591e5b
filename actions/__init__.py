"""agent-breaker's NeMo Guardrails actions, and the `init(app)` every config folder calls.

A config folder's `config.py` holds one line, `from agent_breaker.actions import init`; NeMo
then calls `init(app)` with its LLMRails, which validates the `custom_data: agent_breaker:`
block (a bad value stops start-up with the key and the value in the message), builds the
engine, and registers the actions and the engine as an action parameter. A root of config
folders (the shipped `config/`) holds a `config.py` importing `init_root`, which NeMo's server
calls once at start.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from agent_breaker.actions.guards import ACTIONS
from agent_breaker.actions.native import NATIVE_ACTIONS

from agent_breaker._served import root_problems
from agent_breaker.config import ConfigError, nemo_block
from agent_breaker.dispatch import ENGINE_PARAM, collect_incident
from agent_breaker.engine import Engine

__all__ = ["ENGINE_PARAM", "build_engine", "init", "init_root"]


def build_engine(custom_data: dict[str, Any] | None) -> Engine:
    """The engine for one NeMo config: its `custom_data: agent_breaker:` block, validated.
    Incidents go to the flows (which call the incident action), not straight to the log."""
    return Engine(nemo_block(custom_data, "custom_data"), listeners=[collect_incident])


def init(app: Any) -> None:
    """Called by NeMo with the LLMRails of a config folder that imports this."""
    try:
        engine = build_engine(app.config.custom_data)
    except ConfigError as exc:
        if _in_nemo("chat"):
            # NeMo's chat prints two tracebacks around the cause: the person at the terminal
            # gets the cause, which names the fix, alone
            print(f"agent-breaker: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        raise
    app.register_action_param(ENGINE_PARAM, engine)
    for fn in ACTIONS + NATIVE_ACTIONS:
        app.register_action(fn, name=fn.action_meta["name"])


def _in_nemo(command: str) -> bool:
    """Whether this process is NeMo's command line running `command` (`chat`: a person at a
    terminal; `server`: NeMo's server, not a program that embeds its app)."""
    program = Path(sys.argv[0])  # the `nemoguardrails` script, or nemoguardrails/__main__.py under -m
    return sys.argv[1:2] == [command] and "nemoguardrails" in (program.name, program.parent.name)


def init_root(app: Any) -> None:
    """Called by NeMo's server at start with its app, when it serves a root of config folders:
    NeMo builds each config at its first request and answers a config that cannot start with a
    500 and a traceback in the log. The root's configs are checked here instead
    (`root_problems`). Under `nemoguardrails server` a problem is printed and the process exits
    2 before it serves (uvicorn would log a startup exception as a traceback and serve on); an
    application that embeds NeMo's app gets the ConfigError."""
    if getattr(app.state, "agent_breaker_configs", None) is not None:
        return  # `agent-breaker serve`: it checked the configs, and built them, before it served
    problems = root_problems(Path(app.rails_config_path))
    if not problems:
        return
    if _in_nemo("server"):
        print("\n".join(problems), file=sys.stderr, flush=True)
        os._exit(2)
    raise ConfigError("; ".join(problems))
