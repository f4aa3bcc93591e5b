"""The operator's side of an engine (`engine.operator`): read, list and force the shared tool
breakers, with an incident for each forced move."""

from __future__ import annotations

from typing import Any

from .._policy import Policies
from .._text import normalize_name
from ..breaker import BreakerState, BreakerStateName
from ..clock import Clock
from ..store import Store
from ..store.base import split_key
from ._facts import breaker_key_of
from ._instrument import DECISION_SPAN, Reporter, per_tenant


class Operator:
    """Operator control over an engine's shared tool breakers."""

    def __init__(
        self, store: Store, policies: Policies, clock: Clock, reporter: Reporter, tracer: Any | None, *, share_breakers: bool
    ) -> None:
        self._store = store
        self._policies = policies
        self._clock = clock
        self._reporter = reporter
        self._tracer = tracer
        self._share_breakers = share_breakers

    def breaker_key(self, tool: str, *, tenant: str | None = None) -> str:
        """The store key of a tool's shared breaker (per tenant when `breaker.key_by_tenant`)."""
        cfg = self._policies.get(tenant, None, None).cfg
        return breaker_key_of(cfg, tenant, normalize_name(tool), shared=self._share_breakers)

    def breaker_state(self, tool: str, *, tenant: str | None = None) -> BreakerStateName:
        st = self._store.breaker_state(self.breaker_key(tool, tenant=tenant))
        return BreakerStateName.CLOSED if st is None else st.state

    def force_breaker(self, tool: str, state: BreakerStateName | str, *, tenant: str | None = None) -> None:
        """Force open, disable, metrics-only, or reset a tool's breaker (an incident,
        `breaker_forced`, when it changes the state)."""
        cfg = self._policies.get(tenant, None, None).cfg
        dst = BreakerStateName(state)
        moved = self._store.breaker_force(self.breaker_key(tool, tenant=tenant), cfg.breaker, self._clock.now(), dst)
        span = None if self._tracer is None or moved is None else self._tracer.start_span("agent_breaker.breaker_force")
        token = DECISION_SPAN.set(span)
        try:
            per = per_tenant(cfg, self._share_breakers)
            self._reporter.breaker_moved(moved, normalize_name(tool), tenant, dst, per_tenant=per)
        finally:
            DECISION_SPAN.reset(token)
            if span is not None:
                span.end()

    def breakers(self) -> list[tuple[str | None, str, BreakerState]]:
        """Every shared tool breaker in the store (all the fleet's, on Redis) as (tenant, tool,
        state), sorted; copies of the states. Tenant None: calls without one, or a breaker every
        tenant shares (`breaker.key_by_tenant: false`)."""
        listed = [(*breaker_key_parts(key), st) for key, st in self._store.breaker_list()]
        return sorted(listed, key=lambda row: (row[0] or "", row[1]))


def breaker_key_parts(key: str) -> tuple[str | None, str]:
    """(tenant, tool) of a breaker key (`[tenant:]tool`, each part escaped); tenant None for
    calls without one, or a breaker every tenant shares."""
    *tenant, tool = split_key(key)
    return (tenant[0] or None if tenant else None), tool
