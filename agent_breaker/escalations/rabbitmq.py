"""RabbitMQ for fleets: the relay publishes the outbox to a durable quorum queue, and consumers
drop what they have seen.

The publisher (a relay target) declares the queue (durable, `x-queue-type: quorum`: replicated
by Raft on a cluster, and written to disk before it is confirmed), publishes each message
persistent, mandatory and with the outbox row's idempotency key as its `message_id`, and waits
for the broker's confirm: a message counts as delivered only once the broker has it. A publish
on a dropped connection (a broker restart, a cut network, an idle connection the broker closed
for missed heartbeats) is retried once on a fresh connection; past that the relay backs off.

Delivery is at least once: a confirm lost with its connection makes the relay publish the
message again, and a relay killed between publishing and marking a batch republishes the
batch. A consumer must therefore drop message ids it has seen, recording them where its own
effect is recorded (in the same database transaction), not in memory as `DedupConsumer` does
for the tests.

`pip install "agent-breaker-rails[rabbitmq]"` (pika). A pika connection belongs to one thread: give
each relay its own publisher.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pika
import pika.exceptions

log = logging.getLogger("agent_breaker.escalations.rabbitmq")

QUEUE_ARGUMENTS = {"x-queue-type": "quorum"}
#: a broker that blocks publishers (a memory or disk alarm) fails a publish after this long
BLOCKED_TIMEOUT_S = 30.0
# a dropped connection, or a channel the broker closed: a fresh connection may well succeed
_STALE = (pika.exceptions.AMQPConnectionError, pika.exceptions.ChannelClosed, pika.exceptions.ChannelWrongStateError, OSError)


def broker_name(url: str) -> str:
    """host:port of a broker URL, for messages (the URL's credentials never reach a log)."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or (5671 if parts.scheme == 'amqps' else 5672)}"


def connect(url: str) -> pika.BlockingConnection:
    params = pika.URLParameters(url)
    if params.blocked_connection_timeout is None:
        params.blocked_connection_timeout = BLOCKED_TIMEOUT_S
    return pika.BlockingConnection(params)


def declare_queue(channel: Any, queue: str) -> None:
    """The durable quorum queue (declaring it again with the same arguments changes nothing)."""
    channel.queue_declare(queue=queue, durable=True, arguments=QUEUE_ARGUMENTS)


class RabbitPublisher:
    """A relay target: `publisher(message, key)` returns once the broker confirmed the message
    (persistent, `message_id` = key), and raises otherwise."""

    def __init__(self, url: str, queue: str) -> None:
        self.url = url
        self.queue = queue
        self.broker = broker_name(url)
        #: connections opened so far (more than one: the publisher reconnected)
        self.connections = 0
        self._connection: pika.BlockingConnection | None = None
        self._channel: Any = None

    def __call__(self, message: dict[str, Any], key: str) -> None:
        body = json.dumps(message, separators=(",", ":")).encode()
        properties = pika.BasicProperties(
            content_type="application/json",
            delivery_mode=pika.DeliveryMode.Persistent,
            message_id=key,
            type=str(message.get("kind", "")),
            timestamp=int(time.time()),
        )
        reused = self._connection is not None
        try:
            self._publish(body, properties)
        except _STALE as exc:
            self._drop()
            if not reused:
                raise
            log.info(
                "agent-breaker: RabbitMQ at %s dropped the connection (%s); publishing on a new one",
                self.broker,
                type(exc).__name__,
            )
            self._publish(body, properties)

    def _publish(self, body: bytes, properties: pika.BasicProperties) -> None:
        try:
            if self._channel is None:
                self._open()
            # mandatory: a message no queue takes (the queue deleted meanwhile) is an error, not lost
            self._channel.basic_publish("", self.queue, body, properties=properties, mandatory=True)
        except pika.exceptions.AMQPError:
            self._drop()  # whatever went wrong, the next attempt starts clean (and declares the queue again)
            raise

    def _open(self) -> None:
        self._connection = connect(self.url)
        self.connections += 1
        channel = self._connection.channel()
        channel.confirm_delivery()
        declare_queue(channel, self.queue)
        self._channel = channel

    def _drop(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and connection.is_open:
            try:
                connection.close()
            except Exception:  # closing a connection that is already half gone: nothing to save
                log.debug("agent-breaker: closing a broken RabbitMQ connection failed", exc_info=True)

    def close(self) -> None:
        self._drop()


class DedupConsumer:
    """Reads the queue and hands each message id to `handle` once, acknowledging every message
    (a repeat included) after it was handled. What every consumer of the queue must do; this
    one keeps the seen ids in memory (tests, benchmarks): a real one keeps them with its effect."""

    def __init__(self, url: str, queue: str, *, prefetch: int = 200) -> None:
        self.queue = queue
        self.seen: set[str] = set()
        #: messages handed on (each id once), and repeats dropped
        self.delivered = 0
        self.duplicates = 0
        self._connection = connect(url)
        self._channel = self._connection.channel()
        self._channel.basic_qos(prefetch_count=prefetch)
        declare_queue(self._channel, queue)

    def drain(self, handle: Callable[[dict[str, Any], str], None] | None = None, *, idle_s: float = 1.0) -> int:
        """Consume until no message came for `idle_s`; how many new ones were handled. A
        `handle` that raises leaves its message on the queue (requeued) and raises."""
        before = self.delivered
        for method, properties, body in self._channel.consume(self.queue, inactivity_timeout=idle_s):
            if method is None:
                break
            key = properties.message_id
            if key is not None and key in self.seen:
                self.duplicates += 1
            else:
                try:
                    if handle is not None:
                        handle(json.loads(body), key)
                except BaseException:
                    self._channel.basic_nack(method.delivery_tag, requeue=True)
                    raise
                if key is not None:
                    self.seen.add(key)
                self.delivered += 1
            self._channel.basic_ack(method.delivery_tag)
        self._channel.cancel()
        return self.delivered - before

    def close(self) -> None:
        if self._connection.is_open:
            self._connection.close()
