"""The server's logger, and NeMo's kept to its warnings and errors."""

from __future__ import annotations

import logging

log = logging.getLogger("agent_breaker.server")


def quiet_nemo_logging() -> None:
    """NeMo logs every event it processes at INFO (and verbose mode prints them): keep its
    warnings and errors, drop the rest, whatever level the process runs at."""
    nemo = logging.getLogger("nemoguardrails")
    nemo.setLevel(logging.WARNING)
    if not any(isinstance(f, _BelowWarning) for f in nemo.filters):
        nemo.addFilter(_BelowWarning())


class _BelowWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING
