"""The hook command's client side: an input handed to the per-user hook daemon, its answer printed.

A coding agent runs `agent-breaker hook <agent>` before and after every tool call, and waits for
it. Most of what such a process costs is the interpreter starting and importing: this module and
what `agent_breaker.__main__` imports before it are the standard library's lightest modules only
(no dataclasses, typing, pathlib, json or re), and its bytes go to the daemon as they came, to be
read there. Anything it does not handle (another option, `--server`, Codex's results, whose exit
status is read from a transcript, no daemon yet, a daemon that failed) goes to the full command
(`hooks.command`), which decides the same way.

The daemon's key, which names its socket, lives here too: the client and the daemon must agree
on it, and the client may not import the daemon's module.
"""

from __future__ import annotations

import os
import stat
import sys
from _operator import _compare_digest as same_digest  # what hmac.compare_digest is
from time import monotonic

from ._errors import AgentBreakerError  # a leaf: the exception root alone
from ._hook_contract import AGENTS, BLOCK_EXIT, CODEX, MAX_INPUT_BYTES

TYPE_CHECKING = False  # typing costs milliseconds every call would feel
if TYPE_CHECKING:
    from collections.abc import Callable

# `socket` imports enum and selectors, `hashlib` OpenSSL: ~8 ms on every call, for what the C
# modules below do alone
try:
    import _socket as socket
except ImportError:  # pragma: no cover - an interpreter without it
    import socket  # type: ignore[no-redef]
try:
    from _sha256 import sha256  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # Python 3.12 and later
    from hashlib import sha256

#: set to "off" to decide every call in its own process
DAEMON_ENV = "AGENT_BREAKER_HOOK_DAEMON"
#: a daemon that has not answered by then is slow (or stalled by someone): the call is decided in
#: its own process instead, on the same state (a daemon decides in milliseconds)
ANSWER_TIMEOUT_S = 2.0
#: the secret the daemon signs each answer with, beside the sockets: an answer at the socket that
#: is not signed with it is not the daemon's
KEY_FILE = "hookd.key"
#: the longest path a Unix socket address takes on Linux and macOS, with room to spare
MAX_SOCKET_PATH = 100
#: the largest answer a daemon sends (an answer is a few KB; a reason quotes no input)
MAX_ANSWER_BYTES = 2**20
#: the most of a config file hashed into a daemon's key (a config is a few KB)
MAX_CONFIG_BYTES = 2**20
#: where the command keeps its state unless told otherwise ($AGENT_BREAKER_HOOK_STATE)
STATE_ENV = "AGENT_BREAKER_HOOK_STATE"
DEFAULT_STATE = "sqlite:///~/.local/state/agent-breaker/hooks.db"

_HOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hooks")
#: the install's code, stamped into a daemon's key (an upgrade is a new daemon); made absolute at
#: import, since a module imported from the working folder may name its file relative to it
_CODE = (os.path.abspath(__file__), os.path.join(_HOOKS, "daemon.py"), os.path.join(_HOOKS, "__init__.py"))


class DaemonUnavailable(AgentBreakerError):
    """No daemon answers at this socket (none started, or one that died): decide in process."""


class DaemonFailed(AgentBreakerError, RuntimeError):
    """The daemon took the call but could not decide it: the fail policy answers."""


class DaemonSlow(DaemonUnavailable):
    """No answer in time (a daemon busy, or stalled by connections that send nothing), or an
    answer not signed with the user's key (something else at the socket): decide in process."""


def runtime_dir() -> str:
    """Where the sockets live: the user's runtime folder (a tmpfs only they can open) if the
    system gives one, else a folder beside the hooks' default state."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and os.path.isabs(base):
        return os.path.join(base, "agent-breaker")
    return os.path.join(os.path.expanduser("~"), ".local", "state", "agent-breaker", "run")


def private_dir(path: str) -> bool:
    """Create `path` owner-only if missing; whether it is a folder this user alone can write to.
    Anyone else able to write there could plant a socket that answers "allow" to every call."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def absolute(config: str | None, state: str) -> tuple[str | None, str]:
    """The config file and the SQLite state as absolute paths: what a daemon serves, wherever
    the call that started it ran (a relative `sqlite:///hooks.db` is the caller's folder's)."""
    if config is not None:
        config = os.path.abspath(os.path.expanduser(config))
    prefix = "sqlite:///"
    if state.startswith(prefix):
        state = prefix + os.path.abspath(os.path.expanduser(state[len(prefix) :]))
    return config, state


