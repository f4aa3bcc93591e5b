"""A per-user process that keeps the hook guard loaded between `agent-breaker hook` calls.

A coding agent runs the hook command once per tool call. Importing and building the engine costs
hundreds of milliseconds; the decision itself a few. So the first call that finds no daemon decides
in its own process and starts one; the calls after it hand their input to the daemon over a Unix
socket in a folder only the user can open, and print its answer.

The daemon decides on the same SQLite store as an in-process hook, so a call that cannot reach
it, or that it does not answer in time, decides alone. What it keeps of its own is a witness
(`witness`): what it saw of each session, which a state file put back cannot undo. It signs each
answer with the user's daemon key, so nothing else at its socket can answer for it. It serves one
config and one store (the config's content, both paths, the package's files and the
AGENT_BREAKER_* environment are in its socket's name), reads calls concurrently (each by a
deadline) and decides them one at a time, and exits after `$AGENT_BREAKER_HOOK_DAEMON_IDLE_S`
(default 900) without one.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import struct
import sys
from pathlib import Path
from typing import Any

from .. import _hook_client as client
from .._hook_client import DAEMON_ENV
from . import MAX_INPUT_BYTES, HookAnswer
from . import read as read_input

__all__ = ["DAEMON_ENV", "Daemon", "main", "running", "runtime_dir", "serve", "socket_path", "start"]

IDLE_ENV = "AGENT_BREAKER_HOOK_DAEMON_IDLE_S"
DEFAULT_IDLE_S = 900.0
#: a client that connects and then stalls is dropped by then; it holds one reader meanwhile
READ_TIMEOUT_S = 2.0
#: calls read at once: past them a connection is closed unread (its caller decides alone)
MAX_READERS = 64
#: a request: one hook input (at most MAX_INPUT_BYTES, one byte more says "over") and its header
MAX_REQUEST_BYTES = MAX_INPUT_BYTES + 2**10
#: a daemon that cannot start (a config that does not load) is not started again by every call
START_INTERVAL_S = 10.0


def runtime_dir() -> Path:
    """Where the sockets live (`_hook_client.runtime_dir`)."""
    return Path(client.runtime_dir())


def socket_path(config: str | None, state: str) -> Path | None:
    """The daemon's socket for this config and state (`_hook_client.socket_path`)."""
    path = client.socket_path(config, state)
    return None if path is None else Path(path)


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


def _same_user(conn: socket.socket) -> bool:
    """Whether the peer runs as this user (Linux tells; elsewhere the private folder is the check)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return True
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return bool(uid == os.getuid())


def serve(path: Path, config: str | None, state: str, idle_s: float) -> int:
    """Answer hook calls at `path` until `idle_s` pass without one."""
    import fcntl  # Unix only, as the daemon is
    import signal
    import threading

    from .guard import HookGuard

    lock = os.open(path.with_suffix(".lock"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another daemon serves this socket, or is starting to
    secret = client.key(str(path.parent))
    if secret is None:
        print(f"agent-breaker: no daemon key in {path.parent} this user alone can read", file=sys.stderr)
        return 1
    # a full disk fails a write (the guard's fail policy answers), rather than killing the daemon
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    os.ftruncate(lock, 0)
    os.write(lock, f"{os.getpid()}\n".encode())  # who to stop: `kill $(cat hookd-*.lock)`
    guard = HookGuard(config, state, witness=True)
    deciding = threading.Lock()  # one engine, one SQLite connection: one decision at a time
    readers = threading.BoundedSemaphore(MAX_READERS)
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
                if not readers.acquire(blocking=False):
                    conn.close()  # every reader busy: the caller decides in its own process
                    continue
                threading.Thread(target=_serve_one, args=(conn, guard, deciding, readers, secret), daemon=True).start()
        finally:
            path.unlink(missing_ok=True)
            os.ftruncate(lock, 0)  # no dead PID left behind to be killed by mistake
            with deciding:
                guard.close()


def _serve_one(conn: socket.socket, guard: Any, deciding: Any, readers: Any, secret: bytes) -> None:
    try:
        with conn:
            _answer(conn, guard, deciding, secret)
    finally:
        readers.release()


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


def _answer(conn: socket.socket, guard: Any, deciding: Any, secret: bytes) -> None:
    """One call: its request read by a deadline (a client that stalls holds one reader, never
    the others), decided, and the answer signed for its nonce."""
    import time

    try:
        if not _same_user(conn):
            return
        agent, fail_closed, nonce, raw = client.parse_request(
            client.read_all(conn, MAX_REQUEST_BYTES, time.monotonic() + READ_TIMEOUT_S)
        )
        try:
            # read as the command reads it (the same limits and answers); the engine decides the rest
            read = read_input(agent, raw, fail_closed=fail_closed)
            if isinstance(read, HookAnswer):
                out = read
            else:
                with deciding:
                    out = guard.decide(read)
            reply = client.answer_bytes(*out.printed())
        except Exception as exc:
            reply = client.failure_bytes(f"{type(exc).__name__}: {exc}")
        conn.settimeout(READ_TIMEOUT_S)
        conn.sendall(client.signed(secret, nonce, reply))
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
