"""The `agent-breaker` command. Imports nothing from NeMo, so it starts fast."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._errors import ConfigError
from ._extras import MissingExtra, no_nemo_usage_stats, require
from .hooks import AGENTS
from .hooks.command import DEFAULT_STATE, STATE_ENV
from .hooks.daemon import DAEMON_ENV

if TYPE_CHECKING:
    from .config import AgentBreakerConfig
    from .escalations import StoreLocation


def _config(path: str | None) -> AgentBreakerConfig:
    """The config at `path`, else the defaults; imported here, as the hook command never needs it."""
    from .config import AgentBreakerConfig, load_config

    return load_config(path) if path else AgentBreakerConfig()


def _incident_lines_to(target: str) -> None:
    """The incident JSON lines, one per line, to stderr (`-`) or a file, and nowhere else."""
    import logging

    handler = logging.StreamHandler(sys.stderr) if target == "-" else logging.FileHandler(target)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("agent_breaker.incidents")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _replay(args: argparse.Namespace) -> int:
    from ._replay import replay_engine, replay_lines

    config = _config(args.config)
    if args.incidents:
        _incident_lines_to(args.incidents)
    engine = replay_engine(config, observe=args.observe, shared_breakers=args.shared_breakers, incidents=bool(args.incidents))
    path = Path(args.trace)
    try:
        # bytes: a line that is not UTF-8 is reported with its number, not fatal
        stream = sys.stdin.buffer if args.trace == "-" else path.open("rb")
    except OSError as exc:
        print(f"agent-breaker: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 2
    with stream:
        results, invalid = replay_lines(stream, engine)
    try:
        for r in results:
            sys.stdout.write(json.dumps(r) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader stopped early (`| head`): not an error of the replay
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if invalid:
        print(f"agent-breaker: {invalid} invalid line(s), see above", file=sys.stderr)
        return 1
    return 0


def _serve(args: argparse.Namespace) -> int:
    require("nemoguardrails", "nemo", "agent-breaker serve")
    no_nemo_usage_stats()
    os.environ.setdefault("NEMO_GUARDRAILS_DISABLE_CHAT_UI", "true")
    from .configs import ROOT

    root = Path(args.config).expanduser().resolve() if args.config else ROOT
    from ._served import read_root

    configs, problems = read_root(root)
    if problems:  # every config that cannot start, at once (building them stops at the first)
        print("\n".join(problems), file=sys.stderr)
        return 2
    if args.workers > 1:
        return _serve_workers(args, root, [name for name, config in configs.items() if config.storage.in_process])
    import uvicorn

    from .server import ServeError

    try:
        app, ids, details = _started_app(root, args.host)
    except (ServeError, ConfigError, ImportError) as exc:
        print(f"agent-breaker: {exc}", file=sys.stderr)
        return 2
    print(f"agent-breaker: serving {', '.join(ids)} on {args.host}:{args.port}; {details}", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, **app.transport.uvicorn_options())
    return 0


def _started_app(root: Path, host: str, *, workers: int = 1) -> tuple[Any, list[str], str]:
    """What `serve` runs in each serving process: tracing, the app on the configs under `root`,
    and the escalation relays; the served config ids, and a line on auth, tracing and relays.
    With several workers a config whose guard state is in this process's memory is refused."""
    from nemoguardrails.telemetry import DeploymentTypeEnum, set_deployment_type

    from ._tracing import export_from_env
    from .escalations import serve_relays, store_location
    from .server import ServeError, build_app
    from .server._transport import raise_fd_limit
    from .store.memory import MemoryStore

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


