"""The URLs `store_from_uri` takes for a Redis, written once: the store picks its backend by
them, the config validates `storage.url` (and the escalations' and fleet's Redis) by them.

A leaf: it imports nothing, so the config can import it without the store importing the config.
"""

from __future__ import annotations

#: a Redis Cluster's URL schemes (the URL names any one of its nodes), each with its one-server scheme
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
#: the URL schemes of a Redis: one server, or a cluster
REDIS_SCHEMES = ("redis", "rediss", "unix", *CLUSTER_SCHEMES)
REDIS_URL_PREFIXES = tuple(f"{scheme}://" for scheme in REDIS_SCHEMES)
#: one SQLite file (sqlite:///path/to/file.db): the processes of one machine share it
SQLITE_SCHEME = "sqlite"
#: the schemes as an error message lists them
REDIS_URLS_TEXT = ", ".join(REDIS_URL_PREFIXES[:-1]) + " or " + REDIS_URL_PREFIXES[-1]
