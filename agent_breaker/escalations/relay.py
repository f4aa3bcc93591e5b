"""The relay: delivers the outbox to its targets, at least once, in order.

A pass reads undelivered rows oldest first, a batch at a time (`outbox.Outbox`: a SQLite table
or a Redis stream), and hands each row's message to every target with the row's idempotency
key. A row is marked delivered only once every target accepted it; the marks of a batch are
one transaction (one XACK on Redis). A target that fails stops the pass at that row (later
rows wait: each target sees the outbox in order), and the next pass starts again from it
after a backoff. A relay that dies between a delivery and its mark delivers those rows again
when it restarts: at least once, so every consumer drops the keys it has seen
(`rabbitmq.DedupConsumer` shows how). Within one process a target that accepted a row is not
handed it again while another target holds the row up.

One relay per SQLite file: a second one (another process, or another `Relay` on the same
file) refuses to run (`RelayBusy`) instead of delivering everything twice. The lock is the
kernel's (`flock`), so a relay killed with -9 leaves none behind. Relays of a Redis outbox run
side by side instead: its consumer group hands each message to one of them (`redis.py`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from typing import IO, Any

from .._errors import AgentBreakerError
from .._sinks import Undeliverable, json_lines, webhook
from ..config import AgentBreakerConfig, IncidentsConfig
from .outbox import Outbox, OutboxRow

log = logging.getLogger("agent_breaker.escalations.relay")

#: a target: raises on failure (Undeliverable: retrying cannot help), returns once it accepted the message
Target = Callable[[dict[str, Any], str], None]

DEFAULT_BATCH_SIZE = 100
DEFAULT_POLL_S = 0.25
DEFAULT_BACKOFF_S = 0.5
DEFAULT_MAX_BACKOFF_S = 30.0
DEFAULT_RETENTION_S = 7 * 86_400.0
_PRUNE_EVERY_S = 3600.0

#: the largest power of two a float holds
MAX_EXPONENT = 1023


class RelayBusy(AgentBreakerError, RuntimeError):
    """Another relay delivers from this SQLite file."""


class Relay:
    """Deliver `outbox` to `targets` (name -> target): `run_once()` for one pass, `start()` /
    `stop()` for a daemon thread, `run()` in the caller's thread (until `request_stop()`)."""

    def __init__(
        self,
        outbox: Outbox,
        targets: Mapping[str, Target],
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        poll_s: float = DEFAULT_POLL_S,
        backoff_s: float = DEFAULT_BACKOFF_S,
        max_backoff_s: float = DEFAULT_MAX_BACKOFF_S,
        retention_s: float = DEFAULT_RETENTION_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not targets:
            raise ValueError("a relay needs at least one target")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, but was {batch_size}")
        self.outbox = outbox
        self.targets = dict(targets)
        self.batch_size = batch_size
        self.poll_s = poll_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.retention_s = retention_s
        self.clock = clock
        #: deliveries that failed in a row (the backoff grows with them); 0 after a clean pass
        self.failures = 0
        self.last_error: str | None = None
        self.delivered = 0
        self.refused = 0
        # position -> targets that accepted it, while another target holds the row up
        self._accepted: dict[Hashable, set[str]] = {}
        self._lock_file: IO[bytes] | None = None
        self._pruned_at = 0.0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ one pass

    def run_once(self) -> int:
        """Deliver one batch; how many rows it delivered. A failing target ends the pass early
        (`failures` and `last_error` say so); the next pass retries that row first."""
        self._claim()
        rows = self.outbox.pending(self.batch_size)
        done: list[Hashable] = []
        try:
            for row in rows:
                if not self._deliver(row):
                    break
                done.append(row.position)
        finally:
            # what every target accepted is marked even when a target failed later in the batch
            if done:
                self.outbox.mark_delivered(done)
                for position in done:
                    self._accepted.pop(position, None)
                self.delivered += len(done)
        if len(done) == len(rows):
            self.failures = 0
        now = self.clock()
        if now - self._pruned_at >= _PRUNE_EVERY_S:
            self._pruned_at = now
            self.outbox.prune_delivered(now - self.retention_s)
        return len(done)

    def _deliver(self, row: OutboxRow) -> bool:
        accepted = self._accepted.setdefault(row.position, set())
        for name, target in self.targets.items():
            if name in accepted:
                continue
            try:
                target(row.message, row.key)
            except Undeliverable as exc:
                # the receiver refuses this message itself: retrying cannot help, and holding the
                # outbox up behind it would stop every later escalation
                self.refused += 1
                log.warning("agent-breaker relay: %s refused %s (%s): %s; not retried", name, row.kind, row.key, exc)
            except Exception as exc:  # any failure of a target is retried after a backoff
                self.failures += 1
                self.last_error = f"{name}: {type(exc).__name__}: {exc}"
                self.outbox.mark_attempted(row.position)
                if self.failures & (self.failures - 1) == 0:  # the 1st, 2nd, 4th, 8th...: a dead broker must not flood the log
                    log.warning(
                        "agent-breaker relay: %s failed to take %s (%d failures in a row): %s", name, row.key, self.failures, exc
                    )
                return False
            accepted.add(name)
        return True

    # ------------------------------------------------------------------ as a loop

    def backoff(self) -> float:
        """How long to wait before the next pass after `failures` failures in a row."""
        # in floats, the exponent capped where a float's range ends: an outage of hours (1,025
        # failures at a 30 s cap) made the int too large for a float, and the relay's thread stopped
        doublings = 2.0 ** min(max(self.failures - 1, 0), MAX_EXPONENT)
        return min(self.backoff_s * doublings, self.max_backoff_s)  # an overflow to inf is capped here

    def run(self) -> None:
        """Pass after pass until `request_stop()`: at once while batches come full, after
        `poll_s` when the outbox is drained (or on `wake()`), after `backoff()` when a target failed."""
        while not self._stop.is_set():
            try:
                delivered = self.run_once()
            except RelayBusy:
                raise
            except Exception as exc:  # the database itself failed (locked past the timeout, disk): keep trying
                self.failures += 1
                self.last_error = f"outbox: {type(exc).__name__}: {exc}"
                log.warning("agent-breaker relay: cannot read the outbox: %s", exc)
                delivered = 0
            if self.failures:
                wait = self.backoff()
            elif delivered == self.batch_size:
                continue
            else:
                wait = self.poll_s
            self._wake.wait(wait)
            self._wake.clear()

    def wake(self) -> None:
        """Start the next pass now (an escalation was just written in this process)."""
        self._wake.set()

    def request_stop(self) -> None:
        """End `run()` after its current pass (safe in a signal handler)."""
        self._stop.set()
        self._wake.set()

    def start(self) -> Relay:
        """Run the loop on a daemon thread (the lock on a SQLite file is taken here: RelayBusy)."""
        self._claim()
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="agent-breaker-relay", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread after its current pass, and let another relay have the file."""
        self.request_stop()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self.close()

    def close(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()  # closing the file drops the flock
            self._lock_file = None

    def _claim(self) -> None:
        if self._lock_file is not None or self.outbox.exclusive_file is None:
            return
        lock_path = f"{self.outbox.exclusive_file}.relay-lock"
        f = open(lock_path, "ab")  # noqa: SIM115 -- held open for the relay's life: the lock lives as long as the file
        with contextlib.suppress(OSError):
            os.chmod(lock_path, 0o600)
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise RelayBusy(f"another relay delivers from {self.outbox.exclusive_file}") from None
        self._lock_file = f


# ----------------------------------------------------------------------------- targets


def incidents_only(deliver: Callable[[dict[str, Any]], None]) -> Target:
    """A target that passes incidents on and accepts the rest unseen: an incidents file is
    what `agent-breaker report` reads, and it takes trips and breaker moves only."""

    def target(message: dict[str, Any], key: str) -> None:
        if message.get("kind") in ("trip", "breaker"):
            deliver({**message, "idempotency_key": key})

    return target


def with_key(deliver: Callable[[dict[str, Any]], None]) -> Target:
    """An incident sink's delivery as a target: the message with its idempotency key, so a
    receiver can drop a repeat."""

    def target(message: dict[str, Any], key: str) -> None:
        deliver({**message, "idempotency_key": key})

    return target


def sink_targets(incidents: IncidentsConfig) -> dict[str, Target]:
    """A config's incident sinks as targets: the webhook takes everything (a channel hears when
    a session waits for a human, and when it was resolved), the file incidents only."""
    targets: dict[str, Target] = {}
    w = incidents.webhook
    url = w.url
    if url:
        targets["webhook"] = with_key(webhook(url, w.timeout_s))
    if incidents.file:
        targets["file"] = incidents_only(json_lines(str(incidents.file)))
    return targets


def targets_for(config: AgentBreakerConfig) -> tuple[dict[str, Target], list[Callable[[], None]]]:
    """Every target a config names (the incident sinks, the RabbitMQ queue), and what closes them."""
    targets = sink_targets(config.incidents)
    closers: list[Callable[[], None]] = []
    url = config.escalations.queue_url
    if url:
        from .rabbitmq import RabbitPublisher

        publisher = RabbitPublisher(url, config.escalations.queue)
        targets["rabbitmq"] = publisher
        closers.append(publisher.close)
    return targets, closers
