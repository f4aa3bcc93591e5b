"""Incident sinks: where trips and breaker transitions go besides the log.

A sink is an engine listener that only puts the incident's dict on a bounded queue; one daemon
thread per sink delivers from it, retrying with exponential backoff. A decision therefore
never waits on a receiver: a slow or dead webhook fills the queue, and what does not fit is
dropped, counted (`agent_breaker_incidents_total{outcome="dropped"}`) and logged.

No tenant can crowd out another's incidents: breaker moves and escalations have a lane of their
own that trips never fill, and delivered first; a trip repeating one already queued or sent
within `DEDUP_S` (same tenant, session and heuristic) is counted `deduped`, not queued; and each
tenant queues at most `TENANT_BURST` trips, refilled at `TENANT_PER_MINUTE` a minute (past
that: `limited`). At exit, each sink gets
a few seconds to deliver what is queued (an operator's forced breaker from the CLI included). Incidents hold names,
numbers and the engine's reasons, never payload text.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import queue
import threading
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ._errors import AgentBreakerError
from .config import IncidentsConfig, WebhookConfig
from .metrics import Metrics

log = logging.getLogger("agent_breaker.incidents.delivery")

Deliver = Callable[[dict[str, Any]], None]


class Reportable(Protocol):
    kind: str

    def to_dict(self) -> dict[str, Any]: ...


class Undeliverable(AgentBreakerError):
    """A delivery that retrying cannot fix (the receiver refused the request itself)."""


_ICONS = {"block": ":no_entry:", "warn": ":warning:", "breaker_opened": ":red_circle:", "breaker_closed": ":large_green_circle:"}


def _plain(value: Any) -> str:
    """A caller-chosen value as Slack text, not markup: `<!channel>` or `<url|label>` in a
    session id or tool name must not ping a channel or disguise a link."""
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_text(d: dict[str, Any]) -> str:
    """One line a chat channel shows (Slack's `text` field): what happened, to what, why."""
    v = {k: _plain(x) for k, x in d.items() if isinstance(x, (str, int, float))}
    if d.get("kind") == "breaker":
        icon = _ICONS.get(d["event"], ":large_yellow_circle:")
        tenant = f" (tenant {v['tenant']})" if d.get("tenant") else ""
        return f"{icon} agent-breaker: {v['tool']} breaker {v['from']} -> {v['to']}{tenant}: {v['reason']}"
    if d.get("kind") in ("escalation", "resolution"):
        # the escalation outbox (agent_breaker.escalations) reaches the webhook through its relay
        tenant = f", tenant {v['tenant']}" if d.get("tenant") else ""
        what = f"escalation {v['id']} ({v['heuristic']}, session {v['session_id']}{tenant})"
        if d["kind"] == "escalation":
            return f":sos: agent-breaker {what} waits for a human: {v['reason']}"
        note = f": {v['note']}" if d.get("note") else ""
        return f":white_check_mark: agent-breaker {what} {v['status']}{note}"
    icon = _ICONS.get(d["severity"], ":warning:")
    where = f" on {v['tool']}" if d.get("tool") else ""
    tenant = f", tenant {v['tenant']}" if d.get("tenant") else ""
    return f"{icon} agent-breaker {v['severity']} {v['heuristic']}{where} (session {v['session']}{tenant}): {v['reason']}"


def _logged(n: int) -> bool:
    """Log the 1st, 2nd, 4th, 8th... of a kind: a dead receiver must not flood the log."""
    return n & (n - 1) == 0


#: a trip repeating one of the same tenant, session and heuristic within this is not queued again
DEDUP_S = 60.0
#: the trips one tenant may queue at once, and how fast that allowance refills
TENANT_BURST = 100
TENANT_PER_MINUTE = 60.0
#: tenants and trip keys remembered for the limits above (the oldest go first)
MAX_REMEMBERED = 10_000
#: kinds delivered before any trip, in a lane trips never fill
PRIORITY_KINDS = frozenset({"breaker", "escalation", "resolution"})


class QueuedSink:
    """An engine listener delivering incidents from two bounded queues (priority kinds, then
    trips) on its own thread."""

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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._deliver = deliver
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(queue_size)
        self._priority: queue.Queue[dict[str, Any]] = queue.Queue(queue_size)
        self._clock = clock
        self._intake = threading.Lock()
        self._sent: OrderedDict[tuple[Any, ...], float] = OrderedDict()  # trip key -> when last queued
        self._allowance: OrderedDict[Any, tuple[float, float]] = OrderedDict()  # tenant -> (tokens, at)
        self._queued: dict[Any, int] = {}  # tenant -> its trips in the queue
        self._share = max(1, queue_size // 4)  # of the queue one tenant's trips may hold
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._metrics = metrics
        self._sleep = sleep
        self.dropped = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name=f"agent-breaker-sink-{name}", daemon=True)
        self._thread.start()

    def __call__(self, incident: Reportable) -> None:
        item = incident.to_dict()
        try:
            if item.get("kind") in PRIORITY_KINDS:
                self._priority.put_nowait(item)
                with contextlib.suppress(queue.Full):  # a full trip queue keeps the thread awake anyway
                    self._queue.put_nowait({})  # wakes the thread; the priority lane is read first
                return
            refused = self._admit(item)
            if refused is not None:
                self._count(refused)
                return
            try:
                self._queue.put_nowait(item)
            except queue.Full:
                self._dequeued(item)
                raise
        except queue.Full:
            self._count("dropped")
            self.dropped += 1
            if _logged(self.dropped):
                log.warning("agent-breaker: incident sink %s is full: %d incident(s) dropped so far", self.name, self.dropped)

    def _admit(self, item: dict[str, Any]) -> str | None:
        """None when a trip may be queued; else why not: `deduped` or `limited`."""
        now = self._clock()
        tenant = item.get("tenant")
        key = (tenant, item.get("session"), item.get("heuristic"), item.get("severity"))
        with self._intake:
            last = self._sent.get(key)
            if last is not None and now - last < DEDUP_S:
                return "deduped"
            if self._queued.get(tenant, 0) >= self._share:
                return "limited"  # its share of the queue is full: other tenants' trips still fit
            tokens, at = self._allowance.pop(tenant, (float(TENANT_BURST), now))
            tokens = min(float(TENANT_BURST), tokens + (now - at) * TENANT_PER_MINUTE / 60.0)
            if tokens < 1.0:
                self._allowance[tenant] = (tokens, now)
                return "limited"
            self._allowance[tenant] = (tokens - 1.0, now)
            self._queued[tenant] = self._queued.get(tenant, 0) + 1
            self._sent.pop(key, None)
            self._sent[key] = now
            for remembered in (self._sent, self._allowance):
                while len(remembered) > MAX_REMEMBERED:
                    remembered.popitem(last=False)
        return None

    def _failed(self, why: str) -> None:
        self._count("failed")
        self.failed += 1
        if _logged(self.failed):
            log.warning("agent-breaker: incident sink %s %s (%d undelivered so far)", self.name, why, self.failed)

    def _count(self, what: str) -> None:
        if self._metrics is not None:
            self._metrics.incident(self.name, what)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                while True:  # every priority incident before the next trip
                    try:
                        urgent = self._priority.get_nowait()
                    except queue.Empty:
                        break
                    self._send(urgent)
                if item is None:
                    return
                if item:  # {}: a wake-up for the priority lane
                    self._dequeued(item)
                    self._send(item)
            finally:
                self._queue.task_done()

    def _dequeued(self, item: dict[str, Any]) -> None:
        tenant = item.get("tenant")
        with self._intake:
            left = self._queued.get(tenant, 0) - 1
            if left > 0:
                self._queued[tenant] = left
            else:
                self._queued.pop(tenant, None)

    def _send(self, item: dict[str, Any]) -> None:
        for attempt in range(self.retries + 1):
            try:
                self._deliver(item)
            except Undeliverable as exc:
                self._failed(f"refused: {exc}")
                return
            except Exception as exc:  # anything a receiver does wrong is retried, then counted
                if attempt == self.retries:
                    self._failed(f"failed {attempt + 1} times: {exc}")
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
    """Append one incident per line (what `agent-breaker report INCIDENTS.jsonl` reads); a new
    file is readable by its owner only. One write per line, appended: processes that share the
    file (hook calls) do not mix their lines."""
    target = Path(path).expanduser()

    def deliver(item: dict[str, Any]) -> None:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(item, sort_keys=True) + "\n").encode("utf-8"))
        finally:
            os.close(fd)

    return deliver


