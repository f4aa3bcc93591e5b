"""Running `agent-breaker serve`: one serving process, or a supervisor of N worker processes
on one port (SO_REUSEPORT), each building the app as one process does."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from pathlib import Path
from typing import Any

from .._errors import ConfigError


def serve(root: Path, *, host: str, port: int, workers: int, log_level: str, local: list[str]) -> int:
    """Serve the configs under `root` (checked already) until stopped; the exit status.
    `local`: the configs whose guard state would be in each process's memory."""
    if workers > 1:
        return _serve_workers(root, host=host, port=port, workers=workers, log_level=log_level, local=local)
    import uvicorn

    from ._errors import ServeError

    try:
        app, ids, details = started_app(root, host)
    except (ServeError, ConfigError, ImportError) as exc:
        print(f"agent-breaker: {exc}", file=sys.stderr)
        return 2
    print(f"agent-breaker: serving {', '.join(ids)} on {host}:{port}; {details}", file=sys.stderr, flush=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level, **app.transport.uvicorn_options())
    return 0


def started_app(root: Path, host: str, *, workers: int = 1) -> tuple[Any, list[str], str]:
    """What `serve` runs in each serving process: tracing, the app on the configs under `root`,
    and the escalation relays; the served config ids, and a line on auth, tracing and relays.
    With several workers a config whose guard state is in this process's memory is refused."""
    from nemoguardrails.telemetry import DeploymentTypeEnum, set_deployment_type

    from .._tracing import export_from_env
    from ..escalations import serve_relays, store_location
    from ..store.memory import MemoryStore
    from ._app import build_app
    from ._errors import ServeError
    from ._transport import raise_fd_limit

    set_deployment_type(DeploymentTypeEnum.API.value)
    fds = raise_fd_limit()
    tracing = export_from_env()  # before the engines are built: they take the provider then
    app = build_app(root, host=host)
    configs = app.app.state.agent_breaker_configs
    if workers > 1:
        local = [i for i in configs.ids if isinstance(configs.engine(i)[1].store, MemoryStore)]
        if local:
            raise ServeError(_in_memory_refusal(local, workers))
    auth = (
        f"bearer token required: it is in {app.token_file} (set $AGENT_BREAKER_API_TOKEN to choose one)"
        if app.token_file is not None
        else f"bearer tokens required ({app.tokens.count} configured)"
    )
    # the escalation outbox reaches its targets from here too (`agent-breaker relay` is the same)
    relays = serve_relays(configs.engine(config_id)[1].config for config_id in configs.ids)
    traced = "; spans exported over OTLP" if tracing else ""
    relayed = f"; {len(relays)} escalation relay(s)" if relays else ""
    # where the server writes: a newcomer should not find it by searching their disk
    queues = sorted({str(store_location(configs.engine(config_id)[1].config)) for config_id in configs.ids})
    written = f"; escalations in {', '.join(queues)}"
    limits = f"; at most {app.transport.max_connections} connections ({fds} file descriptors)"
    # NeMo's and its libraries' objects live as long as the server: out of the collector's
    # reach. The sessions an in-process store holds are long-lived too, and with CPython's
    # default thresholds a full collection scanned them every few seconds under load, 75 to
    # 160 ms each with nothing to free; with these, collections are rarer and pauses under 10 ms
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    return app, configs.ids, f"{auth}{written}{traced}{relayed}{limits}"


# ----------------------------------------------------------------------------- serve --workers N

STARTUP_FAILURE = 3  # uvicorn's exit status for a server that could not start
#: the serving process's collector thresholds (CPython's defaults: 700, 10, 10)
GC_THRESHOLDS = (10_000, 50, 100)


