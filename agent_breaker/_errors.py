"""The package's exception root, and the errors raised before any heavy module is needed (the CLI
catches them without importing pydantic).

Every exception agent-breaker raises is an `AgentBreakerError`, so one `except
agent_breaker.AgentBreakerError` catches them all; each keeps the standard base it always had,
so code catching `ValueError` or `LookupError` goes on working. docs/architecture.md ("Errors")
draws the tree.
"""


class AgentBreakerError(Exception):
    """The root of every exception agent-breaker raises."""


class ConfigError(AgentBreakerError, ValueError):
    """A bad configuration value; the message names the key and the value."""
