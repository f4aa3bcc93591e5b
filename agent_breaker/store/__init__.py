"""Storage backends behind one interface, chosen by URI."""

from __future__ import annotations

from urllib.parse import urlparse

from .._extras import require
from .base import StorageError, Store
from .memory import MemoryStore

__all__ = ["MemoryStore", "StorageError", "Store", "store_from_uri"]


def store_from_uri(uri: str, **kwargs: object) -> Store:
    """memory:// (in process) or redis://host:port/db, rediss://, unix:// (shared)."""
    scheme = urlparse(uri).scheme
    if scheme == "memory":
        return MemoryStore(**{k: v for k, v in kwargs.items() if k in ("ttl_s", "max_sessions")})  # type: ignore[arg-type]
    if scheme in ("redis", "rediss", "unix"):
        require("redis", "redis", f"storage.url {scheme}://")
        from .redis import RedisStore

        return RedisStore(uri, **kwargs)  # type: ignore[arg-type]
    raise ValueError(f"unsupported store URI {uri!r}: supported schemes are memory://, redis://, rediss://, unix://")
