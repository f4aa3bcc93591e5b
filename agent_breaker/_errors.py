"""Errors raised before any heavy module is needed (the CLI catches them without importing pydantic)."""


class ConfigError(ValueError):
    """A bad configuration value; the message names the key and the value."""
