"""Redis clients from a URL: one server (redis://, rediss://, unix://) or a Redis Cluster
(redis+cluster://, rediss+cluster://, naming one or more of its nodes:
`redis+cluster://[user:password@]host:port[,host:port...][/0][?options]`).

Every key the store and the escalation queue use carries a hash tag, and every script's keys
share one slot (docs/redis.md, "Redis Cluster"), so the same code runs on either client."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

import redis as redis_lib
from redis.backoff import NoBackoff
from redis.commands.core import Script
from redis.connection import parse_url
from redis.exceptions import NoScriptError, RedisClusterException
from redis.retry import Retry

from ..config import CLUSTER_SCHEMES
from .base import StorageError

#: what a client may raise when Redis fails; RedisClusterException is not a RedisError
#: (a cluster that cannot be reached, slots that no node serves)
REDIS_ERRORS = (redis_lib.RedisError, RedisClusterException)


class ClusterUnreachable(StorageError, redis_lib.ConnectionError):
    """The cluster client could not be made: no node the URL names answered, or they are not
    a cluster's. Its message names nodes, never a password or a command's arguments."""


def is_cluster_url(url: str) -> bool:
    return url.partition("://")[0].lower() in CLUSTER_SCHEMES


def node_urls(url: str) -> list[str]:
    """The one-server URL of each node a cluster URL names, in its order; [url] for any other
    URL. A cluster has only database 0: a cluster URL naming another is refused. Errors name
    no part of the URL (it may hold a password)."""
    scheme, _, rest = url.partition("://")
    plain = CLUSTER_SCHEMES.get(scheme.lower())
    if plain is None:
        return [url]
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    userinfo, at, hosts = netloc.rpartition("@")
    parts = urlsplit(f"{plain}://host{tail}")
    db = parts.path.strip("/") or "0"
    if db != "0" or any(v != "0" for v in parse_qs(parts.query).get("db", [])):
        raise ValueError("a Redis Cluster has only database 0: its URL may name no other")
    nodes = hosts.split(",")
    for i, node in enumerate(nodes, 1):
        host, colon, port = node.rpartition(":")
        if not (host and colon and port.isdigit() and 0 < int(port) < 65536):
            raise ValueError(f"node {i} of the Redis Cluster URL is not host:port")
    return [f"{plain}://{userinfo}{at}{node}{tail}" for node in nodes]


def redis_client(url: str, *, timeout_s: float) -> Any:
    """A client of the URL: redis.Redis for one server, LazyCluster for a cluster."""
    if not is_cluster_url(url):
        return redis_lib.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    urls = node_urls(url)
    for node in urls:
        # options refused now, as Redis.from_url does, not at the first decision
        parse_url(node)  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
    return LazyCluster(urls, timeout_s=timeout_s)


def subscriber_client(url: str, *, timeout_s: float, attempt: int = 0) -> redis_lib.Redis:
    """A one-server client for SUBSCRIBE: on a cluster, one of the nodes the URL names, the
    next one at each attempt (a cluster forwards every PUBLISH to every node)."""
    urls = node_urls(url)
    return redis_lib.Redis.from_url(urls[attempt % len(urls)], socket_timeout=timeout_s, socket_connect_timeout=timeout_s)


def register_script(client: Any, text: str) -> Script:
    """A Lua script on the client; on a cluster, one that loads itself on the node of its key."""
    if isinstance(client, (LazyCluster, redis_lib.RedisCluster)):
        return SlotScript(client, text.encode())  # type: ignore[arg-type]  # bytes: Script needs no encoder then
    script: Script = client.register_script(text)
    return script


class SlotScript(Script):
    """A script for a cluster client. redis-py loads a script the node lacks with SCRIPT LOAD
    on every master, which fails while any master is down, even for keys a healthy one serves;
    this sends EVAL to the key's own node instead (which caches it there, for EVALSHA)."""

    def __call__(self, keys: Sequence[Any] | None = None, args: Iterable[Any] | None = None, client: Any = None) -> Any:
        keys = tuple(keys or ())
        keys_and_args = keys + tuple(args or ())  # once: `args` may be an iterator
        client = self.registered_client if client is None else client
        try:
            return client.evalsha(self.sha, len(keys), *keys_and_args)
        except NoScriptError:
            return client.eval(self.script, len(keys), *keys_and_args)


class LazyCluster:
    """A redis.cluster.RedisCluster made on first use. RedisCluster reads the slot map from the
    cluster when it is made, so a cluster down at start would fail the constructor, where a
    one-server client connects on first use: this keeps the two alike (the store's failure
    policy applies, and the next use tries again). Everything else is the cluster client's."""

    def __init__(self, urls: list[str], *, timeout_s: float) -> None:
        self._urls = urls
        self._timeout_s = timeout_s
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    from redis.cluster import ClusterNode, RedisCluster

                    nodes = [urlsplit(u) for u in self._urls]
                    try:
                        self._client = RedisCluster.from_url(
                            self._urls[0],  # its options (password, TLS) serve every node
                            # all of them, in the URL's order (from_url would put its node last)
                            startup_nodes=[ClusterNode(u.hostname, u.port) for u in nodes],  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
                            socket_timeout=self._timeout_s,
                            socket_connect_timeout=self._timeout_s,
                            # no retries: redis-py's 10 (each re-reading the slot map) would hold
                            # a decision for seconds when a master is down; the store's policy decides
                            retry=Retry(NoBackoff(), 0),
                        )
                    except RedisClusterException as exc:
                        raise ClusterUnreachable(str(exc)) from None
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client(), name)
