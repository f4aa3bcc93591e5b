"""`agent-breaker` and `python -m agent_breaker`: the command, or one line saying that the install
is broken.

Standard library only, so that it still runs when a module of ours or a dependency is missing
from the install. Such an install must never pass for a guard that decided "let it through": a
coding agent's hook then says so on stderr and exits 1 (the agent shows a hook error and goes on),
or 2 under `--fail closed` (the call is blocked).
"""

from __future__ import annotations

import os
import sys

from ._about import DISTRIBUTION

TYPE_CHECKING = False  # typing costs milliseconds a hook call feels (see `_hook_client`)
if TYPE_CHECKING:
    from typing import TextIO

#: a hook's exit code for "blocked, the reason is on stderr": `hooks.BLOCK_EXIT`, not imported
#: from there because this module must run when the rest of the package cannot
BLOCK_EXIT = 2


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        if args[:1] == ["hook"]:
            # runs before every tool call of a coding agent: the daemon answers, nothing imported
            from ._hook_client import main as hook_main

            code = hook_main(args, _hook_in_full)
            if code is not None:
                return code
        from .cli import main as cli_main
    except ImportError as exc:
        return broken_install(exc, args, sys.stderr)
    try:
        return cli_main(args)
    except ImportError as exc:
        from ._extras import MissingExtra

        if isinstance(exc, MissingExtra):  # an optional extra, which the command names itself
            raise
        return broken_install(exc, args, sys.stderr)
    except BrokenPipeError:  # `agent-breaker demo | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 1


def _hook_in_full(options: dict[str, str], raw: bytes) -> int:
    """The full hook command on an input the daemon client read (`_hook_client.main`)."""
    import io

    from ._hook_client import SKIP_DAEMON
    from .hooks.command import run

    return run(
        options["agent"],
        io.BytesIO(raw),
        sys.stdout,
        sys.stderr,
        config=options.get("--config"),
        state=options.get("--state"),
        server=None,
        fail_closed=options.get("--fail") == "closed",
        daemon=SKIP_DAEMON not in options,
    )


def broken_install(exc: ImportError, argv: list[str], stderr: TextIO) -> int:
    """Say, in one line, what is missing and how to mend it; the exit code."""
    closed = argv[:1] == ["hook"] and _fails_closed(argv)
    what = "blocked, as --fail closed asks" if closed else "nothing was checked"
    stderr.write(f"agent-breaker: this install is broken ({exc}); {what}. Mend it: {reinstall_command()}\n")
    return BLOCK_EXIT if closed else 1


def reinstall_command() -> str:
    """The pip command that reinstalls what this environment was installed from."""
    import json
    import shlex

    source = DISTRIBUTION
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        try:
            origin = json.loads(distribution(DISTRIBUTION).read_text("direct_url.json") or "{}")
        except PackageNotFoundError:
            origin = {}
        url = origin.get("url", "") if isinstance(origin, dict) else ""
        if isinstance(url, str) and url.startswith("file://"):
            source = url.removeprefix("file://")  # the wheel or the clone it came from
            if isinstance(origin.get("dir_info"), dict) and origin["dir_info"].get("editable"):
                source = f"-e {shlex.quote(source)}"
    except Exception:  # a hint must never hide the line it belongs to
        pass
    if not source.startswith("-e "):
        source = shlex.quote(source)
    return f"{shlex.quote(sys.executable)} -m pip install --force-reinstall {source}"


def _fails_closed(argv: list[str]) -> bool:
    return "--fail=closed" in argv or any(a == "--fail" and b == "closed" for a, b in zip(argv, argv[1:], strict=False))


if __name__ == "__main__":
    sys.exit(main())