def key(folder: str) -> bytes | None:
    """The user's daemon key (made at first use: 32 random bytes, readable by the user only);
    None when it cannot be made or read, or others could read or replace it."""
    path = os.path.join(folder, KEY_FILE)
    if not os.path.lexists(path):
        # written whole, then linked in: a call reading at the same moment never sees it half made
        draft = f"{path}.{os.getpid()}.{os.urandom(4).hex()}"
        try:
            fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, os.urandom(32))
            finally:
                os.close(fd)
            try:  # noqa: SIM105  (contextlib is an import every hook call would pay)
                os.link(draft, path)
            except FileExistsError:
                pass  # another call made it first: that one is the key
        except OSError:
            return None
        finally:
            try:  # noqa: SIM105
                os.unlink(draft)
            except OSError:
                pass
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        secret = os.read(fd, 64)
    finally:
        os.close(fd)
    if st.st_uid != os.getuid() or st.st_mode & 0o077 or len(secret) != 32:
        return None
    return secret


def mac(secret: bytes, message: bytes) -> bytes:
    """HMAC-SHA256 (RFC 2104) of `message`, by hand: the `hmac` module imports hashlib (OpenSSL),
    milliseconds on every call. `secret` is shorter than SHA-256's 64-byte block."""
    padded = secret.ljust(64, b"\0")
    inner = sha256(bytes(b ^ 0x36 for b in padded) + message).digest()
    outer: bytes = sha256(bytes(b ^ 0x5C for b in padded) + inner).digest()
    return outer


def socket_path(config: str | None, state: str) -> str | None:
    """The socket of the daemon for this config and state (absolute paths: see `absolute`),
    install and environment; None where no daemon can serve (no Unix sockets, a folder others
    can write to, a path too long). One user's calls from any folder share it."""
    if not hasattr(socket, "AF_UNIX") or os.environ.get(DAEMON_ENV, "").lower() in ("off", "0", "false", "no"):
        return None
    key = sha256()
    for part in (*_config_stamp(config), *(p for code in _CODE for p in _stamp(code)), state):
        key.update(part.encode() + b"\0")
    for name in sorted(n for n in os.environ if n.startswith("AGENT_BREAKER_")):
        key.update(f"{name}={os.environ[name]}\0".encode())
    folder = runtime_dir()
    path = os.path.join(folder, f"hookd-{key.hexdigest()[:16]}.sock")
    if len(path) > MAX_SOCKET_PATH or not private_dir(folder):
        return None
    return path


def _stamp(path: str | None) -> tuple[str, ...]:
    """A file's identity and version: an upgraded package is a new daemon (its files' times and
    sizes)."""
    if path is None:
        return ("shipped",)
    try:
        st = os.stat(path)
    except OSError:
        return (path,)
    return (os.path.realpath(path), str(st.st_mtime_ns), str(st.st_size))


def _config_stamp(path: str | None) -> tuple[str, ...]:
    """A config's identity and content: the file the config is read from (a config folder's
    `config.yml`), hashed, so a config edited in place, whatever its time says, is a new daemon."""
    if path is None:
        return ("shipped",)
    read = os.path.join(path, "config.yml") if os.path.isdir(path) else path
    try:
        with open(read, "rb") as f:
            content = f.read(MAX_CONFIG_BYTES + 1)
    except OSError:
        return (path,)  # the daemon cannot load it either: it says why
    return (os.path.realpath(read), sha256(content).hexdigest())


# ----------------------------------------------------------------------------- the daemon's wire
# A request: `<agent>\n<1 if --fail closed else 0>\n<nonce, 32 hex digits>\n` then the hook input's
# bytes as they came. An answer: `<signature, 64 hex digits>\n` then `<exit code>\n<stderr's length
# in bytes>\n<stderr><stdout>`, or `E\n<why>` when the daemon could not decide; the signature is
# the HMAC of the nonce and the rest of the answer under the user's daemon key.


def request(agent: str, raw: bytes, fail_closed: bool, nonce: bytes) -> bytes:
    return f"{agent}\n{int(fail_closed)}\n{nonce.hex()}\n".encode() + raw


def parse_request(data: bytes) -> tuple[str, bool, bytes, bytes]:
    """(agent, fail closed, nonce, the hook input) of a request (ValueError if it is none)."""
    agent, closed, nonce, raw = data.split(b"\n", 3)
    return agent.decode(), closed == b"1", bytes.fromhex(nonce.decode()), raw


def signed(secret: bytes, nonce: bytes, body: bytes) -> bytes:
    return mac(secret, nonce + body).hex().encode() + b"\n" + body


def answer_bytes(exit_code: int, stderr: str, stdout: str) -> bytes:
    err = stderr.encode("utf-8", "surrogateescape")
    return f"{exit_code}\n{len(err)}\n".encode() + err + stdout.encode("utf-8", "surrogateescape")


def failure_bytes(why: str) -> bytes:
    return b"E\n" + why.encode("utf-8", "replace")


