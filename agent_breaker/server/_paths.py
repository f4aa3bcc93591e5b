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
CONFIG_ID_DESCRIPTION = f"A config the server serves (default: the only one it serves, else {DEFAULT_CONFIG_ID})."
METRICS_PATH = "/metrics"
CHAT_PATH = "/v1/chat/completions"
HEALTH_PATHS = ("/healthz", "/v1/health")  # NeMo's, kept


def routes() -> tuple[tuple[str, str, str], ...]:
    """Every route `serve` answers: (method, path, what it does). The HTTP reference is generated
    from it, and a test holds it to the routes of a built app."""
    from .._admin import BREAKERS_PATH
    from ..escalations import ESCALATIONS_PATH

    hooks = tuple(
        ("POST", path, f"{agent}'s hook input; the answer in {agent}'s own format") for path, agent in HOOK_PATHS.items()
    )
    return (
        ("POST", EVENTS_PATH, "one agent event through the config's Colang flows; the verdict event"),
        ("POST", CHECK_PATH, "a gateway's tool call, decided by the config's engine; 429 with the refusal"),
        ("POST", RESULT_PATH, "the outcome of a call `/check` let through; its verdict and receipt"),
        *hooks,
        ("POST", CHAT_PATH, "NeMo's chat completions, with agent-breaker's events in the context"),
        ("GET", CONFIGS_PATH, "the configs this server serves"),
        ("GET", BREAKERS_PATH, "every tool breaker of a config (admin token)"),
        ("POST", BREAKERS_PATH + "/{tool}", "force a breaker open, closed, disabled or metered (admin token)"),
        ("GET", ESCALATIONS_PATH, "the escalation queue, newest first (admin token)"),
        ("POST", ESCALATIONS_PATH + "/{escalation_id}", "resume or abort an escalated session (admin token)"),
        ("GET", METRICS_PATH, "Prometheus metrics"),
        *(("GET", path, "liveness (NeMo's)") for path in HEALTH_PATHS),
    )
