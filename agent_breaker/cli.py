"""The `agent-breaker` command. Imports nothing from NeMo, so it starts fast."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from .config import AgentBreakerConfig, ConfigError, load_config


def _replay(args: argparse.Namespace) -> int:
    from .replay import replay_engine, replay_lines

    config = load_config(args.config) if args.config else AgentBreakerConfig()
    if args.incidents:
        handler = logging.StreamHandler(sys.stderr) if args.incidents == "-" else logging.FileHandler(args.incidents)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger = logging.getLogger("agent_breaker.incidents")
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
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
    os.environ.setdefault("NEMO_GUARDRAILS_DISABLE_CHAT_UI", "true")
    import uvicorn
    from nemoguardrails.telemetry import DeploymentTypeEnum, set_deployment_type

    from .configs import ROOT
    from .server import ServeError, build_app

    root = Path(args.config).expanduser().resolve() if args.config else ROOT
    set_deployment_type(DeploymentTypeEnum.API.value)
    try:
        app = build_app(root, host=args.host)
    except (ServeError, ConfigError) as exc:
        print(f"agent-breaker: {exc}", file=sys.stderr)
        return 2
    configs = app.app.state.agent_breaker_configs
    auth = (
        f"bearer tokens required ({app.tokens.count} configured)"
        if app.tokens is not None
        else "no authentication: loopback only (set $AGENT_BREAKER_API_TOKEN to bind another address)"
    )
    print(f"agent-breaker: serving {', '.join(configs.ids)} on {args.host}:{args.port}; {auth}", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from .demo import format_table, run_demo

    if not args.incidents:
        # the table says what was cut; the incident JSON lines are there with --incidents
        logging.getLogger("agent_breaker.incidents").addHandler(logging.NullHandler())
        logging.getLogger("agent_breaker.incidents").propagate = False
    rows = run_demo()
    if args.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print(format_table(rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agent-breaker", description="Deterministic guards for AI agents.")
    sub = parser.add_subparsers(dest="command", required=True)
    rp = sub.add_parser("replay", help="replay a JSONL agent trace through the guards; one JSON line per session")
    rp.add_argument("trace", help="trace file (JSONL, shared/spec/traces.md), or - for stdin")
    rp.add_argument("--config", help="YAML config: the agent_breaker block, or a NeMo config.yml holding it")
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
    sp.set_defaults(func=_serve)
    dp = sub.add_parser("demo", help="run four scripted agents offline through the guards and show what was cut")
    dp.add_argument("--json", action="store_true", help="one JSON line per agent instead of the table")
    dp.add_argument("--incidents", action="store_true", help="also print each incident's JSON line (stderr)")
    dp.set_defaults(func=_demo)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"agent-breaker: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