def parse_answer(data: bytes, secret: bytes, nonce: bytes) -> tuple[int, str, str]:
    """(exit code, stderr, stdout) of an answer; DaemonSlow if it is not signed with `secret`
    for this `nonce`, DaemonFailed if the daemon could not decide or sent no answer."""
    signature, _, body = data.partition(b"\n")
    if not same_digest(signature, mac(secret, nonce + body).hex().encode()):
        raise DaemonSlow("the answer at the daemon's socket is not signed with this user's daemon key")
    if body.startswith(b"E\n"):
        raise DaemonFailed(f"the hook daemon could not decide: {body[2:].decode('utf-8', 'replace')}")
    try:
        code, size, rest = body.split(b"\n", 2)
        exit_code, n = int(code), int(size)
        if exit_code not in (0, BLOCK_EXIT) or not 0 <= n <= len(rest):
            raise ValueError
        return exit_code, rest[:n].decode(), rest[n:].decode()
    except ValueError:
        raise DaemonFailed("the hook daemon's answer is not one") from None


def ask(path: str, agent: str, raw: bytes, fail_closed: bool) -> tuple[int, str, str]:
    """The daemon's answer to one hook input: (exit code, stderr, stdout)."""
    secret = key(os.path.dirname(path))
    if secret is None:
        raise DaemonUnavailable("no daemon key this user alone can read")
    nonce = os.urandom(16)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = monotonic() + ANSWER_TIMEOUT_S
    try:
        sock.settimeout(ANSWER_TIMEOUT_S)
        try:
            sock.connect(path)
        except OSError as exc:  # no socket, or one nobody listens on any more
            raise DaemonUnavailable(str(exc)) from None
        try:
            sock.sendall(request(agent, raw, fail_closed, nonce))
            sock.shutdown(socket.SHUT_WR)
            reply = read_all(sock, MAX_ANSWER_BYTES, deadline)
        except OSError as exc:  # a time-out among them
            raise DaemonSlow(f"the hook daemon did not answer: {exc}") from None
    finally:
        sock.close()
    return parse_answer(reply, secret, nonce)


def read_all(sock: socket.socket, limit: int, deadline: float) -> bytes:
    """What `sock` sends until it closes, at most `limit` bytes, by `deadline` (monotonic):
    OSError otherwise (a peer that sends slowly is no faster than one that sends nothing)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - monotonic()
        if left <= 0:
            raise OSError("timed out")
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise OSError(f"more than {limit} bytes")
        chunks.append(chunk)


# ----------------------------------------------------------------------------- the command

#: the options the client takes itself (each with a value); any other goes to the full command
_OPTIONS = ("--config", "--state", "--fail")
#: in the options handed to the full command: the daemon was asked and did not answer in time
SKIP_DAEMON = "skip-daemon"


def options(args: list[str]) -> dict[str, str] | None:
    """`hook <agent> [--config C] [--state S] [--fail open|closed]` as {"agent", "--config", ...};
    None for anything else (help, --server, --no-daemon, an unknown agent or option)."""
    if len(args) < 2 or args[0] != "hook" or args[1] not in AGENTS:
        return None
    found = {"agent": args[1]}
    rest = args[2:]
    while rest:
        name, eq, value = rest[0].partition("=")
        if name not in _OPTIONS or name in found:
            return None
        if not eq:
            if len(rest) < 2:
                return None
            value, rest = rest[1], rest[1:]
        found[name] = value
        rest = rest[1:]
    if found.get("--fail", "open") not in ("open", "closed"):
        return None
    return found


def main(args: list[str], decide: Callable[[dict[str, str], bytes], int]) -> int | None:
    """Answer a hook call through the running daemon: the exit code. `decide(options, input)`
    answers what the daemon cannot (the full command); None when the full command must parse
    the arguments too (it has not read stdin then)."""
    found = options(args)
    if found is None:
        return None
    agent, fail_closed = found["agent"], found.get("--fail") == "closed"
    config, state = absolute(found.get("--config"), found.get("--state") or os.environ.get(STATE_ENV) or DEFAULT_STATE)
    path = socket_path(config, state)
    if path is None:
        return None
    raw = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
    if agent == CODEX and b"PostToolUse" in raw:
        return decide(found, raw)  # its exit status is in the session's transcript (hooks.command)
    try:
        exit_code, stderr, stdout = ask(path, agent, raw, fail_closed)
    except DaemonSlow as exc:
        sys.stderr.write(f"agent-breaker: {exc}; decided without it\n")
        return decide({**found, SKIP_DAEMON: ""}, raw)  # decided in process, the daemon not asked again
    except DaemonUnavailable:
        return decide(found, raw)  # decided in process, and a daemon started for the next call
    except DaemonFailed as exc:
        from .hooks import hook_of, undecided

        exit_code, stderr, stdout = undecided(str(exc), fail_closed=fail_closed, hook=hook_of(agent, raw)).printed()
    if stderr:
        sys.stderr.write(stderr + "\n")
    sys.stdout.write(stdout)
    return exit_code
