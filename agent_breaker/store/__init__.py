"""Storage backends behind one interface, chosen by URI."""

from __future__ import annotations

from urllib.parse import urlparse

from .._extras import require
from ..config import DEFAULT_SESSION_TTL_S, REDIS_SCHEMES, REDIS_URLS_TEXT, SQLITE_SCHEME
from .base import CorruptState, StorageError, Store
from .memory import MemoryStore

__all__ = ["CorruptState", "MemoryStore", "StorageError", "Store", "store_from_uri"]

_IN_PROCESS_ONLY = ("max_sessions_per_tenant",)
_MEMORY_OPTIONS = ("ttl_s", "max_sessions", "max_bytes", *_IN_PROCESS_ONLY)


def store_from_uri(uri: str, **kwargs: object) -> Store:
    """memory:// (in process), sqlite:///path/to/file.db (one file, shared by the processes of
    one machine), or a Redis (shared): redis://host:port/db, rediss://, unix://, or a Redis
    Cluster's redis+cluster://host:port, rediss+cluster://."""
    scheme = urlparse(uri).scheme
    if scheme == "memory":
        return MemoryStore(**{k: v for k, v in kwargs.items() if k in _MEMORY_OPTIONS})  # type: ignore[arg-type]
    if scheme == SQLITE_SCHEME:
        from .sqlite import SQLiteStore

        return SQLiteStore(uri, ttl_s=float(kwargs.get("ttl_s", DEFAULT_SESSION_TTL_S)))  # type: ignore[arg-type]
    if scheme in REDIS_SCHEMES:
        require("redis", "redis", f"storage.url {scheme}://")
        from .redis import RedisStore

        # Redis holds the sessions (its own memory policy and each key's TTL bound them); the
        # worker's mirror and outage state stay within max_bytes
        return RedisStore(uri, **{k: v for k, v in kwargs.items() if k not in _IN_PROCESS_ONLY})  # type: ignore[arg-type]
    # no part of the URI in the message: without a known scheme it may still hold a password
    raise ValueError(f"unsupported store URI: supported schemes are memory://, sqlite:///, {REDIS_URLS_TEXT}")
