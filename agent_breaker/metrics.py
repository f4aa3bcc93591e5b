"""Prometheus metrics of the guards' decisions (prometheus-client, the standard exposition).

Every engine of a process reports to one registry, `REGISTRY`, unless it is given its own
`Metrics` (`Engine(telemetry=Metrics())`); `agent-breaker serve` exposes it at GET /metrics,
and in-process users read it with `prometheus_client.generate_latest(metrics.REGISTRY)`.
Labels carry machine names and bounded names only: no session id, no payload text; tenant and
feature names are capped (the first `max_label_values` of each seen, then "_other"), so a
caller inventing names cannot blow up the series count.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

DEFAULT_MAX_LABEL_VALUES = 100
#: caps the distinct tenant, feature and tool names of the process registry (default 100)
MAX_LABEL_VALUES_ENV = "AGENT_BREAKER_METRICS_MAX_LABELS"
MAX_CACHED_SERIES = 10_000
OTHER = "_other"
NONE = "none"
#: decision latency buckets, seconds: a decision takes about 100 us in process, a few ms on Redis
LATENCY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class BoundedLabels:
    """The first `cap` distinct values of a label as themselves, every later one as OTHER;
    reserved values (a config's tools) always as themselves, outside the cap."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._seen: set[str] = set()
        self.reserved: set[str] = set()
        self._lock = threading.Lock()

    def reserve(self, values: Iterable[str]) -> None:
        with self._lock:
            self.reserved.update(values)

    def __call__(self, value: str | None) -> str:
        if value is None:
            return NONE
        if value in self._seen or value in self.reserved:
            return value
        with self._lock:
            if len(self._seen) < self.cap:
                self._seen.add(value)
                return value
        return OTHER


class SessionCounting(Protocol):
    """A store that keeps sessions in this process (memory://) and can say how many."""

    evicted: int

    def session_count(self) -> int: ...


class _Sessions(Collector):
    """Sessions live and evicted, read from the in-process stores when scraped (nothing is
    counted on the decision path). A Redis store expires sessions itself: Redis reports those."""

    def __init__(self) -> None:
        self.stores: weakref.WeakSet[Any] = weakref.WeakSet()
        self._seen: dict[int, int] = {}  # evictions each live store had at the last scrape
        self._retired = 0  # of the stores gone since: a counter never goes down
        self._lock = threading.Lock()

    def watch(self, store: SessionCounting) -> None:
        with self._lock:
            if store in self.stores:
                return
            self.stores.add(store)
            self._seen[id(store)] = store.evicted
        weakref.finalize(store, self._retire, id(store))

    def _retire(self, key: int) -> None:
        with self._lock:
            self._retired += self._seen.pop(key, 0)

    def collect(self) -> Iterator[Any]:
        stores = list(self.stores)
        if not stores and not self._retired:
            return iter(())  # no in-memory store (Redis only): no series rather than a false 0
        with self._lock:
            for st in stores:
                self._seen[id(st)] = st.evicted
            evicted_total = self._retired + sum(self._seen.values())
        live = GaugeMetricFamily("agent_breaker_sessions_live", "Sessions held by this process's in-memory stores.")
        live.add_metric([], sum(st.session_count() for st in stores))
        evicted = CounterMetricFamily(
            "agent_breaker_sessions_evicted", "Sessions the in-memory stores dropped: idle past ttl_s, or past max_sessions."
        )
        evicted.add_metric([], evicted_total)
        return iter((live, evicted))


class Metrics:
    """The decision metrics, on one registry."""

    def __init__(self, registry: CollectorRegistry | None = None, *, max_label_values: int = DEFAULT_MAX_LABEL_VALUES) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.decisions = Counter(
            "agent_breaker_decisions",
            "Decisions by event kind, heuristic (none: no trip) and verdict (allowed, warned, blocked).",
            ["event", "heuristic", "verdict"],
            registry=r,
        )
        self.latency = Histogram(
            "agent_breaker_decision_seconds", "Time to decide one event.", ["event"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.spend_tokens = Counter(
            "agent_breaker_spend_tokens", "Model tokens the guarded steps reported.", ["tenant", "feature"], registry=r
        )
        self.spend_usd = Counter(
            "agent_breaker_spend_usd",
            "Model spend the guarded steps reported or were priced at.",
            ["tenant", "feature"],
            registry=r,
        )
        self.storage_failures = Counter(
            "agent_breaker_storage_failures", "Decisions made while the shared store failed.", ["severity"], registry=r
        )
        self.breaker_state = Gauge(
            "agent_breaker_breaker_state",
            "1 for the state this process last saw each tool's breaker in (any tenant's), 0 for the others.",
            ["tool", "state"],
            registry=r,
        )
        self.breaker_transitions = Counter(
            "agent_breaker_breaker_transitions",
            "Breaker moves this process made (or an operator forced), by tool.",
            ["tool", "from_state", "to_state"],
            registry=r,
        )
        self.incidents = Counter(
            "agent_breaker_incidents",
            "Incidents by sink and outcome: delivered, failed (after retries), dropped (queue full), deduped (a repeat "
            "within a minute), limited (past its tenant's share).",
            ["sink", "outcome"],
            registry=r,
        )
        self.escalations_collapsed = Counter(
            "agent_breaker_escalations_collapsed",
            "Escalations collapsed onto their tenant's newest open one: the tenant was at escalations.max_open_per_tenant.",
            ["tenant"],
            registry=r,
        )
        self.sessions = _Sessions()
        r.register(self.sessions)
        self.tenant = BoundedLabels(max_label_values)
        self.feature = BoundedLabels(max_label_values)
        self.tool = BoundedLabels(max_label_values)
        self._breaker_seen: dict[str, str] = {}
        self._lock = threading.Lock()
        self._decided: dict[tuple[str, str | None, str], tuple[Any, Any]] = {}
        self._spent: dict[tuple[str | None, str | None], tuple[Any, Any]] = {}

    def decided(self, event: str, heuristic: str | None, verdict: str, seconds: float) -> None:
        key = (event, heuristic, verdict)
        children = self._decided.get(key)
        if children is None:  # labels() costs a few microseconds: each series is looked up once
            children = self._decided[key] = (
                self.decisions.labels(event, heuristic or NONE, verdict),
                self.latency.labels(event),
            )
        children[0].inc()
        children[1].observe(seconds)

    def storage_failed(self, severity: str) -> None:
        self.storage_failures.labels(severity).inc()

    def reserve_tools(self, tools: Iterable[str]) -> None:
        """Tools that always get series of their own (a config's `tools:`), however many
        other names callers make up."""
        self.tool.reserve(tools)

    def breaker_seen(self, tool: str, state: str) -> None:
        """The state a decision found a tool's breaker in (changes only touch the gauge). A
        tool seen only closed takes no label slot unless reserved: made-up names cannot use
        up the slots an opening breaker needs."""
        seen = self._breaker_seen.get(tool)
        if seen == state or (seen is None and state == "closed" and tool not in self.tool.reserved):
            return
        label = self.tool(tool)
        if label == OTHER:
            return  # past the cap, one gauge cannot say which tool is in which state
        with self._lock:
            before = self._breaker_seen.get(tool)
            self._breaker_seen[tool] = state
            if before is not None:
                self.breaker_state.labels(label, before).set(0)
            self.breaker_state.labels(label, state).set(1)

    def breaker_moved(self, tool: str, src: str, dst: str) -> None:
        self.breaker_transitions.labels(self.tool(tool), src, dst).inc()
        self.breaker_seen(tool, dst)

    def incident(self, sink: str, outcome: str) -> None:
        self.incidents.labels(sink, outcome).inc()

    def watch_sessions(self, store: SessionCounting) -> None:
        """Report an in-memory store's sessions live and evicted (while the store lives)."""
        self.sessions.watch(store)

    def escalation_collapsed(self, tenant: str | None) -> None:
        self.escalations_collapsed.labels(self.tenant(tenant)).inc()

    def spent(self, tenant: str | None, feature: str | None, tokens: int, usd: float) -> None:
        if not tokens and not usd:
            return
        key = (tenant, feature)
        children = self._spent.get(key)
        if children is None:
            labels = (self.tenant(tenant), self.feature(feature))
            children = (self.spend_tokens.labels(*labels), self.spend_usd.labels(*labels))
            if len(self._spent) < MAX_CACHED_SERIES:  # made-up names share OTHER, not the cache
                self._spent[key] = children
        if tokens:
            children[0].inc(tokens)
        if usd:
            children[1].inc(usd)


class NoMetrics(Metrics):
    """Metrics off (`Engine(telemetry=NO_METRICS)`): records nothing, on a registry of its own."""

    def decided(self, event: str, heuristic: str | None, verdict: str, seconds: float) -> None:
        pass

    def storage_failed(self, severity: str) -> None:
        pass

    def spent(self, tenant: str | None, feature: str | None, tokens: int, usd: float) -> None:
        pass

    def breaker_seen(self, tool: str, state: str) -> None:
        pass

    def reserve_tools(self, tools: Iterable[str]) -> None:
        pass

    def breaker_moved(self, tool: str, src: str, dst: str) -> None:
        pass

    def incident(self, sink: str, outcome: str) -> None:
        pass

    def watch_sessions(self, store: SessionCounting) -> None:
        pass

    def escalation_collapsed(self, tenant: str | None) -> None:
        pass


NO_METRICS = NoMetrics()

#: the process's registry: every engine built without its own Metrics reports here
REGISTRY = CollectorRegistry()
_shared: Metrics | None = None
_shared_lock = threading.Lock()


def shared() -> Metrics:
    """The process-wide Metrics on REGISTRY (created on first use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            cap = os.environ.get(MAX_LABEL_VALUES_ENV) or str(DEFAULT_MAX_LABEL_VALUES)
            if not cap.isdigit() or int(cap) < 1:
                raise ValueError(f"${MAX_LABEL_VALUES_ENV} must be a positive whole number, not {cap[:40]!r}")
            _shared = Metrics(REGISTRY, max_label_values=int(cap))
        return _shared
