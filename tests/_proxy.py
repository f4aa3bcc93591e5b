"""A TCP proxy on a free loopback port, for the faults a test makes on the way to a real
server (a broker, Redis): replies dropped, held, or the connections cut."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class TcpProxy:
    """`mute()` drops what the server sends back (a confirm lost on the way), `hold()` keeps it
    back until `release()` (a server that answers late), `cut()` closes every connection
    through it, and while `refusing` it closes new connections at once (the server unreachable)."""

    def __init__(self, upstream: tuple[str, int], *, delay_s: float = 0.0) -> None:
        self.upstream = upstream
        self.delay_s = delay_s  # each reply comes this late (a slow server, for benchmarks)
        self.refusing = False
        self.muted = threading.Event()
        self.flowing = threading.Event()
        self.flowing.set()
        self.asked_while_held = threading.Event()  # a request went up while replies were held
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            if self.refusing:
                client.close()
                continue
            upstream = socket.create_connection(self.upstream)
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_server: bool) -> None:
        try:
            while data := src.recv(65536):
                if from_server:
                    if self.muted.is_set():
                        continue
                    self.flowing.wait()
                    if self.delay_s:
                        time.sleep(self.delay_s)
                elif not self.flowing.is_set():
                    self.asked_while_held.set()
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def mute(self) -> None:
        self.muted.set()

    def hold(self) -> None:
        self.flowing.clear()

    def release(self) -> None:
        self.flowing.set()

    def cut(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
        self.muted.clear()

    def close(self) -> None:
        self.release()
        self._server.close()
        self.cut()
