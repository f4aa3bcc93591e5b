"""Who may call: the API tokens (each bound to a tenant, and to the configs, agents and features
it may name: a tenant's token is scoped by default), the scraper's token, the token `serve`
generates on loopback, and the admin token. Only SHA-256 digests of tokens are kept."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._admin import ADMIN_TOKEN_ENV
from ..dispatch import Caller
from ._errors import ServeError

API_TOKEN_ENV = "AGENT_BREAKER_API_TOKEN"
API_TOKENS_FILE_ENV = "AGENT_BREAKER_API_TOKENS_FILE"
#: a token for GET /metrics alone (a scraper's): it may use no config
METRICS_TOKEN_ENV = "AGENT_BREAKER_METRICS_TOKEN"
#: a token for the hook endpoints alone (a coding agent's hooks, whose shell can read it): the
#: prompts it sends restart no loop and lift no halt
HOOK_TOKEN_ENV = "AGENT_BREAKER_HOOK_TOKEN"
#: a token's tenant when it may act for every tenant
ALL_TENANTS = "*"


@dataclass(frozen=True)
class TokenScope:
    """What one token may act for: a tenant (`*`: every tenant), and the configs, agents and
    features it may name. A list left out (None) is any for a `*` token; for a tenant's token it
    is the default scope, which `dispatch.Caller` holds it to: the configs that enforce every
    heuristic, and the agents and features that pick none of the config's overrides."""

    tenant: str
    configs: frozenset[str] | None = None
    agents: frozenset[str] | None = None
    features: frozenset[str] | None = None
    metrics: bool = False  # the scraper's token: /metrics, and no config
    # a coding agent's hooks' token: the hook endpoints alone, and its prompts count for nothing
    hooks: bool = False

    @property
    def caller(self) -> Caller:
        """The token as the guard's caller: the tenant it acts for (None for `*`), its labels, and
        for a tenant's token the default scope of what its entry does not list."""
        if self.tenant == ALL_TENANTS:
            return Caller(None, self.agents, self.features)
        return Caller(self.tenant, self.agents, self.features, enforcing_only=self.configs is None, listed_overrides_only=True)

    @classmethod
    def read(cls, entry: Any, where: str) -> TokenScope:
        """A tokens-file value: "<tenant>", or {"tenant": ..., "configs": [...], "agents": [...],
        "features": [...], "hooks": true} (each optional but the tenant; a list given replaces
        the default scope: the token may name what it lists, and nothing else)."""
        if isinstance(entry, str) and entry:
            return cls(entry)
        if not isinstance(entry, dict) or not isinstance(entry.get("tenant"), str) or not entry["tenant"]:
            raise ServeError(f'{where}: a tenant ("<tenant>" or "*"), or an object with "tenant" and optional lists')
        unknown = set(entry) - {"tenant", "configs", "agents", "features", "hooks"}
        if unknown:
            raise ServeError(f"{where}: unknown keys {sorted(unknown)} (tenant, configs, agents, features, hooks)")
        if not isinstance(entry.get("hooks", False), bool):
            raise ServeError(f"{where}: hooks must be true or false")
        lists: dict[str, Any] = {}
        for name in ("configs", "agents", "features"):
            value = entry.get(name)
            if value is not None and not (isinstance(value, list) and all(isinstance(v, str) and v for v in value)):
                raise ServeError(f"{where}: {name} must be a list of names")
            lists[name] = None if value is None else frozenset(value)
        return cls(entry["tenant"], **lists, hooks=entry.get("hooks", False))


