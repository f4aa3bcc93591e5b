"""agent-breaker: deterministic guards on an AI agent's tool-call path.

from agent_breaker import Engine
engine = Engine()                      # in-memory state, shipped defaults
verdict = engine.check_tool_call({"session": "s1", "tool": "search", "args": {"q": "x"}})
if not verdict.allowed:
    return verdict.observation         # what the agent reads instead of the tool output
"""

from ._outcomes import is_semantic_failure
from .breaker import BreakerStateName, IllegalTransition
from .clock import Clock, FakeClock, SystemClock
from .config import AgentBreakerConfig, ConfigError, load_config, parse_config
from .engine import Engine, Listener, log_incident
from .events import Assistant, Final, InvalidEventError, ToolCall, ToolResult, User, parse_event
from .guarded import guarded
from .receipts import ReceiptKeys
from .store import MemoryStore, StorageError, Store, store_from_uri
from .verdicts import BreakerIncident, Incident, ResultVerdict, Verdict

__all__ = [
    "AgentBreakerConfig",
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
