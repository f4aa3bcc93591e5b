"""A local HTTP receiver for the incident and OTLP tests (and benchmarks/bench_sinks.py): a
loopback port of its own, each request's path and body kept, answers scripted (a status per
request), a gate that holds every request until the test opens it (a receiver that hangs), and
a delay per request (a slow one)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    def __init__(self, statuses: list[int] | None = None, gate: threading.Event | None = None, delay_s: float = 0.0) -> None:
        self.requests: list[tuple[str, bytes]] = []
        self.statuses = list(statuses or [])
        self.gate = gate
        self.arrived = threading.Event()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.arrived.set()
                if receiver.gate is not None:
                    receiver.gate.wait(30)
                if delay_s:
                    time.sleep(delay_s)  # a slow receiver (the sinks benchmark)
                with receiver._lock:
                    receiver.requests.append((self.path, body))
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def json_bodies(self, path: str = "/") -> list[dict[str, Any]]:
        with self._lock:
            return [json.loads(body) for p, body in self.requests if p == path]

    def raw(self) -> bytes:
        with self._lock:
            return b"".join(body for _, body in self.requests)

    def wait_for(self, ready: Callable[[], bool], timeout_s: float = 20.0) -> bool:
        """Poll until `ready()` (a receiver answers on its own threads: nothing to drive)."""
        deadline = time.monotonic() + timeout_s
        while not ready():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def close(self) -> None:
        if self.gate is not None:
            self.gate.set()
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def receiving(**kw: Any) -> Iterator[Receiver]:
    r = Receiver(**kw)
    try:
        yield r
    finally:
        r.close()
