"""Storage backends behind one interface, chosen by URI."""

from __future__ import annotations

from urllib.parse import urlparse

from .base import StorageError, Store
from .memory import MemoryStore

__all__ = ["MemoryStore", "StorageError", "Store", "store_from_uri"]


def store_from_uri(uri: str, **kwargs: object) -> Store:
    scheme = urlparse(uri).scheme
    if scheme == "memory":
        return MemoryStore(**kwargs)  # type: ignore[arg-type]
    raise ValueError(f"unsupported store URI {uri!r}: supported schemes are memory://")
