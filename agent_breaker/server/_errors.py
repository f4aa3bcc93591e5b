"""What `serve` raises when it cannot start, and the one error body every answer of the server
carries, from the request guard or from a route."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from .._errors import AgentBreakerError


class ServeError(AgentBreakerError, RuntimeError):
    """`agent-breaker serve` cannot start; the message says why and what to set."""


def error_body(status: int, message: str) -> dict[str, Any]:
    """Every error this server answers, from the guard or an endpoint: `{"error": {"message": ...}}`."""
    return {"error": {"message": message, "type": "invalid_request_error", "code": status}}


def json_error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content=error_body(status, message))
