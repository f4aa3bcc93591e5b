"""Execution receipts: a successful result of a mutating tool gets a receipt, an HMAC-SHA256 over
a canonical encoding of (tenant, session, call id, tool, canonical-args hash, result hash,
time), tagged with a key id so keys can rotate. The session's ledger (`_ledger.py`) keeps them;
a final answer's claims are checked against it (`_claims.py`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import ConfigError, ReceiptsConfig
from .heuristics import EMPTY_MUTATION_RESULT
from .verdicts import Trip

log = logging.getLogger("agent_breaker")

RECEIPT_VERSION = 2  # 2: the tenant is signed too


@dataclass(frozen=True)
class ReceiptKeys:
    """Signing keys: the current one signs, the current and previous ones verify."""

    current_id: str
    keys: Mapping[str, bytes]

    def __post_init__(self) -> None:
        if self.current_id not in self.keys:
            raise ConfigError(f"receipt key id {self.current_id!r} is not among the keys {sorted(self.keys)}")
        for kid, key in self.keys.items():
            if len(key) < 16:
                raise ConfigError(f"receipt key {kid!r} is {len(key)} bytes; use at least 16 random bytes")

    @classmethod
    def ephemeral(cls) -> ReceiptKeys:
        """A random key that lives as long as the process (replay, development)."""
        return cls("ephemeral", {"ephemeral": secrets.token_bytes(32)})

    @classmethod
    def parse(cls, spec: str, *, source: str) -> ReceiptKeys:
        """`kid:key[,kid:key...]`, the first pair current; keys as hex or base64."""
        pairs = [p.strip() for p in spec.split(",") if p.strip()]
        keys: dict[str, bytes] = {}
        for pair in pairs:
            kid, sep, raw = pair.partition(":")
            if not sep or not kid or not raw:
                raise ConfigError(f"{source}: expected 'kid:key[,kid:key...]', got an entry without a key id")
            keys[kid] = _decode_key(raw, kid, source)
        if not keys:
            raise ConfigError(f"{source} holds no key")
        return cls(pairs[0].partition(":")[0], keys)

    @classmethod
    def from_file(cls, path: str | Path) -> ReceiptKeys:
        """A JSON file: {"current": "k2", "keys": {"k2": "<hex or base64>", "k1": "..."}}."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            current, raw = data["current"], data["keys"]
        except OSError as exc:
            raise ConfigError(f"cannot read receipt key file {path}: {exc.strerror}") from None
        except (ValueError, KeyError, TypeError):
            raise ConfigError(f"receipt key file {path} must be JSON with 'current' and 'keys'") from None
        if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
            raise ConfigError(f"receipt key file {path}: 'keys' must map key ids to hex or base64 strings")
        return cls(str(current), {str(kid): _decode_key(v, kid, str(path)) for kid, v in raw.items()})

    @classmethod
    def from_config(cls, cfg: ReceiptsConfig, *, required: bool) -> ReceiptKeys | None:
        if cfg.key_file:
            return cls.from_file(cfg.key_file)
        if cfg.keys:
            return cls.parse(cfg.keys, source=f"${cfg.key_env}")
        if cfg.dev_ephemeral_key:
            log.warning(
                "agent-breaker: DEVELOPMENT MODE: receipts are signed with an ephemeral key that dies with this "
                "process; no one else can verify them. Set $%s or receipts.key_file in production.",
                cfg.key_env,
            )
            return cls.ephemeral()
        if required:
            raise ConfigError(
                f"receipts need a signing key in enforce mode: set ${cfg.key_env} to 'kid:hexkey', or "
                "receipts.key_file, or (development only) receipts.dev_ephemeral_key: true"
            )
        return None


def _decode_key(raw: str, kid: str, source: str) -> bytes:
    raw = raw.strip()
    try:
        return bytes.fromhex(raw)
    except ValueError:
        pass
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{source}: key {kid!r} is neither hex nor base64") from None


def _signed_payload(receipt: Mapping[str, Any]) -> bytes:
    return json.dumps(
        [
            receipt["v"],
            receipt["kid"],
            receipt["tenant"],
            receipt["session"],
            receipt["call_id"],
            receipt["tool"],
            receipt["args_hash"],
            receipt["result_hash"],
            receipt["ts"],
        ],
        separators=(",", ":"),
        ensure_ascii=True,
    ).encode("ascii")


def mint(
    keys: ReceiptKeys, *, tenant: str | None, session: str, call_id: str, tool: str, args_hash: int, result_hash: int, ts: float
) -> dict[str, Any]:
    receipt: dict[str, Any] = {
        "v": RECEIPT_VERSION,
        "kid": keys.current_id,
        "tenant": tenant,
        "session": session,
        "call_id": call_id,
        "tool": tool,
        "args_hash": f"{args_hash:016x}",
        "result_hash": f"{result_hash:016x}",
        "ts": round(ts, 6),
    }
    receipt["sig"] = hmac.new(keys.keys[keys.current_id], _signed_payload(receipt), hashlib.sha256).hexdigest()
    return receipt


def verify(
    keys: ReceiptKeys,
    receipt: Mapping[str, Any],
    *,
    tenant: str | None,
    session: str,
    call_id: str,
    tool: str,
    result_hash: int,
) -> tuple[bool, str]:
    """Is this receipt genuine, and does it vouch for exactly this (tenant, session, call, tool, result)?"""
    try:
        key = keys.keys.get(receipt["kid"])
        if receipt["v"] != RECEIPT_VERSION:
            return False, f"unknown receipt version {receipt['v']!r}"
        expected = hmac.new(key or b"", _signed_payload(receipt), hashlib.sha256).hexdigest()
        sig = receipt["sig"]
    except (KeyError, TypeError):
        return False, "malformed receipt"
    if key is None:
        return False, f"unknown key id {receipt['kid']!r}"
    if not isinstance(sig, str) or not hmac.compare_digest(expected.encode(), sig.encode("utf-8", "surrogatepass")):
        return False, "bad signature: forged or tampered"
    if receipt["session"] != session or receipt["tenant"] != tenant:
        return False, "receipt belongs to another session"
    if receipt["call_id"] != call_id or receipt["tool"] != tool:
        return False, "receipt belongs to another call"
    if receipt["result_hash"] != f"{result_hash:016x}":
        return False, "result does not match the receipted one"
    return True, "ok"


def is_empty_result(result: Any) -> bool:
    return result is None or result == "" or result == {} or result == []


def empty_mutation_trip(tool: str) -> Trip:
    return Trip(
        EMPTY_MUTATION_RESULT,
        "call",
        f"{tool} changes the world but reported success with an empty payload",
        f"Do not assume {tool} took effect: check its outcome with a read-only tool before you report it.",
        {},
    )
