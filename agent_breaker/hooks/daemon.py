"""A per-user process that keeps the hook guard loaded between `agent-breaker hook` calls.

A coding agent runs the hook command once per tool call. Importing and building the engine costs
hundreds of milliseconds; the decision itself a few. So the first call that finds no daemon decides
in its own process and starts one; the calls after it hand their input to the daemon over a Unix
socket in a folder only the user can open, and print its answer.

The daemon holds nothing of its own: it decides on the same SQLite store as an in-process hook, so
killing it loses nothing, and a call that cannot reach it decides alone. It serves one config and
one store (both, the package's files and the AGENT_BREAKER_* environment are in its socket's name),
one call at a time, and exits after `$AGENT_BREAKER_HOOK_DAEMON_IDLE_S` (default 900) without one.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import socket
import stat
import struct
import sys
from pathlib import Path
from typing import Any

from .._errors import AgentBreakerError
from . import BLOCK_EXIT, MAX_INPUT_BYTES, Hook, HookAnswer

#: set to "off" to decide every call in its own process
DAEMON_ENV = "AGENT_BREAKER_HOOK_DAEMON"
IDLE_ENV = "AGENT_BREAKER_HOOK_DAEMON_IDLE_S"
DEFAULT_IDLE_S = 900.0
#: a call queued behind others still answers well within the agents' hook time-outs (60 s and up)
ANSWER_TIMEOUT_S = 10.0
#: a client that connects and then stalls cannot hold the daemon from the others for longer
READ_TIMEOUT_S = 2.0
#: the longest path a Unix socket address takes on Linux and macOS, with room to spare
MAX_SOCKET_PATH = 100
#: a request: one hook as the command read it (its input at most MAX_INPUT_BYTES, and a few fields)
MAX_REQUEST_BYTES = MAX_INPUT_BYTES + 2**16
#: a daemon that cannot start (a config that does not load) is not started again by every call
START_INTERVAL_S = 10.0


class DaemonUnavailable(AgentBreakerError):
    """No daemon answers at this socket (none started, or one that died): decide in process."""


class DaemonFailed(AgentBreakerError, RuntimeError):
    """The daemon took the call but could not decide it: the fail policy answers."""


def runtime_dir() -> Path:
    """Where the sockets live: the user's runtime folder (a tmpfs only they can open) if the
    system gives one, else a folder beside the hooks' default state."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and Path(base).is_absolute():
        return Path(base) / "agent-breaker"
    return Path.home() / ".local" / "state" / "agent-breaker" / "run"


def private_dir(path: Path) -> bool:
    """Create `path` owner-only if missing; whether it is a folder this user alone can write to.
    Anyone else able to write there could plant a socket that answers "allow" to every call."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


#: the install's code, stamped into a daemon's key (an upgrade is a new daemon); made absolute at
#: import, since a module imported from the working folder may name its file relative to it
_CODE = (os.path.abspath(__file__), os.path.abspath(Path(__file__).with_name("__init__.py")))


def absolute(config: str | None, state: str) -> tuple[str | None, str]:
    """The config file and the SQLite state as absolute paths: what a daemon serves, wherever
    the call that started it ran (a relative `sqlite:///hooks.db` is the caller's folder's)."""
    if config is not None:
        config = os.path.abspath(os.path.expanduser(config))
    prefix = "sqlite:///"
    if state.startswith(prefix):
        state = prefix + os.path.abspath(os.path.expanduser(state[len(prefix) :]))
    return config, state


def socket_path(config: str | None, state: str) -> Path | None:
    """The socket of the daemon for this config and state (absolute paths: see `absolute`),
    install and environment; None where no daemon can serve (no Unix sockets, a folder others
    can write to, a path too long). One user's calls from any folder share it."""
    if not hasattr(socket, "AF_UNIX") or os.environ.get(DAEMON_ENV, "").lower() in ("off", "0", "false", "no"):
        return None
    key = hashlib.sha256()
    for part in (*_stamp(config), *_stamp(_CODE[0]), *_stamp(_CODE[1]), state):
        key.update(part.encode() + b"\0")
    for name in sorted(n for n in os.environ if n.startswith("AGENT_BREAKER_")):
        key.update(f"{name}={os.environ[name]}\0".encode())
    folder = runtime_dir()
    path = folder / f"hookd-{key.hexdigest()[:16]}.sock"
    if len(str(path)) > MAX_SOCKET_PATH or not private_dir(folder):
        return None
    return path


def _stamp(path: str | None) -> tuple[str, ...]:
    """A file's identity and version: an edited config or an upgraded package is a new daemon."""
    if path is None:
        return ("shipped",)
    try:
        st = os.stat(path)
    except OSError:
        return (path,)
    return (os.path.realpath(path), str(st.st_mtime_ns), str(st.st_size))


