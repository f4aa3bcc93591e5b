"""Incident sinks: where trips and breaker transitions go besides the log.

A sink is an engine listener that only puts the incident's dict on a bounded queue; one daemon
thread per sink delivers from it, retrying with exponential backoff. A decision therefore
never waits on a receiver: a slow or dead webhook fills the queue, and what does not fit is
dropped, counted (`agent_breaker_incidents_dropped_total`) and logged. Incidents hold names,
numbers and the engine's reasons, never payload text.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from .config import IncidentsConfig, WebhookConfig
from .metrics import Metrics

log = logging.getLogger("agent_breaker.incidents.delivery")

Deliver = Callable[[dict[str, Any]], None]


class Reportable(Protocol):
    kind: str

    def to_dict(self) -> dict[str, Any]: ...


class Undeliverable(Exception):
    """A delivery that retrying cannot fix (the receiver refused the request itself)."""


_ICONS = {"block": ":no_entry:", "warn": ":warning:", "breaker_opened": ":red_circle:", "breaker_closed": ":large_green_circle:"}


def slack_text(d: dict[str, Any]) -> str:
    """One line a chat channel shows (Slack's `text` field): what happened, to what, why."""
    if d.get("kind") == "breaker":
        icon = _ICONS.get(d["event"], ":large_yellow_circle:")
        tenant = f" (tenant {d['tenant']})" if d.get("tenant") else ""
        return f"{icon} agent-breaker: {d['tool']} breaker {d['from']} -> {d['to']}{tenant}: {d['reason']}"
    icon = _ICONS.get(d["severity"], ":warning:")
    where = f" on {d['tool']}" if d.get("tool") else ""
    tenant = f", tenant {d['tenant']}" if d.get("tenant") else ""
    return f"{icon} agent-breaker {d['severity']} {d['heuristic']}{where} (session {d['session']}{tenant}): {d['reason']}"


class QueuedSink:
    """An engine listener delivering incidents from a bounded queue on its own thread."""

    def __init__(
        self,
        name: str,
        deliver: Deliver,
        *,
        queue_size: int = 1000,
        retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        metrics: Metrics | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.name = name
        self._deliver = deliver
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(queue_size)
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._metrics = metrics
        self._sleep = sleep
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name=f"agent-breaker-sink-{name}", daemon=True)
        self._thread.start()

    def __call__(self, incident: Reportable) -> None:
        try:
            self._queue.put_nowait(incident.to_dict())
        except queue.Full:
            self._count("dropped")
            self.dropped += 1
            if self.dropped & (self.dropped - 1) == 0:  # the 1st, 2nd, 4th, 8th...: a dead receiver must not flood the log
                log.warning("agent-breaker: incident sink %s is full: %d incident(s) dropped so far", self.name, self.dropped)

    def _count(self, what: str) -> None:
        if self._metrics is not None:
            self._metrics.incident(self.name, what)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._send(item)
            finally:
                self._queue.task_done()

    def _send(self, item: dict[str, Any]) -> None:
        for attempt in range(self.retries + 1):
            try:
                self._deliver(item)
            except Undeliverable as exc:
                self._count("failed")
                log.warning("agent-breaker: incident sink %s refused an incident: %s", self.name, exc)
                return
            except Exception as exc:  # anything a receiver does wrong is retried, then counted
                if attempt == self.retries:
                    self._count("failed")
                    log.warning("agent-breaker: incident sink %s failed %d times: %s", self.name, attempt + 1, exc)
                    return
                self._sleep(min(self.backoff_s * 2**attempt, self.max_backoff_s))
            else:
                self._count("delivered")
                return

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every queued incident was delivered or given up on; False on timeout."""
        deadline = time.monotonic() + timeout_s
        done = self._queue.all_tasks_done
        with done:
            while self._queue.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                done.wait(left)
        return True

    def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is queued (up to timeout_s), then stop the thread."""
        self.flush(timeout_s)
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            return  # still busy past the timeout: the daemon thread dies with the process
        self._thread.join(timeout_s)


def webhook(url: str, timeout_s: float) -> Deliver:
    """POST one incident as JSON, with a Slack-compatible `text`; a 2xx answer delivers it."""

    def deliver(item: dict[str, Any]) -> None:
        body = json.dumps({**item, "text": slack_text(item)}).encode("utf-8")
        request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:  # an http(s) URL: checked by the config
                response.read()
        except urllib.error.HTTPError as exc:
            if 400 <= exc.code < 500 and exc.code not in (408, 429):
                raise Undeliverable(f"HTTP {exc.code}") from None
            raise

    return deliver


def json_lines(path: str) -> Deliver:
    """Append one incident per line (what `agent-breaker report INCIDENTS.jsonl` reads)."""
    target = Path(path).expanduser()

    def deliver(item: dict[str, Any]) -> None:
        with target.open("a", encoding="utf-8") as f:
            f.write(json.dumps(item, sort_keys=True) + "\n")

    return deliver


_sinks: dict[tuple[Any, ...], QueuedSink] = {}
_sinks_lock = threading.Lock()


def _shared_sink(key: tuple[Any, ...], make: Callable[[], QueuedSink]) -> QueuedSink:
    # engines of one process that name the same target share one queue and one thread
    with _sinks_lock:
        sink = _sinks.get(key)
        if sink is None:
            sink = _sinks[key] = make()
        return sink


def sinks_for(config: IncidentsConfig, metrics: Metrics) -> list[QueuedSink]:
    """The sinks a config asks for: a webhook (its URL, or $AGENT_BREAKER_INCIDENT_WEBHOOK) and
    a JSON-lines file."""
    out = []
    w: WebhookConfig = config.webhook
    url = w.resolved_url()
    if url:
        out.append(
            _shared_sink(
                ("webhook", url, w, id(metrics)),
                lambda: QueuedSink(
                    "webhook",
                    webhook(url, w.timeout_s),
                    queue_size=w.queue_size,
                    retries=w.retries,
                    backoff_s=w.backoff_s,
                    max_backoff_s=w.max_backoff_s,
                    metrics=metrics,
                ),
            )
        )
    if config.file:
        path = str(Path(config.file).expanduser().resolve())
        out.append(_shared_sink(("file", path, id(metrics)), lambda: QueuedSink("file", json_lines(path), metrics=metrics)))
    return out
