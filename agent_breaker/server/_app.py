"""`build_app`: NeMo's FastAPI app, assembled from the rooms of this package: the configs and
the Colang thread, the routes, and the request guard in front of them."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .. import _context_events
from ._auth import ALL_TENANTS, API_TOKEN_ENV, API_TOKENS_FILE_ENV, Tokens, admin_token, generated_token, token_file
from ._colang import ColangThread, ServedConfigs
from ._errors import ServeError
from ._gateway import Gateway
from ._guard import Limits, RequestGuard, allowed_hosts, is_loopback
from ._logging import quiet_nemo_logging
from ._routes import (
    install_admin_endpoints,
    install_configs_endpoint,
    install_escalation_endpoints,
    install_events_endpoint,
    install_metrics_endpoint,
    keep_only_served_routes,
)
from ._transport import Transport, TransportError


@contextlib.contextmanager
def _private_cwd() -> Iterator[None]:
    before = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="agent-breaker-serve-") as empty:
        os.chdir(empty)
        try:
            yield
        finally:
            os.chdir(before)


def build_app(root: Path, *, host: str, environ: Mapping[str, str] = os.environ) -> Any:
    """NeMo's FastAPI app, serving the configs under `root`, behind the request guard."""
    tokens = Tokens.from_env(environ)
    generated = None
    if tokens is None:
        if not is_loopback(host):
            raise ServeError(
                f"refusing to bind {host} without configured tokens: set ${API_TOKEN_ENV} (or ${API_TOKENS_FILE_ENV}),"
                " or bind 127.0.0.1"
            )
        # the agent's own tools must not reach the guard (a user turn resets its streaks): a
        # token they do not hold is required even on loopback
        generated = token_file(environ)
        tokens = Tokens({generated_token(generated): ALL_TENANTS})
    limits = Limits.from_env(environ)
    try:
        transport = Transport.from_env(environ)
    except TransportError as exc:
        raise ServeError(str(exc)) from None
    admin = admin_token(tokens, environ)
    quiet_nemo_logging()
    from nemoguardrails.server import api

    with _private_cwd():
        # NeMo imports actions.py / actions/ from the working directory: build every config
        # from an empty private folder, so no file where the server starts runs as code
        configs = ServedConfigs(root)

    async def get_rails(config_ids: list[str], model_name: str | None = None) -> Any:
        # one rails object (one engine) per config: the request's `model` names no other engine
        if len(config_ids) != 1:
            raise ValueError(f"exactly one config id per request; this server serves {configs.ids}")
        try:
            return configs.get(config_ids[0])
        except LookupError as exc:
            raise ValueError(str(exc)) from None

    api._get_rails = get_rails
    api.app.rails_config_path = str(configs.root)
    api.app.single_config_mode = False
    if len(configs.ids) == 1:
        api.app.default_config_id = configs.ids[0]
    colang = ColangThread()
    for rails in configs.rails.values():
        rails.colang = colang
    keep_only_served_routes(api.app)
    install_events_endpoint(api.app, configs, colang)
    install_configs_endpoint(api.app, configs)
    install_metrics_endpoint(api.app)
    if admin is not None:
        install_admin_endpoints(api.app, configs)
        install_escalation_endpoints(api.app, configs)
    _context_events.set_limit(limits.max_events)
    api.app.state.agent_breaker_configs = configs
    hosts = allowed_hosts(host, environ)
    gateway = Gateway(configs, max_in_flight=transport.max_in_flight)
    guard = RequestGuard(
        api.app, tokens=tokens, hosts=hosts, limits=limits, configs=configs, admin=admin, transport=transport, gateway=gateway
    )
    guard.token_file = generated
    return guard
