"""Canonical forms, hashes and text-free fingerprints of tool arguments and results.

Everything the engine keeps about a payload is made here: a 64-bit hash of its canonical
JSON, or a sequence of 32-bit token hashes for fuzzy comparison. No text leaves this module.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import zlib
from collections.abc import Iterable
from typing import Any

# Keys are compared after lower-casing and dropping everything but letters and digits, so
# "requestId", "request_id" and "Request-ID" are one key.
DEFAULT_VOLATILE_FIELDS: tuple[str, ...] = (
    "timestamp",
    "ts",
    "time",
    "now",
    "datetime",
    "createdat",
    "updatedat",
    "checkedat",
    "requestid",
    "reqid",
    "nonce",
    "traceid",
    "spanid",
    "correlationid",
    "idempotencykey",
    "cachebuster",
)

MAX_FINGERPRINT_TOKENS = 256

_KEY_NORMALIZER = re.compile(r"[^0-9a-z]+")
_TOKEN = re.compile(r"[^\W_]+")
_DIGITS = re.compile(r"\d+")


class CanonicalError(ValueError):
    """A payload that cannot be put in canonical form (too big, too deep, not JSON)."""


def normalize_key(key: str) -> str:
    return _KEY_NORMALIZER.sub("", key.lower())


class Canonicalizer:
    """Turns JSON-like values into one canonical string.

    Sorted keys, whitespace runs in strings collapsed, integral floats as ints, volatile keys
    (timestamps, request ids, nonces) dropped at any depth.
    """

    __slots__ = ("_volatile", "max_bytes", "max_depth")

    def __init__(self, volatile_fields: Iterable[str], *, max_bytes: int, max_depth: int = 32) -> None:
        self._volatile = frozenset(normalize_key(f) for f in volatile_fields)
        self.max_bytes = max_bytes
        self.max_depth = max_depth

    def canonical(self, value: Any) -> str:
        try:
            text = json.dumps(
                self._clean(value, 0), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
            )
        except (TypeError, ValueError) as exc:
            if isinstance(exc, CanonicalError):
                raise
            raise CanonicalError(f"not a JSON value: {exc}") from None
        if len(text) > self.max_bytes:
            raise CanonicalError(f"payload is {len(text)} characters in canonical form, over the limit of {self.max_bytes}")
        return text

    def _clean(self, value: Any, depth: int) -> Any:
        if depth > self.max_depth:
            raise CanonicalError(f"payload nested deeper than {self.max_depth} levels")
        if isinstance(value, str):
            return " ".join(value.split())
        if isinstance(value, bool) or value is None or isinstance(value, int):
            return value
        if isinstance(value, float):
            if math.isnan(value) or math.isinf(value):
                raise CanonicalError("payload holds NaN or infinity")
            return int(value) if value.is_integer() and abs(value) < 2**53 else value
        if isinstance(value, dict):
            volatile = self._volatile
            return {
                str(k): self._clean(v, depth + 1)
                for k, v in value.items()
                if normalize_key(str(k)) not in volatile
            }
        if isinstance(value, (list, tuple)):
            return [self._clean(v, depth + 1) for v in value]
        raise CanonicalError(f"unsupported type {type(value).__name__} in payload")


def hash64(*parts: str) -> int:
    """Stable 64-bit hash (the same in every process, unlike hash())."""
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return int.from_bytes(h.digest(), "big")


def token_hashes(text: str, *, salt: int, shape: bool = False) -> tuple[int, ...]:
    """Word tokens of `text` (lower-cased; digit runs folded to one symbol when `shape`) as
    32-bit hashes. Similar texts give similar sequences, and no text is kept."""
    text = text.lower()
    if shape:
        text = _DIGITS.sub("0", text)
    tokens = _TOKEN.findall(text)
    if len(tokens) > MAX_FINGERPRINT_TOKENS:
        tokens = tokens[:MAX_FINGERPRINT_TOKENS]
    return tuple(zlib.crc32(t.encode("utf-8", "surrogatepass"), salt) for t in tokens)


def salt_from(secret: str) -> int:
    return zlib.crc32(secret.encode("utf-8"))