_sinks: dict[tuple[Any, ...], QueuedSink] = {}
_sinks_lock = threading.Lock()
#: what a process waits at exit for its sinks to deliver what is queued, in all
EXIT_GRACE_S = 5.0


def _shared_sink(key: tuple[Any, ...], make: Callable[[], QueuedSink]) -> QueuedSink:
    # engines of one process that name the same target share one queue and one thread (whose
    # counts go to the first engine's metrics: the process registry, unless it had its own)
    with _sinks_lock:
        sink = _sinks.get(key)
        if sink is None:
            if not _sinks:
                atexit.register(close_all)
            sink = _sinks[key] = make()
        return sink


def close_all(grace_s: float = EXIT_GRACE_S) -> None:
    """Give every sink of the process until `grace_s` to deliver what is queued, then stop."""
    deadline = time.monotonic() + grace_s
    with _sinks_lock:
        sinks = list(_sinks.values())
        _sinks.clear()
    for sink in sinks:
        sink.close(max(0.0, deadline - time.monotonic()))


def sinks_for(config: IncidentsConfig, metrics: Metrics) -> list[QueuedSink]:
    """The sinks a config asks for: a webhook (its URL, or $AGENT_BREAKER_INCIDENT_WEBHOOK) and
    a JSON-lines file."""
    out = []
    w: WebhookConfig = config.webhook
    url = w.url
    if url:
        out.append(
            _shared_sink(
                ("webhook", url, w),
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
        out.append(_shared_sink(("file", path), lambda: QueuedSink("file", json_lines(path), metrics=metrics)))
    return out
