"""The paths of the routes `serve` answers, which the request guard checks too."""

from __future__ import annotations

EVENTS_PATH = "/v1/agent-breaker/events"
CHECK_PATH = "/v1/agent-breaker/check"
RESULT_PATH = "/v1/agent-breaker/result"  # the gateway reports a checked call's outcome
#: the gateway endpoints: one event each, decided by the config's engine without the Colang runtime
GATEWAY_PATHS = (CHECK_PATH, RESULT_PATH)
#: coding agents' hooks (the paths of NeMo's hooks server, and Gemini CLI's): the agent's own JSON
HOOK_PATHS = {"/v1/hooks/claude-code": "claude-code", "/v1/hooks/codex": "codex", "/v1/hooks/gemini-cli": "gemini-cli"}
DEFAULT_HOOK_CONFIG_ID = "coding_agent"  # what the hook endpoints use when `?config_id=` names none
CONFIGS_PATH = "/v1/agent-breaker/configs"
DEFAULT_CONFIG_ID = "agent_breaker"  # what the events and check endpoints use when none is named
METRICS_PATH = "/metrics"
CHAT_PATH = "/v1/chat/completions"
