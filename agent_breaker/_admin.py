"""Breaker admin: what an operator sees of the tool breakers and how they move them, shared by
`agent-breaker serve`'s admin routes and `agent-breaker breakers` (which must start fast:
nothing here imports NeMo)."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any, Protocol

from ._errors import AgentBreakerError
from ._text import normalize_name, utc_text
from .breaker import BreakerState, BreakerStateName
from .breaker.core import SETTABLE_STATES
from .config import REDIS_URL_PREFIXES, REDIS_URLS_TEXT, AgentBreakerConfig, ConfigError
from .engine import Engine, breaker_key_parts
from .events import MAX_ID_CHARS, is_id
from .receipts import ReceiptKeys

ADMIN_TOKEN_ENV = "AGENT_BREAKER_ADMIN_TOKEN"
BREAKERS_PATH = "/v1/agent-breaker/breakers"
DEFAULT_URL = "http://127.0.0.1:8000"
#: the states an operator may set, as messages list them
BAD_TOOL = f"tool: a tool name of 1 to {MAX_ID_CHARS} printable characters"


class AdminInputError(AgentBreakerError, ValueError):
    """An admin request names no tool, tenant or state an operator can act on (HTTP 422)."""


def checked_tool(tool: Any) -> str:
    # the tool must survive normalization: a name of spaces or invisible characters is no tool
    if not is_id(tool) or not normalize_name(tool):
        raise AdminInputError(BAD_TOOL)
    return tool


def checked_tenant(tenant: Any) -> str | None:
    if tenant is None or is_id(tenant):
        return tenant
    raise AdminInputError(f"tenant: an id of 1 to {MAX_ID_CHARS} printable characters")


def operator_state(state: Any) -> BreakerStateName:
    if state not in SETTABLE_STATES:
        raise AdminInputError(f"state must be one of {SETTABLE_STATES}")
    return BreakerStateName(state)


def breaker_row(tenant: str | None, tool: str, st: BreakerState, now: float) -> dict[str, Any]:
    """One breaker as the admin route and the CLI show it (times in seconds on the engine's
    clock: epoch seconds on a live engine)."""
    return {
        "tool": tool,
        "tenant": tenant,
        "state": st.state.value,
        "failures": st.failures_in_window(now),
        "consecutive_failures": st.consecutive_failures,
        "open_until": st.open_until,
        "changed_at": st.changed_at or None,  # 0: never moved since it was created
    }


def breaker_rows(engine: Engine, tenant: str | None = None) -> list[dict[str, Any]]:
    """Every breaker of the engine's store, or `tenant`'s only."""
    now = engine.clock.now()
    return [breaker_row(t, tool, st, now) for t, tool, st in engine.operator.breakers() if tenant is None or t == tenant]


def force(engine: Engine, tool: str, state: BreakerStateName, tenant: str | None) -> dict[str, Any]:
    """Move a breaker as an operator; its state after the move (the tool named as the breaker
    knows it: normalized, as the listing shows it)."""
    engine.operator.force_breaker(tool, state, tenant=tenant)
    # the tenant the breaker's key carries: none for a breaker every tenant shares
    carried, name = breaker_key_parts(engine.operator.breaker_key(tool, tenant=tenant))
    return {"tool": name, "tenant": carried, "state": engine.operator.breaker_state(tool, tenant=tenant).value}


@contextlib.contextmanager
def fleet_engine(config: AgentBreakerConfig, *, url: str | None = None, prefix: str | None = None) -> Iterator[Engine]:
    """An engine on a fleet's Redis (the config's storage, or `url` and `prefix`) for breaker
    admin only. It decides no call, so it needs neither the fleet's receipt key nor its
    fingerprint secret; and a Redis error is an error, never a quiet fallback to an empty
    in-process store."""
    from .store.redis import RedisStore

    storage = config.storage
    url = url or storage.url
    if url.startswith("memory://"):
        raise ConfigError(
            "the config keeps its state in memory (memory://): its breakers live in the serving process; "
            "ask the server (--url) or name the fleet's Redis (--redis)"
        )
    if not url.startswith(REDIS_URL_PREFIXES):
        # no part of the value in the message: a URL without its scheme may still hold a password
        raise ConfigError(f"the fleet's Redis must be a {REDIS_URLS_TEXT} URL")
    store = RedisStore(
        url,
        prefix=prefix or storage.key_prefix,
        ttl_s=config.sessions.ttl_s,  # a forced breaker's key lives as long as the fleet's own
        timeout_s=storage.timeout_ms / 1000.0,
        on_error="raise",
        listen=False,
    )
    try:
        yield Engine(config, store=store, receipt_keys=ReceiptKeys.ephemeral())
    finally:
        store.close()


# ----------------------------------------------------------------------------- the CLI's two ways in


class AdminError(AgentBreakerError, RuntimeError):
    """The CLI could not do what was asked; the message says why."""


class Admin(Protocol):
    def breakers(self) -> list[dict[str, Any]]: ...

    def force(self, tool: str, state: BreakerStateName) -> dict[str, Any]: ...


class ServerAdmin:
    """The admin routes of a running `agent-breaker serve` (memory or Redis configs alike)."""

    def __init__(self, url: str, token: str, *, config_id: str | None = None, tenant: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.query = urllib.parse.urlencode({k: v for k, v in (("config_id", config_id), ("tenant", tenant)) if v is not None})

    def breakers(self) -> list[dict[str, Any]]:
        breakers: list[dict[str, Any]] = self._call("GET", BREAKERS_PATH)["breakers"]
        return breakers

    def force(self, tool: str, state: BreakerStateName) -> dict[str, Any]:
        return self._call("POST", f"{BREAKERS_PATH}/{urllib.parse.quote(tool, safe='')}", {"state": state.value})

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """The server's JSON answer (an object, on every admin route)."""
        request = urllib.request.Request(
            f"{self.url}{path}?{self.query}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                answer: dict[str, Any] = json.load(response)
                return answer
        except urllib.error.HTTPError as exc:
            raise AdminError(f"the server at {self.url} answered {exc.code}: {_error_message(exc)}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AdminError(f"cannot reach the server at {self.url}: {reason}") from None


def _error_message(exc: urllib.error.HTTPError) -> str:
    """The server's `{"error": {"message": ...}}`, else the status line's reason."""
    try:
        return str(json.load(exc)["error"]["message"])
    except (ValueError, KeyError, TypeError, OSError):
        return str(exc.reason)


class FleetAdmin:
    """A fleet's breakers straight on its Redis (`fleet_engine`), no server needed."""

    def __init__(self, engine: Engine, *, tenant: str | None = None) -> None:
        self.engine = engine
        self.tenant = checked_tenant(tenant)

    def breakers(self) -> list[dict[str, Any]]:
        return breaker_rows(self.engine, self.tenant)

    def force(self, tool: str, state: BreakerStateName) -> dict[str, Any]:
        return force(self.engine, checked_tool(tool), state, self.tenant)


def format_breakers(rows: list[dict[str, Any]]) -> str:
    """The CLI's table: one breaker a line, times in UTC."""
    header = f"{'tool':28} {'tenant':16} {'state':13} {'failures':>8} {'in a row':>8}  {'open until':20} {'changed at':20}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r['tool']:28} {r['tenant'] or '-':16} {r['state']:13} {r['failures']:>8} {r['consecutive_failures']:>8}  "
            f"{utc_text(r['open_until']):20} {utc_text(r['changed_at']):20}"
        )
    return "\n".join(lines)
