"""The Colang/NeMo runtime: the configs, each built once at start-up (one engine each), the one
thread every Colang step runs on, and a small pool of live Colang states per config. The states
hold ids only: an event's payload stays in a table that lives for the request."""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from nemoguardrails import LLMRails, RailsConfig
from nemoguardrails.context import llm_stats_var
from nemoguardrails.logging.stats import LLMStats

from .._byref import PAYLOAD_REF, PAYLOADS, ROUTE_ARGS
from .._context_events import merge_context_messages
from .._extras import MissingExtra
from ..config import ConfigError, config_folders
from ..configs import ROOT as SHIPPED
from ..dispatch import ENGINE_PARAM
from ..engine import Engine
from ..protocol import VERDICT_TYPES
from ._errors import ServeError
from ._logging import log
from ._paths import DEFAULT_CONFIG_ID

POOL_SIZE = 8  # live Colang states per config: its events in flight at once
# fields the Colang runtime sees of an event; the rest stays in PAYLOADS for the request
_COLANG_FIELDS = ("type", "session_id", "call_id", "tool_name", "tenant")
_NOISE = ("uid", "event_created_at", "source_uid")


class ColangThread:
    """One thread with its own event loop runs every Colang step of the server.

    NeMo's runtime awaits a 1 ms sleep after each internal step and holds a process-wide
    semaphore across them: on the HTTP loop, every request that arrives meanwhile (a flood of
    refused ones included) ran between those steps, and each event took as many turns of
    other work as it has steps. On a loop of its own the guard's steps wait for nothing but the
    interpreter lock, while the HTTP loop parses, checks and refuses requests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="agent-breaker-colang", daemon=True)
        self._thread.start()

    async def run(self, step: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        """Await `step()` on the Colang loop. The caller's context goes with it:
        `run_coroutine_threadsafe` schedules the task in a copy of this context, so the
        request's caller (`dispatch.CALLER`) is the one the actions read."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(step(), self.loop))


# nemoguardrails ships no type information (no py.typed): LLMRails is Any to mypy, which only
# --strict refuses to subclass (hence unused-ignore for the default run)
class ServedRails(LLMRails):  # type: ignore[misc]
    """A config's rails as the server runs them: on the Colang thread, and with every context
    message's agent-breaker events read (NeMo turns each context message into its own event,
    and a guard loop busy with the first would miss the others)."""

    colang: ColangThread | None = None

    async def generate_async(self, *args: Any, messages: list[dict[str, Any]] | None = None, **kwargs: Any) -> Any:
        merged = merge_context_messages(messages)
        generate = super().generate_async
        if self.colang is None:
            return await generate(*args, messages=merged, **kwargs)
        return await self.colang.run(lambda: generate(*args, messages=merged, **kwargs))

    async def process_events_async(
        self, events: list[dict[str, Any]], state: Any = None, blocking: bool = False
    ) -> tuple[list[dict[str, Any]], Any]:
        """NeMo's own runs one call at a time per process (a module-wide semaphore its authors
        question in a TODO): a decision awaiting a slow Redis stalled every other session's,
        of every config. Each call here has a state of its own (ColangPool), and the runtime
        keeps states apart (its pending actions are keyed by the state's main flow), so the
        calls interleave wherever an action awaits."""
        llm_stats_var.set(LLMStats())  # as NeMo's own: a flow that calls a model counts there
        processed: tuple[list[dict[str, Any]], Any] = await self.runtime.process_events(events, state, blocking)
        return processed


