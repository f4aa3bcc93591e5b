"""The `agent-breaker` command. Imports nothing from NeMo, so it starts fast."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ._errors import ConfigError
from ._extras import MissingExtra, no_nemo_usage_stats, require
from .hooks import AGENTS
from .hooks.command import DEFAULT_STATE, STATE_ENV
from .hooks.daemon import DAEMON_ENV

if TYPE_CHECKING:
    from .config import AgentBreakerConfig
    from .escalations import StoreLocation


def _config(path: str | None) -> AgentBreakerConfig:
    """The config at `path`, else the defaults, with what this process's environment supplies;
    imported here, as the hook command never needs it."""
    from .config import load_config, parse_config

    return load_config(path) if path else parse_config(None)


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
    from .server import serve

    local = [name for name, config in configs.items() if config.storage.in_process]
    return serve(root, host=args.host, port=args.port, workers=args.workers, log_level=args.log_level, local=local)


def _demo(args: argparse.Namespace) -> int:
    require("nemoguardrails", "nemo", "agent-breaker demo (the agents run through the NeMo runtime)")
    from ._demo import format_after, format_table, run_demo
    from .config import ESCALATIONS_DB_ENV, default_db_path

    # the demo's escalations go to a file of their own, never to the queue a relay delivers to
    # on-call (its config, read at NeMo's init, takes the file from this variable)
    demo_db = os.environ.setdefault(ESCALATIONS_DB_ENV, str(default_db_path(os.environ).with_name("demo-escalations.db")))

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
        print(format_after(after, str(Path(demo_db).expanduser().resolve())))
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


def _hooks_status(args: argparse.Namespace) -> int:
    from .hooks.daemon import running, runtime_dir

    alive, stale = running()
    print(f"hook daemons in {runtime_dir()}: {len(alive)} running" + (f"; {stale} stale removed" if stale else ""))
    for d in alive:
        print(f"  pid {d.pid}  socket {d.socket}  log {d.log}")
    return 0


def _hooks_trust(args: argparse.Namespace) -> int:
    from .hooks import codex_trust, settings

    home = os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex")
    hooks_file = os.path.abspath(os.path.expanduser(args.hooks_file or os.path.join(home, "hooks.json")))
    print(codex_trust(settings(args.agent, server=args.server, fail=args.fail, command=_installed_command()), hooks_file))
    print(
        f"agent-breaker: append these lines to {os.path.join(home, 'config.toml')}: Codex runs no hook it has not trusted",
        file=sys.stderr,
    )
    return 0


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
    pc.set_defaults(func=_hooks)
    tr = hsub.add_parser(
        "trust", help="print the Codex config.toml lines that trust the hooks print-config prints (Codex runs no other)"
    )
    tr.add_argument("agent", choices=("codex",))
    tr.add_argument("--server", metavar="URL", help="as given to print-config")
    tr.add_argument("--fail", choices=("open", "closed"), default="open", help="as given to print-config")
    tr.add_argument(
        "--hooks-file", metavar="PATH", help="where the hooks are (default: $CODEX_HOME/hooks.json, ~/.codex/hooks.json)"
    )
    tr.set_defaults(func=_hooks_trust)
    st = hsub.add_parser("status", help="list the running hook daemons (their sockets and logs); remove stale ones' files")
    st.set_defaults(func=_hooks_status)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)  # each subcommand's handler returns its exit code
        return code
    except (ConfigError, MissingExtra) as exc:
        print(f"agent-breaker: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
