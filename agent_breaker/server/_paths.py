"""The paths of the routes `serve` answers, which the request guard checks too."""

from __future__ import annotations

EVENTS_PATH = "/v1/agent-breaker/events"
CHECK_PATH = "/v1/agent-breaker/check"
CONFIGS_PATH = "/v1/agent-breaker/configs"
DEFAULT_CONFIG_ID = "agent_breaker"  # what the events and check endpoints use when none is named
METRICS_PATH = "/metrics"
CHAT_PATH = "/v1/chat/completions"