def _serve_workers(root: Path, *, host: str, port: int, workers: int, log_level: str, local: list[str]) -> int:
    """N worker processes on one port. Each builds the app from `root` (as one-process `serve`
    does: tracing, the configs, escalation relays), then listens on a socket of its own bound
    with SO_REUSEPORT, so the kernel spreads new connections over the workers that listen; the
    CLI process supervises them. Guard state must be shared: a config whose state would be in
    each worker's memory (`local`) is refused (exit 2) before anything is bound, and again by each worker
    from the engines it built. A worker that cannot start stops them all (exit 2); one that dies
    later is replaced. SIGTERM or SIGINT stops them all."""
    import multiprocessing
    import signal
    import socket
    import threading

    from ..config import config_folders

    served = config_folders(root)
    if local:
        print(f"agent-breaker: {_in_memory_refusal(local, workers)}", file=sys.stderr)
        return 2
    loopback = host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")
    if not loopback and not (os.environ.get("AGENT_BREAKER_API_TOKEN") or os.environ.get("AGENT_BREAKER_API_TOKENS_FILE")):
        # what each worker's build_app refuses too: checked here so the address is never bound
        print(
            f"agent-breaker: refusing to bind {host} without authentication: set $AGENT_BREAKER_API_TOKEN "
            "(or $AGENT_BREAKER_API_TOKENS_FILE), or bind 127.0.0.1",
            file=sys.stderr,
        )
        return 2
    if not hasattr(socket, "SO_REUSEPORT"):
        print("agent-breaker: --workers needs SO_REUSEPORT, which this platform lacks: run one worker", file=sys.stderr)
        return 2
    try:
        reserved = _reserve_port(host, port)
    except OSError as exc:
        print(f"agent-breaker: cannot bind {host}:{port}: {exc.strerror}", file=sys.stderr)
        return STARTUP_FAILURE  # as one-process serve (uvicorn) exits for a port in use
    port = reserved.getsockname()[1]
    spec = {
        "root": str(root),
        "host": host,
        "port": port,
        "workers": workers,
        "log_level": log_level,
        "supervisor": os.getpid(),
    }
    stop = threading.Event()
    handlers = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    spawn = multiprocessing.get_context("spawn")

    def started() -> multiprocessing.process.BaseProcess:
        worker = spawn.Process(target=_worker_main, args=(spec,), name="agent-breaker-worker")
        worker.start()
        return worker

    print(
        f"agent-breaker: serving {', '.join(served)} on {host}:{port} with {workers} worker processes "
        "(guard state in Redis; /metrics answers for the worker that takes the request)",
        file=sys.stderr,
        flush=True,
    )
    running = [started() for _ in range(workers)]
    failed = False
    try:
        while not stop.wait(0.5):
            for i, worker in enumerate(running):
                if worker.exitcode is None:
                    continue
                if worker.exitcode == STARTUP_FAILURE:
                    failed = True
                    stop.set()
                    break
                print(f"agent-breaker: worker {worker.pid} ended (status {worker.exitcode}); starting another", file=sys.stderr)
                running[i] = started()
    finally:
        for worker in running:
            if worker.exitcode is None:
                worker.terminate()  # SIGTERM: uvicorn finishes the requests in flight
        for worker in running:
            worker.join(30)
            if worker.exitcode is None:
                worker.kill()
                worker.join()
        reserved.close()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    if failed:
        print("agent-breaker: a worker could not start (see above): stopped", file=sys.stderr)
        return 2
    return 0


def _reserve_port(host: str, port: int) -> Any:
    """A socket bound to host:port with SO_REUSEPORT and not listening (it takes no connection),
    held by the supervisor so the port stays ours while workers come and go; first the port is
    bound without SO_REUSEPORT, which fails if anything listens there (another server with
    workers included)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
        port = probe.getsockname()[1]  # port 0: the one the kernel picked
    return _reuse_port_socket(host, port)


def _reuse_port_socket(host: str, port: int) -> Any:
    import socket

    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY on the connections of a socket of
    # that protocol only, and without it every answer waited for the client's delayed ACK (40 ms)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _worker_main(spec: dict[str, Any]) -> None:
    """One worker process of `serve --workers N`: the app, tracing and escalation relays as
    one-process `serve` builds them, then uvicorn on a socket of its own (SO_REUSEPORT): it
    joins the port's listeners only once the app is built. A config error, or a config whose
    guard state is in memory, ends it with STARTUP_FAILURE, which stops the supervisor."""
    import uvicorn

    from ._errors import ServeError

    _end_with(spec["supervisor"])
    try:
        app, _ids, details = started_app(Path(spec["root"]), spec["host"], workers=spec["workers"])
        sock = _reuse_port_socket(spec["host"], spec["port"])  # asyncio listens on it when uvicorn starts serving
    except (ServeError, ConfigError, ImportError, OSError) as exc:
        print(f"agent-breaker: worker {os.getpid()}: {exc}", file=sys.stderr, flush=True)
        sys.exit(STARTUP_FAILURE)
    print(f"agent-breaker: worker {os.getpid()}: {details}", file=sys.stderr, flush=True)
    config = uvicorn.Config(
        app, host=spec["host"], port=spec["port"], log_level=spec["log_level"], **app.transport.uvicorn_options()
    )
    uvicorn.Server(config).run(sockets=[sock])


def _end_with(supervisor: int) -> None:
    """On Linux a worker gets SIGTERM when its supervisor dies, even of SIGKILL, so no worker is
    left serving the port (elsewhere the supervisor's own SIGTERM on a normal stop is all)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != supervisor:  # it died before the line above
        sys.exit(0)


def _in_memory_refusal(ids: list[str], workers: int) -> str:
    from ..configs import ROOT

    keeps = "keeps its" if len(ids) == 1 else "keep their"
    return (
        f"--workers {workers}: config(s) {', '.join(ids)} {keeps} guard state in process memory (storage.url memory://), "
        f"so each of the {workers} workers would have breakers, sessions and budgets of its own. Serve configs whose state "
        f"is in Redis (the shipped one: --config {ROOT / 'agent_breaker_redis'}, with $REDIS_URL), or run one worker"
    )
