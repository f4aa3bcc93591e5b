"""`agent-breaker serve`: NeMo Guardrails' server, hardened, with the agent-breaker events endpoint.

    POST /v1/agent-breaker/events
    {"config_id": "agent_breaker", "session_id": "S", "events": [{"type": "ToolCallRequested", ...}]}
 -> {"session_id": "S", "events": [{"type": "ToolCallVerdict", ...}]}

What it adds to the stock server (see docs/security.md):
- every config is built once, at start-up (a bad one stops start-up), verbose logging off, and
  one engine serves each config whatever `model` a chat-completions request names;
- an ASGI guard in front of every route: the Host header, a bearer token (tokens may be bound
  to a tenant), a request size limit, and a JSON check (nesting depth, valid Unicode, events per
  request) before anything recursive runs, NeMo included: bad input gets a 4xx, never a 500;
- breaker admin routes (`GET /v1/agent-breaker/breakers`, `POST .../breakers/{tool}`), only
  with $AGENT_BREAKER_ADMIN_TOKEN set, and opened by that token alone (no API token);
- escalation admin routes (`GET /v1/agent-breaker/escalations`, `POST .../escalations/{id}`),
  behind the same token, on the escalation queue's store (a SQLite file, or a fleet's Redis);
- the events endpoint runs events through a small pool of live Colang states per config, and
  they hold no payload: the Colang runtime sees ids and a reference, the action reads the event
  from a table that lives for the request only.

The rooms of this package (each private; this module is the public face):
- `_guard`: the request guard (ASGI middleware) and its limits; `_auth`: the tokens it checks;
- `_colang`: the configs, the Colang thread and the pool of live Colang states;
- `_routes`: the agent-breaker routes, and which of NeMo's stay;
- `_gateway`: /check, /result and the hook endpoints, answered by the guard through the dispatch;
- `_logging`: the server's logger, NeMo's kept quiet; `_app`: `build_app`, which puts them together;
- `_run`: `serve`, one serving process or a supervisor of worker processes on one port;
- `_paths` and `_errors`: the paths and the error body the guard and the routes share.
"""

from __future__ import annotations

from ._app import build_app
from ._auth import Tokens, admin_token, generated_token
from ._colang import ServedConfigs
from ._errors import ServeError
from ._guard import Limits, RequestGuard
from ._guard import _is_admin_path as _is_admin_path  # tests check the admin paths
from ._guard import _route_path as _route_path
from ._logging import quiet_nemo_logging
from ._routes import install_admin_endpoints, install_escalation_endpoints
from ._run import serve, started_app

__all__ = [
    "Limits",
    "RequestGuard",
    "ServeError",
    "ServedConfigs",
    "Tokens",
    "admin_token",
    "build_app",
    "generated_token",
    "install_admin_endpoints",
    "install_escalation_endpoints",
    "quiet_nemo_logging",
    "serve",
    "started_app",
]
