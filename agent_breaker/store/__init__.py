"""Storage backends behind one interface, chosen by URI."""

from __future__ import annotations

from urllib.parse import urlparse

from .._extras import require
from ..config import REDIS_SCHEMES, REDIS_URLS_TEXT
from .base import CorruptState, StorageError, Store
from .memory import MemoryStore

__all__ = ["CorruptState", "MemoryStore", "StorageError", "Store", "store_from_uri"]


def store_from_uri(uri: str, **kwargs: object) -> Store:
    """memory:// (in process), or a Redis (shared): redis://host:port/db, rediss://, unix://, or a
    Redis Cluster's redis+cluster://host:port, rediss+cluster://."""
    scheme = urlparse(uri).scheme
    if scheme == "memory":
        return MemoryStore(**{k: v for k, v in kwargs.items() if k in ("ttl_s", "max_sessions")})  # type: ignore[arg-type]
    if scheme in REDIS_SCHEMES:
        require("redis", "redis", f"storage.url {scheme}://")
        from .redis import RedisStore

        return RedisStore(uri, **kwargs)  # type: ignore[arg-type]
    # no part of the URI in the message: without a known scheme it may still hold a password
    raise ValueError(f"unsupported store URI: supported schemes are memory://, {REDIS_URLS_TEXT}")