def ask(path: Path, hook: Hook) -> HookAnswer:
    """The daemon's answer to one hook, as the command read it (the daemon reads no input again)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(ANSWER_TIMEOUT_S)
        try:
            sock.connect(str(path))
        except OSError as exc:  # no socket, or one nobody listens on any more
            raise DaemonUnavailable(str(exc)) from None
        try:
            # a lone surrogate the input escaped goes as it came: the engine refuses it, as in process
            sock.sendall(json.dumps(dataclasses.asdict(hook), ensure_ascii=False).encode("utf-8", "surrogatepass"))
            sock.shutdown(socket.SHUT_WR)
            reply = _read_all(sock, 64 * 2**20)
        except OSError as exc:
            raise DaemonFailed(f"the hook daemon did not answer: {exc}") from None
    try:
        out = json.loads(reply)
    except ValueError:
        raise DaemonFailed("the hook daemon's answer is not JSON") from None
    if isinstance(out, dict) and "error" in out:
        raise DaemonFailed(f"the hook daemon could not decide: {out['error']}")
    if not (
        isinstance(out, dict)
        and isinstance(out.get("output"), dict)
        and out.get("exit_code") in (0, BLOCK_EXIT)
        and isinstance(out.get("stderr"), str)
    ):
        raise DaemonFailed("the hook daemon's answer is not one")
    return HookAnswer(out["output"], out["exit_code"], out["stderr"])


def start(path: Path, config: str | None, state: str) -> None:
    """Start a daemon for `path` in the background; if another is already starting, it exits."""
    import subprocess
    import time

    argv = [sys.executable, "-m", "agent_breaker.hooks.daemon", "--socket", str(path), "--state", state]
    if config:
        argv += ["--config", config]
    log = path.with_suffix(".log")
    try:
        if time.time() - log.stat().st_mtime < START_INTERVAL_S:
            return  # one was started a moment ago: it is coming up, or its log says why not
    except OSError:
        pass
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True, close_fds=True)
    except OSError:
        pass  # this call is decided in process anyway; the next one tries again
    finally:
        os.close(fd)


def _read_all(sock: socket.socket, limit: int) -> bytes:
    chunks, size = [], 0
    while chunk := sock.recv(65536):
        size += len(chunk)
        if size > limit:
            raise OSError(f"more than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _same_user(conn: socket.socket) -> bool:
    """Whether the peer runs as this user (Linux tells; elsewhere the private folder is the check)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return True
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return bool(uid == os.getuid())


def serve(path: Path, config: str | None, state: str, idle_s: float) -> int:
    """Answer hook calls at `path` until `idle_s` pass without one."""
    import fcntl  # Unix only, as the daemon is

    from .guard import HookGuard

    lock = os.open(path.with_suffix(".lock"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another daemon serves this socket, or is starting to
    os.ftruncate(lock, 0)
    os.write(lock, f"{os.getpid()}\n".encode())  # who to stop: `kill $(cat hookd-*.lock)`
    guard = HookGuard(config, state)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        path.unlink(missing_ok=True)  # a dead daemon's socket: we hold the lock, it is ours now
        old_mask = os.umask(0o077)
        try:
            server.bind(str(path))
        finally:
            os.umask(old_mask)
        server.listen(64)
        server.settimeout(idle_s)
        try:
            while True:
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    return 0
                with conn:
                    _answer(conn, guard, MAX_REQUEST_BYTES)
        finally:
            path.unlink(missing_ok=True)
            os.ftruncate(lock, 0)  # no dead PID left behind to be killed by mistake
            guard.close()


@dataclasses.dataclass(frozen=True)
class Daemon:
    """A hook daemon's files in the runtime folder: its socket, its PID (the lock it holds),
    its log."""

    socket: Path
    pid: int
    log: Path


def running(folder: Path | None = None) -> tuple[list[Daemon], int]:
    """The daemons that run now, and how many stale ones' files (a lock nobody holds: a daemon
    that exited or was killed) were removed."""
    import fcntl

    folder = runtime_dir() if folder is None else folder
    alive, stale = [], 0
    for lock in sorted(folder.glob("hookd-*.lock")):
        try:
            fd = os.open(lock, os.O_RDWR)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: a daemon serves
                pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
                alive.append(Daemon(lock.with_suffix(".sock"), int(pid) if pid.isdigit() else 0, lock.with_suffix(".log")))
                continue
            for leftover in (lock.with_suffix(".sock"), lock.with_suffix(".log"), lock):
                leftover.unlink(missing_ok=True)
            stale += 1
        finally:
            os.close(fd)
    return alive, stale


def _answer(conn: socket.socket, guard: Any, limit: int) -> None:
    conn.settimeout(READ_TIMEOUT_S)
    try:
        if not _same_user(conn):
            return
        data = json.loads(_read_all(conn, limit).decode("utf-8", "surrogatepass"))
        try:
            out = guard.decide(Hook(**data))
            reply = {"output": out.output, "exit_code": out.exit_code, "stderr": out.stderr}
        except Exception as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        conn.sendall(json.dumps(reply).encode())
    except (OSError, ValueError):
        pass  # a client that went away or sent garbage: nothing to answer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agent_breaker.hooks.daemon")
    ap.add_argument("--socket", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--config")
    args = ap.parse_args(argv)
    idle_s = float(os.environ.get(IDLE_ENV) or DEFAULT_IDLE_S)
    return serve(Path(args.socket), args.config, args.state, idle_s)


if __name__ == "__main__":
    sys.exit(main())
