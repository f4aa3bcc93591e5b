"""A redis-server of a test's own, on a free loopback port, stopped by its PID (for a test that
stops its Redis, or must not see other tests' keys)."""

from __future__ import annotations

import shutil
import subprocess
import threading

import pytest
from _ports import free_port


class RedisServer:
    """A redis-server of the test's own, on a free loopback port, stopped by its PID."""

    def __init__(self, folder: str | None = None) -> None:
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server is not installed")
        self.port = free_port()
        self.folder = folder  # where it may write (its working folder otherwise)
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"redis://{self.address}/0"

    def start(self) -> None:
        import redis

        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        argv += ["--dir", self.folder] if self.folder else []
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url, socket_timeout=0.5)
        for _ in range(200):
            try:
                if client.ping():
                    return
            except redis.RedisError:
                self.proc.poll()
                if self.proc.returncode is not None:
                    break
                threading.Event().wait(0.05)  # the server process, not the code under test
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
