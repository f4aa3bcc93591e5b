"""The receipts' side of an engine (`engine.receipts`): does a receipt vouch for a call's result."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._canonical import Fingerprinter
from .._policy import Policies
from .._text import normalize_name
from ..receipts import ReceiptKeys, verify
from ._facts import result_canonical


class Receipts:
    """Verifies the receipts an engine with these keys minted, for downstream systems."""

    def __init__(self, keys: ReceiptKeys | None, fingerprints: Fingerprinter, policies: Policies) -> None:
        self._keys = keys
        self._fingerprints = fingerprints
        self._policies = policies

    def verify(
        self,
        receipt: Mapping[str, Any],
        *,
        session: str,
        call_id: str,
        tool: str,
        result: Any,
        tenant: str | None = None,
        feature: str | None = None,
        agent: str | None = None,
    ) -> tuple[bool, str]:
        """Does this receipt vouch for this (tenant, session, call, tool, result)? Forged,
        tampered, cross-tenant, cross-session and replayed receipts fail. Pass the tenant /
        feature / agent of the session when overrides change how results are canonicalized."""
        if self._keys is None:
            return False, "no receipt keys configured"
        canonical = result_canonical(self._policies.get(tenant, feature, agent), result)
        return verify(
            self._keys,
            receipt,
            tenant=tenant,
            session=session,
            call_id=call_id,
            tool=normalize_name(tool),
            result_hash=self._fingerprints.hash64(canonical),
        )
