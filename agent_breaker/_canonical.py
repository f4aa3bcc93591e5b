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
_HAS_DIGIT = re.compile(r"\d")


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


class TokenHasher:
    """Word tokens as salted 32-bit hashes, with the hash of each distinct token cached (a
    bounded cache: tokens repeat a lot across calls)."""

    __slots__ = ("salt", "_cache")

    MAX_CACHE = 50_000

    def __init__(self, salt: int) -> None:
        self.salt = salt
        self._cache: dict[str, int] = {}

    def _hash(self, token: str) -> int:
        h = self._cache.get(token)
        if h is None:
            if len(self._cache) >= self.MAX_CACHE:
                self._cache.clear()
            h = self._cache[token] = zlib.crc32(token.encode("utf-8", "surrogatepass"), self.salt)
        return h

    def tokens(self, text: str) -> list[str]:
        tokens = _TOKEN.findall(text.lower())
        return tokens[:MAX_FINGERPRINT_TOKENS] if len(tokens) > MAX_FINGERPRINT_TOKENS else tokens

    def hashes(self, tokens: list[str]) -> tuple[int, ...]:
        h = self._hash
        return tuple([h(t) for t in tokens])

    def shape_hashes(self, tokens: list[str]) -> tuple[int, ...]:
        """The same with digit runs folded to one symbol (ids and numbers aside). Folding digits
        does not move token boundaries, so it works on the tokens directly."""
        h = self._hash
        return tuple([h(_DIGITS.sub("0", t)) if _HAS_DIGIT.search(t) else h(t) for t in tokens])


def salt_from(secret: str) -> int:
    return zlib.crc32(secret.encode("utf-8"))
