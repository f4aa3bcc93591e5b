"""agent-breaker: deterministic guards on an AI agent's tool-call path.

from agent_breaker import Engine
engine = Engine()                      # in-memory state, shipped defaults
verdict = engine.check_tool_call({"session": "s1", "tool": "search", "args": {"q": "x"}})
if not verdict.allowed:
    return verdict.observation         # what the agent reads instead of the tool output
"""

from __future__ import annotations

import importlib

from ._about import DISTRIBUTION

TYPE_CHECKING = False  # typing costs milliseconds every hook call would feel (see `_hook_client`)
if TYPE_CHECKING:
    from typing import Any

    from ._errors import AgentBreakerError
    from ._guarded import guarded
    from ._outcomes import is_semantic_failure
    from .breaker import BreakerStateName, IllegalTransition
    from .clock import Clock, FakeClock, SystemClock
    from .config import AgentBreakerConfig, ConfigError, load_config, parse_config
    from .engine import Engine, Listener, log_incident
    from .events import Assistant, Final, InvalidEventError, ToolCall, ToolResult, User, parse_event
    from .receipts import ReceiptKeys
    from .store import MemoryStore, StorageError, Store, store_from_uri
    from .verdicts import BreakerIncident, Incident, ResultVerdict, Verdict

# each public name's module, imported on first use (PEP 562): `agent-breaker hook`, which runs once
# per tool call, pays only for what it uses
_MODULES = {
    "AgentBreakerConfig": ".config",
    "AgentBreakerError": "._errors",
    "Assistant": ".events",
    "BreakerIncident": ".verdicts",
    "BreakerStateName": ".breaker",
    "Clock": ".clock",
    "ConfigError": ".config",
    "Engine": ".engine",
    "FakeClock": ".clock",
    "Final": ".events",
    "IllegalTransition": ".breaker",
    "Incident": ".verdicts",
    "InvalidEventError": ".events",
    "Listener": ".engine",
    "MemoryStore": ".store",
    "ReceiptKeys": ".receipts",
    "ResultVerdict": ".verdicts",
    "StorageError": ".store",
    "Store": ".store",
    "SystemClock": ".clock",
    "ToolCall": ".events",
    "ToolResult": ".events",
    "User": ".events",
    "Verdict": ".verdicts",
    "guarded": "._guarded",
    "is_semantic_failure": "._outcomes",
    "load_config": ".config",
    "log_incident": ".engine",
    "parse_config": ".config",
    "parse_event": ".events",
    "store_from_uri": ".store",
}

__all__ = [
    "AgentBreakerConfig",
    "AgentBreakerError",
    "Assistant",
    "BreakerIncident",
    "BreakerStateName",
    "Clock",
    "ConfigError",
    "Engine",
    "FakeClock",
    "Final",
    "IllegalTransition",
    "Incident",
    "InvalidEventError",
    "Listener",
    "MemoryStore",
    "ReceiptKeys",
    "ResultVerdict",
    "StorageError",
    "Store",
    "SystemClock",
    "ToolCall",
    "ToolResult",
    "User",
    "Verdict",
    "guarded",
    "is_semantic_failure",
    "load_config",
    "log_incident",
    "parse_event",
    "parse_config",
    "store_from_uri",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":  # read on first use: importlib.metadata costs a hook call milliseconds
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(DISTRIBUTION)
        except PackageNotFoundError:  # a source tree on sys.path, never installed
            return "0+unknown"
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULES) | {"__version__"})
