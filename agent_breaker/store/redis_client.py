"""Redis clients from a URL: one server (redis://, rediss://, unix://) or a Redis Cluster
(redis+cluster://, rediss+cluster://, naming any one node of the cluster).

Every key the store and the escalation queue use carries a hash tag, and every script's keys
share one slot (README, "Redis Cluster"), so the same code runs on either client."""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlsplit

import redis as redis_lib
from redis.commands.core import Script
from redis.exceptions import RedisClusterException

from ..config import CLUSTER_SCHEMES

#: what a client may raise when Redis fails; RedisClusterException is not a RedisError
#: (a cluster that cannot be reached, slots that no node serves)
REDIS_ERRORS = (redis_lib.RedisError, RedisClusterException)


def node_url(url: str) -> str:
    """The one-node URL of a cluster URL (the scheme without "+cluster"); other URLs as they are.
    A cluster has only database 0: a cluster URL naming another is refused."""
    scheme, sep, rest = url.partition("://")
    plain = CLUSTER_SCHEMES.get(scheme)
    if plain is None:
        return url
    path = urlsplit(url).path.strip("/")
    if path not in ("", "0"):
        raise ValueError(f"a Redis Cluster has only database 0, but the URL names database {path[:20]!r}")
    return plain + sep + rest


def is_cluster_url(url: str) -> bool:
    return url.partition("://")[0] in CLUSTER_SCHEMES


def redis_client(url: str, *, timeout_s: float) -> Any:
    """A client of the URL: redis.Redis for one server, LazyCluster for a cluster."""
    if is_cluster_url(url):
        return LazyCluster(node_url(url), socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    return redis_lib.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)


def subscriber_client(url: str, *, timeout_s: float) -> redis_lib.Redis:
    """A one-server client for SUBSCRIBE: on a cluster, the node the URL names (a cluster
    forwards every PUBLISH to every node)."""
    return redis_lib.Redis.from_url(node_url(url), socket_timeout=timeout_s, socket_connect_timeout=timeout_s)


class LazyCluster:
    """A redis.cluster.RedisCluster made on first use. RedisCluster reads the slot map from the
    cluster when it is made, so a cluster down at start would fail the constructor, where a
    one-server client connects on first use: this keeps the two alike (the store's failure
    policy applies, and the next use tries again). Everything else is the cluster client's."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        self._url = url
        self._kwargs = kwargs
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    from redis.cluster import RedisCluster

                    self._client = RedisCluster.from_url(self._url, **self._kwargs)
        return self._client

    def register_script(self, script: str) -> Script:
        # the text as bytes: Script then needs no encoder, which would make the client now
        return Script(self, script.encode())  # type: ignore[arg-type]

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client(), name)
