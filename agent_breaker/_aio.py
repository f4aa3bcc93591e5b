"""The engine from async code."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from .engine import Engine

R = TypeVar("R")


async def without_blocking(engine: Engine, fn: Callable[..., R], *args: Any) -> R:
    """`fn(*args)` for `engine` without blocking the event loop: a store that talks to a server
    (Redis) is waited on from a worker thread; the in-process store decides in microseconds, inline."""
    if engine.store.remote:
        return await asyncio.to_thread(fn, *args)
    return fn(*args)