class ServedConfigs:
    """The configs a server answers for, each built once at start-up (one engine each)."""

    def __init__(self, root: Path) -> None:
        root = root.expanduser().resolve()
        try:
            folders = config_folders(root)
        except ConfigError as exc:
            raise ServeError(str(exc)) from None
        self.root = root
        self.rails: dict[str, Any] = {}
        self.engines: dict[str, Engine] = {}
        self.takes_events: dict[str, bool] = {}
        self.has_model: dict[str, bool] = {}
        for name, folder in folders.items():
            try:
                config = RailsConfig.from_path(str(folder))
                self.rails[name] = ServedRails(config, verbose=False)
            except Exception as exc:  # NeMo wraps ours, and its own come in many types
                missing = _cause(exc, MissingExtra)
                if missing is not None and root == SHIPPED.resolve():
                    # a light install serves the shipped configs it can (the Redis one needs [redis]);
                    # a root of the user's own is served whole or not at all
                    log.warning("agent-breaker: config %s is not served: %s", name, missing)
                    continue
                cause = _cause(exc, (ConfigError, MissingExtra))
                if cause is not None:
                    raise ServeError(f"config {name}: {cause}") from None
                raise ServeError(f"config {name} does not load: {type(exc).__name__}: {_first_line(exc)}") from None
            # the server's own registry: taken once from the engine the config's `init` built
            self.engines[name] = self.rails[name].runtime.registered_action_params[ENGINE_PARAM]
            self.takes_events[name] = config.colang_version != "1.0"
            self.has_model[name] = any(m.type == "main" for m in config.models)
        if not self.rails:
            raise ServeError(f"no config of {root} can be served with the extras installed, see above")

    @property
    def ids(self) -> list[str]:
        return sorted(self.rails)

    def resolve(self, config_id: str | None) -> str:
        """The config a request is for: the one it names, else the only one served, else
        agent_breaker."""
        if config_id is not None:
            return config_id
        return self.ids[0] if len(self.rails) == 1 else DEFAULT_CONFIG_ID

    def get(self, config_id: str) -> Any:
        rails = self.rails.get(config_id)
        if rails is None:
            raise LookupError(f"unknown config id; this server serves {self.ids}")
        return rails

    def engine(self, config_id: str | None) -> tuple[str, Engine]:
        """A config's id and engine; the id may be left out when the server serves one config
        (ValueError otherwise; LookupError for an unknown one)."""
        if config_id is None:
            if len(self.rails) != 1:
                raise ValueError(f"config_id is required: this server serves {self.ids}")
            config_id = self.ids[0]
        self.get(config_id)  # an unknown one: the LookupError naming the served ones
        return config_id, self.engines[config_id]


def _cause(exc: BaseException, types: type[BaseException] | tuple[type[BaseException], ...]) -> BaseException | None:
    """Our own error, if NeMo wrapped one (it reports `init(app)` failing, not why)."""
    seen: BaseException | None = exc
    for _ in range(16):
        if seen is None or isinstance(seen, types):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]


class ColangPool:
    """A few live Colang states per config, shared by every session. The guard flows keep no
    per-session state (the engine does), so any free state serves any event: memory stays
    at POOL_SIZE states per config however many sessions there are, and each state holds
    ids only (the payload stays in PAYLOADS for the request)."""

    def __init__(self, size: int = POOL_SIZE) -> None:
        self.size = size
        self._free: dict[str, asyncio.Queue[Any]] = {}

    def _queue(self, config_id: str) -> asyncio.Queue[Any]:
        queue = self._free.get(config_id)
        if queue is None:
            queue = self._free[config_id] = asyncio.Queue()
            for _ in range(self.size):
                queue.put_nowait(None)  # NeMo starts a state on its first event
        return queue

    async def process(self, rails: Any, config_id: str, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        queue = self._queue(config_id)
        state = await queue.get()
        verdicts: list[dict[str, Any]] = []
        try:
            # one event per call: a guard loop awaiting its action would miss the next event
            # of a batch (Colang 2.x flows have no inbox)
            for event in events:
                ref = secrets.token_hex(16)
                PAYLOADS[ref] = event
                try:
                    colang_event = {k: event[k] for k in _COLANG_FIELDS if event.get(k) is not None}
                    colang_event[PAYLOAD_REF] = ref
                    out, state = await rails.process_events_async([colang_event], state)
                finally:
                    PAYLOADS.pop(ref, None)
                    route_args = ROUTE_ARGS.pop(ref, None)
                for e in out:
                    if e.get("type") in VERDICT_TYPES:
                        verdict = {k: v for k, v in e.items() if k not in _NOISE}
                        if route_args is not None and verdict.get("route"):
                            verdict["route"] = {**verdict["route"], "args": route_args}
                        verdicts.append(verdict)
        except BaseException:
            state = None  # a state an event broke is not reused
            raise
        finally:
            queue.put_nowait(state)
        return verdicts

    def states(self) -> list[Any]:
        """The live states (tests: they must hold no payload)."""
        return [s for q in self._free.values() for s in list(q._queue) if s is not None]  # type: ignore[attr-defined]  # the queue's deque is private