class Tokens:
    """Bearer tokens, each with its scope (a tenant or all, `*`; the configs, agents and features
    it may name). Only SHA-256 digests are kept, and a presented token is compared with every
    digest in constant time."""

    def __init__(self, tokens: Mapping[str, str | TokenScope]) -> None:
        if not tokens:
            raise ServeError("no API token given")
        self._digests = [
            (hashlib.sha256(t.encode()).digest(), scope if isinstance(scope, TokenScope) else TokenScope(scope))
            for t, scope in tokens.items()
        ]
        self.count = len(self._digests)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Tokens | None:
        """$AGENT_BREAKER_API_TOKEN (all tenants), $AGENT_BREAKER_HOOK_TOKEN (the hook endpoints
        alone), $AGENT_BREAKER_METRICS_TOKEN and/or $AGENT_BREAKER_API_TOKENS_FILE, a JSON object
        {"<token>": "<tenant>" or "*" or a scope}; None when none is set."""
        tokens: dict[str, str | TokenScope] = {}
        single = environ.get(API_TOKEN_ENV, "")
        if single:
            tokens[_checked_token(single, API_TOKEN_ENV)] = ALL_TENANTS
        hooks = environ.get(HOOK_TOKEN_ENV, "")
        if hooks:
            tokens[_checked_token(hooks, HOOK_TOKEN_ENV)] = TokenScope(ALL_TENANTS, hooks=True)
        scraper = environ.get(METRICS_TOKEN_ENV, "")
        if scraper:
            tokens[_checked_token(scraper, METRICS_TOKEN_ENV)] = TokenScope(ALL_TENANTS, configs=frozenset(), metrics=True)
        path = environ.get(API_TOKENS_FILE_ENV, "")
        if path:
            try:
                data = json.loads(Path(path).read_text(encoding="utf-8"))
            except OSError as exc:
                raise ServeError(f"cannot read ${API_TOKENS_FILE_ENV} ({path}): {exc.strerror}") from None
            except ValueError:
                raise ServeError(f"${API_TOKENS_FILE_ENV} ({path}) is not JSON") from None
            if not isinstance(data, dict):
                raise ServeError(f'${API_TOKENS_FILE_ENV} ({path}) must be a JSON object {{"<token>": "<tenant> or *"}}')
            for i, (token, entry) in enumerate(data.items()):
                where = f"{API_TOKENS_FILE_ENV} entry {i}"
                tokens[_checked_token(token, where)] = TokenScope.read(entry, f"${where}")
        return cls(tokens) if tokens else None

    def scope_of(self, presented: str) -> TokenScope | None:
        """What a presented token may act for; None if it is no token of ours."""
        digest = hashlib.sha256(presented.encode("utf-8", "surrogatepass")).digest()
        found = None
        for known, scope in self._digests:
            if hmac.compare_digest(known, digest):
                found = scope
        return found

    def tenant_of(self, presented: str) -> str | None:
        """The tenant a presented token acts for (`*`: every tenant); None if it is no token of ours."""
        scope = self.scope_of(presented)
        return None if scope is None else scope.tenant


TOKEN_FILE_ENV = "AGENT_BREAKER_TOKEN_FILE"


def token_file(environ: Mapping[str, str] = os.environ) -> Path:
    """Where `serve` keeps the token it generates: $AGENT_BREAKER_TOKEN_FILE, else
    $XDG_STATE_HOME/agent-breaker/api-token (~/.local/state by default)."""
    if environ.get(TOKEN_FILE_ENV):
        return Path(environ[TOKEN_FILE_ENV]).expanduser()
    state = environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "agent-breaker" / "api-token"


def generated_token(path: Path) -> str:
    """The token in `path`, made at first start (owner-only: only who runs the server can read
    it). A file others may read or write, or another user's, is refused: its token may be known."""
    if not os.path.lexists(path):
        # written whole, then linked in: workers starting together all read the one that won
        draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with os.fdopen(os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as out:
                out.write(secrets.token_urlsafe(32) + "\n")
            with contextlib.suppress(FileExistsError):
                os.link(draft, path)
        except OSError as exc:
            raise ServeError(f"cannot create the API token file {path}: {exc.strerror}; set ${API_TOKEN_ENV}") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(draft)
    try:
        st = os.stat(path, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise ServeError(f"the API token file {path} must be a file of this user's that only it may read (chmod 600)")
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ServeError(f"cannot read the API token file {path}: {exc.strerror}") from None
    return _checked_token(token, TOKEN_FILE_ENV)


def _checked_token(token: str, source: str) -> str:
    if len(token) < 16:
        raise ServeError(
            f"${source}: a token needs at least 16 characters "
            "(use `python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
        )
    return token


def admin_token(tokens: Tokens | None, environ: Mapping[str, str] = os.environ) -> Tokens | None:
    """$AGENT_BREAKER_ADMIN_TOKEN, the one token of the breaker admin routes; None (the routes
    are off) when unset. It may not also be an API token: an agent runtime holds those."""
    raw = environ.get(ADMIN_TOKEN_ENV, "")
    if not raw:
        return None
    token = _checked_token(raw, ADMIN_TOKEN_ENV)
    if tokens is not None and tokens.tenant_of(token) is not None:
        raise ServeError(f"${ADMIN_TOKEN_ENV} is also an API token: give the admin routes a token of their own")
    return Tokens({token: ALL_TENANTS})