def _serve_workers(args: argparse.Namespace, root: Path, local: list[str]) -> int:
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

    from .config import config_folders

    served = config_folders(root)
    if local:
        print(f"agent-breaker: {_in_memory_refusal(local, args.workers)}", file=sys.stderr)
        return 2
    loopback = args.host in ("127.0.0.1", "localhost", "::1") or args.host.startswith("127.")
    if not loopback and not (os.environ.get("AGENT_BREAKER_API_TOKEN") or os.environ.get("AGENT_BREAKER_API_TOKENS_FILE")):
        # what each worker's build_app refuses too: checked here so the address is never bound
        print(
            f"agent-breaker: refusing to bind {args.host} without authentication: set $AGENT_BREAKER_API_TOKEN "
            "(or $AGENT_BREAKER_API_TOKENS_FILE), or bind 127.0.0.1",
            file=sys.stderr,
        )
        return 2
    if not hasattr(socket, "SO_REUSEPORT"):
        print("agent-breaker: --workers needs SO_REUSEPORT, which this platform lacks: run one worker", file=sys.stderr)
        return 2
    try:
        reserved = _reserve_port(args.host, args.port)
    except OSError as exc:
        print(f"agent-breaker: cannot bind {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return STARTUP_FAILURE  # as one-process serve (uvicorn) exits for a port in use
    port = reserved.getsockname()[1]
    spec = {
        "root": str(root),
        "host": args.host,
        "port": port,
        "workers": args.workers,
        "log_level": args.log_level,
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
        f"agent-breaker: serving {', '.join(served)} on {args.host}:{port} with {args.workers} worker processes "
        "(guard state in Redis; /metrics answers for the worker that takes the request)",
        file=sys.stderr,
        flush=True,
    )
    workers = [started() for _ in range(args.workers)]
    failed = False
    try:
        while not stop.wait(0.5):
            for i, worker in enumerate(workers):
                if worker.exitcode is None:
                    continue
                if worker.exitcode == STARTUP_FAILURE:
                    failed = True
                    stop.set()
                    break
                print(f"agent-breaker: worker {worker.pid} ended (status {worker.exitcode}); starting another", file=sys.stderr)
                workers[i] = started()
    finally:
        for worker in workers:
            if worker.exitcode is None:
                worker.terminate()  # SIGTERM: uvicorn finishes the requests in flight
        for worker in workers:
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

    from .server import ServeError

    _end_with(spec["supervisor"])
    try:
        app, _ids, details = _started_app(Path(spec["root"]), spec["host"], workers=spec["workers"])
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
    from .configs import ROOT

    keeps = "keeps its" if len(ids) == 1 else "keep their"
    return (
        f"--workers {workers}: config(s) {', '.join(ids)} {keeps} guard state in process memory (storage.url memory://), "
        f"so each of the {workers} workers would have breakers, sessions and budgets of its own. Serve configs whose state "
        f"is in Redis (the shipped one: --config {ROOT / 'agent_breaker_redis'}, with $REDIS_URL), or run one worker"
    )


def _demo(args: argparse.Namespace) -> int:
    require("nemoguardrails", "nemo", "agent-breaker demo (the agents run through the NeMo runtime)")
    from ._demo import format_after, format_table, run_demo
    from .escalations import db_path, default_db_path

    # the demo's escalations go to a file of their own, never to the queue a relay delivers to on-call
    os.environ.setdefault("AGENT_BREAKER_ESCALATIONS_DB", str(default_db_path().with_name("demo-escalations.db")))

    if args.incidents:
        _incident_lines_to("-")
    else:
        import logging

        # the table says what was cut; the incident JSON lines are there with --incidents
        logging.getLogger("agent_breaker.incidents").propagate = False
    rows, after = run_demo()
    if args.json:
        for r in [*rows, *after]:
            print(json.dumps(r))
    else:
        print(format_table(rows))
        print(format_after(after, str(db_path())))
    return 0


def _report(args: argparse.Namespace) -> int:
    from .report import ReportError, build, format_html, format_text, observe, read_legit

    config = _config(args.config) if args.config else None
    name = "<stdin>" if args.input == "-" else args.input
    path = Path(args.input)
    try:
        legit = read_legit(args.legit) if args.legit else None
        stream = sys.stdin.buffer if args.input == "-" else path.open("rb")
    except ReportError as exc:
        print(f"agent-breaker: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"agent-breaker: cannot read {name}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        with stream:
            obs = observe(stream, config=config)
        report = build(obs, source=name, legit=legit, legit_source=args.legit)
    except ReportError as exc:
        print(f"agent-breaker: {name}: {exc}", file=sys.stderr)
        return 2
    if args.html:
        try:
            Path(args.html).write_text(format_html(report, obs), encoding="utf-8")
        except OSError as exc:
            print(f"agent-breaker: cannot write {args.html}: {exc.strerror}", file=sys.stderr)
            return 2
    sys.stdout.write(json.dumps(report) + "\n" if args.json else format_text(report))
    return 0


def _breakers(args: argparse.Namespace) -> int:
    from contextlib import ExitStack

    from ._admin import ADMIN_TOKEN_ENV, DEFAULT_URL, Admin, AdminError, AdminInputError, FleetAdmin, ServerAdmin, fleet_engine
    from ._admin import format_breakers as table
    from .breaker import BreakerStateName
    from .store import StorageError

    fleet = args.redis is not None or args.config is not None or args.prefix is not None
    token = os.environ.get(ADMIN_TOKEN_ENV, "")
    with ExitStack() as stack:
        try:
            admin: Admin
            if fleet and (args.url is not None or args.config_id is not None):
                raise AdminError("--url and --config-id ask a server; --redis and --config a fleet's Redis: not both")
            if fleet:
                config = _config(args.config)
                engine = stack.enter_context(fleet_engine(config, url=args.redis, prefix=args.prefix))
                admin = FleetAdmin(engine, tenant=args.tenant)
            elif not token:
                raise AdminError(f"set ${ADMIN_TOKEN_ENV} to the server's admin token")
            else:
                admin = ServerAdmin(args.url or DEFAULT_URL, token, config_id=args.config_id, tenant=args.tenant)
            rows = admin.breakers() if args.action == "list" else [admin.force(args.tool, BreakerStateName(args.state))]
        except (AdminError, AdminInputError, StorageError) as exc:
            print(f"agent-breaker: {exc}", file=sys.stderr)
            return 2
    if args.json:
        for row in rows:
            print(json.dumps(row))
    elif args.action == "list":
        print(table(rows))
    else:
        print(f"{rows[0]['tool']}: {rows[0]['state']}")
    return 0


def _escalations_where(args: argparse.Namespace) -> StoreLocation:
    """--db or --redis (and --prefix), else the config's `escalations.store`: its Redis, or its
    file ($AGENT_BREAKER_ESCALATIONS_DB or the config's variable, else `escalations.db`, else
    the default file)."""
    from .escalations import store_location

    config = _config(args.config)
    return store_location(config, db=args.db, redis_url=args.redis, prefix=args.prefix)


def _escalations(args: argparse.Namespace) -> int:
    from .escalations import EscalationError, open_store
    from .escalations.operator import format_escalation, format_escalations

    path = _escalations_where(args)
    if isinstance(path, Path) and not path.exists():
        # opening the store would create an empty file: a mistyped --db must not look like an empty queue
        if args.action == "list":
            print(f"agent-breaker: no escalations db at {path} (nothing escalated there yet)", file=sys.stderr)
            return 0
        print(f"agent-breaker: no escalations db at {path} (set --db or $AGENT_BREAKER_ESCALATIONS_DB)", file=sys.stderr)
        return 2
    try:
        store = open_store(path)
        try:
            if args.action == "list":
                rows = store.list(status=args.status, limit=args.limit, tenant=args.tenant)
            elif args.action == "show":
                found = store.get(args.id)
                if found is None:
                    print(f"agent-breaker: no escalation {args.id} in {path}", file=sys.stderr)
                    return 2
                rows = [found]
            else:
                rows = [store.resolve(args.id, args.decision, args.note)]
        finally:
            store.close()
    except EscalationError as exc:
        print(f"agent-breaker: {exc}", file=sys.stderr)
        return 2
    if args.json:
        for row in rows:
            print(json.dumps(row.to_dict()))
    elif args.action == "list":
        print(format_escalations(rows))
    elif args.action == "show":
        print(format_escalation(rows[0]))
    else:
        print(f"{rows[0].id}: {rows[0].status}")
    return 0


def _relay(args: argparse.Namespace) -> int:
    import signal

    from .escalations import EscalationError, Relay, RelayBusy, open_store, targets_for

    config = _config(args.config)
    path = _escalations_where(args)
    targets, closers = targets_for(config)
    if not targets:
        print(
            "agent-breaker: the relay has no target: set $AGENT_BREAKER_QUEUE_URL (RabbitMQ), "
            "$AGENT_BREAKER_INCIDENT_WEBHOOK, or incidents.file / escalations.queue_url in --config",
            file=sys.stderr,
        )
        return 2
    try:
        store = open_store(path)
        relay = Relay(store, targets)
        try:
            if args.once:
                # every pending row, pass after pass, until none is left or a target fails
                while relay.run_once() and not relay.failures:
                    pass
            else:
                print(f"agent-breaker: relaying {path} to {', '.join(targets)} (Ctrl-C stops)", file=sys.stderr, flush=True)
                for sig in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(sig, lambda *_: relay.request_stop())
                relay.run()
            pending = store.pending_count()
        finally:
            relay.close()
            store.close()
            for close in closers:
                close()
    except (EscalationError, RelayBusy) as exc:
        print(f"agent-breaker: {exc}", file=sys.stderr)
        return 2
    failed = f"; last failure: {relay.last_error}" if relay.failures else ""
    where = ", ".join(targets)
    print(f"agent-breaker: relayed {relay.delivered} message(s) to {where}; {pending} pending{failed}", file=sys.stderr)
    return 1 if relay.failures else 0


def _at_least_one(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"a whole number of at least 1, not {text!r}")
    return n


def _hook(args: argparse.Namespace) -> int:
    from .hooks.command import main as hook_main

    return hook_main(
        args.agent, config=args.config, state=args.state, server=args.server, fail=args.fail, daemon=not args.no_daemon
    )


def _hooks(args: argparse.Namespace) -> int:
    from .hooks import settings

    command = _installed_command()
    print(json.dumps(settings(args.agent, server=args.server, fail=args.fail, command=command), indent=2))
    print(
        f"agent-breaker: these settings run {command}; print them again after moving or recreating its environment",
        file=sys.stderr,
    )
    return 0


def _installed_command() -> str:
    """This install's `agent-breaker`, by absolute path: an agent started without this environment
    on its PATH would find no command, a hook error every agent lets the call through on."""
    import shlex
    import sysconfig

    script = Path(sysconfig.get_path("scripts")) / "agent-breaker"
    if script.is_file():
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m agent_breaker"  # a user-scheme or unusual install


HOOK_HELP = "answer one coding agent's hook call (stdin to stdout), state in a SQLite file"


def _hook_arguments(hp: argparse.ArgumentParser) -> None:
    hp.add_argument("agent", choices=AGENTS, help="the agent whose hook input arrives on stdin")
    hp.add_argument(
        "--config", help="config: a NeMo config folder or its config.yml, or the agent_breaker block (default: coding_agent)"
    )
    hp.add_argument("--state", help=f"the store's URL (default: ${STATE_ENV}, else {DEFAULT_STATE})")
    hp.add_argument(
        "--server", metavar="URL", help="ask a running `agent-breaker serve` instead (token: $AGENT_BREAKER_API_TOKEN)"
    )
    hp.add_argument(
        "--fail",
        choices=("open", "closed"),
        default="open",
        help="when the guard cannot decide: let the call go ahead (open, the default) or block it (closed)",
    )
    hp.add_argument(
        "--no-daemon",
        action="store_true",
        help=f"decide in this process only (default: a per-user daemon keeps the guard loaded; also ${DAEMON_ENV}=off)",
    )
    hp.set_defaults(func=_hook)


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["hook"]:
        # runs before every tool call of a coding agent: parse its arguments alone, import nothing more
        hook = argparse.ArgumentParser(prog="agent-breaker hook", description=HOOK_HELP)
        _hook_arguments(hook)
        return _hook(hook.parse_args(args_in[1:]))
    return _main(args_in)


def _version() -> str:
    import platform

    from . import __version__
    from ._about import DISTRIBUTION

    return f"{DISTRIBUTION} {__version__} ({Path(__file__).parent}, Python {platform.python_version()})"


def _main(argv: list[str]) -> int:
    from .breaker.core import SETTABLE_STATES

    parser = argparse.ArgumentParser(
        prog="agent-breaker",
        description="Deterministic guards for AI agents.",
        formatter_class=argparse.RawDescriptionHelpFormatter,  # --version's line as written, never wrapped
    )
    parser.add_argument("--version", action="version", version=_version(), help="the installed version, where, and Python's")
    sub = parser.add_subparsers(dest="command", required=True)
    rp = sub.add_parser("replay", help="replay a JSONL agent trace through the guards; one JSON line per session")
    rp.add_argument("trace", help="trace file (JSONL, shared/spec/traces.md), or - for stdin")
    rp.add_argument("--config", help="config: the agent_breaker block, a NeMo config.yml holding it, or its folder")
    rp.add_argument("--observe", action="store_true", help="block nothing; report would-trip decisions")
    rp.add_argument(
        "--shared-breakers",
        action="store_true",
        help="share tool breakers across sessions (only when every session's ts is on one clock)",
    )
    rp.add_argument("--incidents", metavar="FILE", help="write incident JSON lines to FILE (- for stderr)")
    rp.set_defaults(func=_replay)
    sp = sub.add_parser("serve", help="run `nemoguardrails server` on the shipped configs, bound to loopback")
    sp.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    sp.add_argument("--port", type=int, default=8000)
    sp.add_argument("--config", help="a config folder, or a folder of config folders (default: the shipped ones)")
    sp.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    sp.add_argument(
        "--workers",
        type=_at_least_one,
        default=1,
        metavar="N",
        help="worker processes on one port (default 1); above 1 every served config must keep its state in Redis",
    )
    sp.set_defaults(func=_serve)
    dp = sub.add_parser("demo", help="run four scripted agents offline through the guards and show what was cut")
    dp.add_argument("--json", action="store_true", help="one JSON line per agent instead of the table")
    dp.add_argument("--incidents", action="store_true", help="also print each incident's JSON line (stderr)")
    dp.set_defaults(func=_demo)
    rep = sub.add_parser("report", help="what the guards did or would have done: trips, spend stopped, counters, thresholds")
    rep.add_argument("input", help="a trace (JSONL, replayed in observe mode) or an incidents file (JSONL), or - for stdin")
    rep.add_argument("--config", help="config to replay a trace with (the agent_breaker block, a NeMo config.yml, or its folder)")
    rep.add_argument("--legit", metavar="FILE", help="legitimate session ids, one per line (or label lines): suggest thresholds")
    rep.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page with plots to FILE")
    rep.add_argument("--json", action="store_true", help="one JSON object instead of the text")
    rep.set_defaults(func=_report)
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--url", help="the server's address (default http://127.0.0.1:8000; token: $AGENT_BREAKER_ADMIN_TOKEN)")
    where.add_argument("--config-id", help="the server's config (needed when it serves several)")
    where.add_argument(
        "--redis",
        metavar="URL",
        help="a fleet's Redis instead of a server (redis://host:6379/0; a cluster: redis+cluster://host:port)",
    )
    where.add_argument("--prefix", help="the fleet's key prefix (default: the config's storage.key_prefix, ab)")
    where.add_argument(
        "--config", help="config (file or NeMo folder) whose storage settings name the fleet's Redis (and breaker settings)"
    )
    where.add_argument("--tenant", help="breakers keyed by this tenant (list: only theirs)")
    where.add_argument("--json", action="store_true", help="one JSON line per breaker")
    bp = sub.add_parser("breakers", help="list tool breakers, or force one, on a server or a fleet's Redis")
    bsub = bp.add_subparsers(dest="action", required=True)
    bsub.add_parser("list", parents=[where], help="every breaker: state, failures, open until")
    fp = bsub.add_parser("force", parents=[where], help="force open, reset closed, disable or meter a tool's breaker")
    fp.add_argument("tool")
    fp.add_argument("state", choices=SETTABLE_STATES)
    bp.set_defaults(func=_breakers)
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument("--db", help="the SQLite file (default: $AGENT_BREAKER_ESCALATIONS_DB, else ~/.local/state/agent-breaker/)")
    db.add_argument(
        "--redis",
        metavar="URL",
        help="a fleet's Redis instead of the file (redis://host:6379/0; a cluster: redis+cluster://host:port)",
    )
    db.add_argument("--prefix", help="the fleet's key prefix (default: the config's storage.key_prefix, ab)")
    db.add_argument("--config", help="config (file or NeMo folder) whose escalations (and incidents) settings to use")
    ep = sub.add_parser("escalations", help="sessions frozen for a human: list, show, resolve (resume or abort)")
    esub = ep.add_subparsers(dest="action", required=True)
    el = esub.add_parser("list", parents=[db], help="the newest escalations first")
    el.add_argument("--status", choices=["open", "resumed", "aborted"], help="only escalations in this status")
    el.add_argument("--tenant", help="only this tenant's escalations")
    el.add_argument("--limit", type=int, default=100, help="at most this many (1 to 1000; default 100)")
    el.add_argument("--json", action="store_true", help="one JSON line per escalation")
    es = esub.add_parser("show", parents=[db], help="one escalation, every field")
    es.add_argument("id")
    es.add_argument("--json", action="store_true", help="the escalation as one JSON line")
    er = esub.add_parser("resolve", parents=[db], help="resume the session (lift the freeze) or abort it (keep it closed)")
    er.add_argument("id")
    er.add_argument("--decision", required=True, choices=["resume", "abort"])
    er.add_argument("--note", help="why, for the record (at most 2000 characters)")
    er.add_argument("--json", action="store_true", help="the resolved escalation as one JSON line")
    ep.set_defaults(func=_escalations)
    relay = sub.add_parser("relay", parents=[db], help="deliver the escalation outbox to RabbitMQ and the incident sinks")
    relay.add_argument("--once", action="store_true", help="deliver what is pending, then exit (1 if a target failed)")
    relay.set_defaults(func=_relay)
    _hook_arguments(sub.add_parser("hook", help=HOOK_HELP))
    hsp = sub.add_parser("hooks", help="set up coding agents' hooks")
    hsub = hsp.add_subparsers(dest="hooks_command", required=True)
    pc = hsub.add_parser("print-config", help="print the hooks settings that send an agent's tool calls to the guard")
    pc.add_argument("agent", choices=AGENTS)
    pc.add_argument("--server", metavar="URL", help="a running `agent-breaker serve` (Claude Code: an HTTP hook to it)")
    pc.add_argument("--fail", choices=("open", "closed"), default="open", help="when the guard cannot decide (default open)")
    hsp.set_defaults(func=_hooks)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)  # each subcommand's handler returns its exit code
        return code
    except (ConfigError, MissingExtra) as exc:
        print(f"agent-breaker: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
