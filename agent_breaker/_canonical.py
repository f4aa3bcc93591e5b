"""Canonical forms, hashes and text-free fingerprints of tool arguments and results.

Everything the engine keeps about a payload is made here: a 64-bit hash of its canonical
JSON, or a sequence of 32-bit token hashes for fuzzy comparison. No text leaves this module.
"""

from __future__ import annotations

import functools
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
    # clocks that tick while nothing else moves: a stuck job's elapsed time is not progress
    "elapsed",
    "elapseds",
    "elapsedms",
    "elapsedtime",
    "uptime",
    "servertime",
    "lastcheckedat",
    "polledat",
)

MAX_FINGERPRINT_TOKENS = 256

_KEY_NORMALIZER = re.compile(r"[^0-9a-z]+")


class CanonicalError(ValueError):
    """A payload that cannot be put in canonical form (too big, too deep, not JSON)."""


@functools.lru_cache(maxsize=4096)
def normalize_key(key: str) -> str:
    return _KEY_NORMALIZER.sub("", key.lower())


class Canonicalizer:
    """Turns JSON-like values into one canonical string.

    Sorted keys, whitespace runs in strings collapsed, integral floats as ints, volatile keys
    (timestamps, request ids, nonces) dropped at any depth.
    """

    __slots__ = ("_volatile", "_keys", "max_bytes", "max_depth")

    def __init__(self, volatile_fields: Iterable[str], *, max_bytes: int, max_depth: int = 32) -> None:
        self._volatile = frozenset(normalize_key(f) for f in volatile_fields)
        self._keys: dict[str, bool] = {}  # key -> is volatile (keys repeat: decide once)
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

    def _is_volatile(self, key: str) -> bool:
        v = self._keys.get(key)
        if v is None:
            if len(self._keys) > 10_000:
                self._keys.clear()
            v = self._keys[key] = normalize_key(key) in self._volatile
        return v

    def _clean(self, value: Any, depth: int) -> Any:
        t = type(value)
        if t is str:
            return " ".join(value.split())
        if t is int or t is bool or value is None:
            return value
        if depth >= self.max_depth:
            raise CanonicalError(f"payload nested deeper than {self.max_depth} levels")
        if t is dict:
            volatile = self._is_volatile
            return {str(k): self._clean(v, depth + 1) for k, v in value.items() if not volatile(str(k))}
        if t is list or t is tuple:
            return [self._clean(v, depth + 1) for v in value]
        if t is float:
            if math.isnan(value) or math.isinf(value):
                raise CanonicalError("payload holds NaN or infinity")
            return int(value) if value.is_integer() and abs(value) < 2**53 else value
        if isinstance(value, str):
            return " ".join(value.split())
        if isinstance(value, (bool, int)):
            return value
        raise CanonicalError(f"unsupported type {type(value).__name__} in payload")


def hash64(*parts: str) -> int:
    """Stable 64-bit hash (the same in every process, unlike hash())."""
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return int.from_bytes(h.digest(), "big")


class _HashCache(dict):
    """token (UTF-8) -> salted crc32, filled on first use (map(cache.__getitem__, ...) stays in C).
    With `fold_digits`, digit runs in the token are folded to one symbol before hashing."""

    __slots__ = ("salt", "fold_digits")

    def __init__(self, salt: int, *, fold_digits: bool = False) -> None:
        super().__init__()
        self.salt = salt
        self.fold_digits = fold_digits

    def __missing__(self, token: bytes) -> int:
        if len(self) >= MAX_HASH_CACHE:
            self.clear()  # bounded; tokens repeat a lot, so it refills fast
        h = self[token] = zlib.crc32(_DIGIT_RUNS.sub(b"0", token) if self.fold_digits else token, self.salt)
        return h


MAX_HASH_CACHE = 50_000


class TokenHasher:
    """Word tokens (lower-cased) as salted 32-bit hashes: similar texts give similar
    sequences, and no text is kept."""

    __slots__ = ("_exact", "_shape")

    def __init__(self, salt: int) -> None:
        self._exact = _HashCache(salt)
        self._shape = _HashCache(salt, fold_digits=True)

    @staticmethod
    def words(text: str) -> list[bytes]:
        # ASCII punctuation and "_" separate words: bytes.translate + split is several times
        # faster than a regex over str
        words = text.lower().encode("utf-8", "surrogatepass").translate(_TO_SPACE).split()
        return words[:MAX_FINGERPRINT_TOKENS] if len(words) > MAX_FINGERPRINT_TOKENS else words

    def hashes(self, words: list[bytes]) -> tuple[int, ...]:
        return tuple(map(self._exact.__getitem__, words))

    def shape_hashes(self, words: list[bytes]) -> tuple[int, ...]:
        """The same with digit runs folded to one symbol: ids and numbers aside."""
        return tuple(map(self._shape.__getitem__, words))


_SEPARATORS = bytes(c for c in range(128) if not chr(c).isalnum())
_TO_SPACE = bytes.maketrans(_SEPARATORS, b" " * len(_SEPARATORS))
_DIGIT_RUNS = re.compile(rb"[0-9]+")


def salt_from(secret: str) -> int:
    return zlib.crc32(secret.encode("utf-8"))
