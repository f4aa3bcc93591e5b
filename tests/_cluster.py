"""A Redis Cluster of the tests' own: three masters on free loopback ports, stopped by PID."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from _ports import free_port


class Cluster:
    """Three redis-server masters (cluster mode, no replicas) on free loopback ports, stopped by PID."""

    def __init__(self, folder: Path) -> None:
        problem = _unusable()
        if problem is not None:
            if os.environ.get("CI"):
                pytest.fail(f"{problem} under CI (.ci/run installs Debian's redis-server)")
            pytest.skip(problem)
        self.folder = folder
        self.ports = [free_port() for _ in range(3)]
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Any] = []  # each node's output, for the error when the cluster does not come up

    def start(self) -> None:
        import redis

        for port in self.ports:
            log = (self.folder / f"node-{port}.log").open("wb")
            self.logs.append(log)
            self.procs.append(
                subprocess.Popen(
                    [
                        "redis-server",
                        "--port",
                        str(port),
                        "--bind",
                        "127.0.0.1",
                        "--cluster-enabled",
                        "yes",
                        "--cluster-port",
                        str(free_port()),
                        "--cluster-config-file",
                        str(self.folder / f"nodes-{port}.conf"),
                        "--dir",
                        str(self.folder),
                        "--save",
                        "",
                        "--appendonly",
                        "no",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        nodes = [redis.Redis(port=p, socket_timeout=1) for p in self.ports]
        self.wait(lambda: all(n.ping() for n in nodes), "the nodes to answer")
        create = subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in self.ports),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert create.returncode == 0, create.stdout + create.stderr
        self.wait(lambda: all(n.cluster("info")["cluster_state"] == "ok" for n in nodes), "cluster_state:ok")
        for n in nodes:
            n.close()

    def wait(self, ready: Any, what: str, timeout_s: float = 30.0) -> None:
        import redis

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if ready():
                    return
            except (redis.RedisError, OSError):
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                logs = "".join(f"\n--- {log.name}\n" + log.read_text()[-2000:] for log in sorted(self.folder.glob("node-*.log")))
                raise RuntimeError(f"the cluster did not come up: waiting for {what}{logs}")
            time.sleep(0.1)  # polling servers until they answer

    def url(self) -> str:
        """The URL of the cluster: any one node, here the first."""
        return f"redis+cluster://127.0.0.1:{self.ports[0]}"

    def client(self) -> Any:
        from redis.cluster import RedisCluster

        return RedisCluster(host="127.0.0.1", port=self.ports[0], socket_timeout=2)

    def node(self, i: int) -> Any:
        """A one-server client of node i."""
        import redis

        return redis.Redis(port=self.ports[i], socket_timeout=2)

    def keys_per_node(self, pattern: str) -> list[int]:
        import redis

        counts = []
        for p in self.ports:
            node = redis.Redis(port=p)
            counts.append(sum(1 for _ in node.scan_iter(match=pattern, count=1000)))
            node.close()
        return counts

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in self.logs:
            log.close()


def _unusable() -> str | None:
    """Why this machine cannot start the cluster, or None."""
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        return "redis-server / redis-cli are not installed"
    version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, timeout=10).stdout
    found = re.search(r"v=(\d+)\.", version)
    if found is None or int(found.group(1)) < 7:  # --cluster-port is Redis 7's
        return f"the cluster tests need redis-server 7 or later, not {version.strip()[:60]!r}"
    return None
