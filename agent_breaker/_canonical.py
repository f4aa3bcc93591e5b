"""Canonical forms, hashes and text-free fingerprints of tool arguments and results.

Everything the engine keeps about a payload is made here: a keyed 64-bit hash of its canonical
JSON, or a sequence of keyed 32-bit token hashes for fuzzy comparison. No text leaves this module.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
from collections.abc import Iterable
from typing import Any

from ._text import MIN_RANDOM_CHARS, has_invalid_chars, looks_random, looks_random_float, normalize_text

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

#: what churns in a result while nothing changes, over its canonical JSON: masked before judging
#: whether a result is new (progress). Ids, timestamps, durations, element refs and run numbers
#: change on every call of a stuck tool; counts, states and messages are kept, so "3 passed" ->
#: "4 passed" is still progress. Each pattern starts with a literal (the regex engine skips to
#: it at memchr speed: a class or a look-behind first costs ~30 ns per character); where the
#: churn begins before that literal, `left` says which characters, and how many, join the match.
# Two kinds of churn. Timing (how long, when, which attempt) never tells two answers apart;
# identity (an id, a ref, a run number) does when the arguments differ (two customers' records)
# but not when the same call is repeated (the same report under a fresh sub-agent id).
# Keys are matched as a suffix after a separator or a camel-case hump ("message_id",
# "messageId"), or whole; each is a fixed-width look-behind tried only where a key ends (`":`).
_ID_SUFFIXES = ("id", "ids", "uuid", "guid", "ref", "refs")
_ID_KEYS = ("etag", "pid", "run_number", "runnumber", "runNumber", "run_no")
_TIMING_KEYS = (
    "attempt",
    "attempts",
    "duration",
    "durations",
    "duration_ms",
    "durationMs",
    "duration_s",
    "took",
    "took_ms",
    "tookMs",
    "latency",
    "latency_ms",
    "latencyMs",
)


def _key_value_pattern(ends: list[tuple[str, str]]) -> re.Pattern[str]:
    """A scalar under one of these keys ((look-behind, key) pairs). Grouped by the key's last
    character, which one cheap look-behind checks first: most keys fail there."""
    groups: dict[str, list[str]] = {}
    for behind, word in ends:
        groups.setdefault(word[-1], []).append(f'(?<={behind}":)')
    alternatives = "|".join(f'(?<={last}":)(?:{"|".join(alts)})' for last, alts in sorted(groups.items()))
    lasts = "".join(sorted(groups))
    return re.compile(f'":(?<=[{lasts}]":)(?:{alternatives})' + r'(?:"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)')


_IDENTITY_KEY_VALUE = _key_value_pattern(
    [(f"[_\\-. ]{x}", x) for x in _ID_SUFFIXES]
    + [(f"[a-z0-9]{x.capitalize()}", x) for x in _ID_SUFFIXES]
    + [(f"[_\\-. ]{x.upper()}", x.upper()) for x in _ID_SUFFIXES]
    + [(f'"{x}', x) for x in _ID_SUFFIXES + tuple(x.upper() for x in _ID_SUFFIXES) + _ID_KEYS]
)
_TIMING_KEY_VALUE = _key_value_pattern([(f'"{x}', x) for x in _TIMING_KEYS])
_HEX = "0123456789abcdefABCDEF"
_DIGITS = "0123456789"
#: (pattern, characters that may precede it as part of the churn, how many at most, how many at least)
Led = tuple[re.Pattern[str], str, int, int]
_TIMING: tuple[Led, ...] = (
    # a time of day, with the date before it when written 2024-05-01T12:00:01
    (re.compile(r":[0-5]\d:[0-5]\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"), _DIGITS + "-T", 13, 1),
    # a duration: "in 0.53s", "took 12.5 ms", "3.2 seconds"; and whole milliseconds: "120ms"
    (re.compile(r"\.\d+ ?(?:ms|s|sec|secs|seconds)(?![A-Za-z])"), _DIGITS, 12, 1),
    (re.compile(r"ms(?<=\dms)(?![A-Za-z])"), _DIGITS, 12, 1),
    (re.compile(r" ms(?![A-Za-z])"), _DIGITS, 12, 1),
)
_IDENTITY: tuple[Led, ...] = (
    # a UUID: the match starts at its first dash, its first 8 hex digits precede it
    (re.compile(r"-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?![0-9a-zA-Z])"), _HEX, 8, 8),
    (re.compile(r"0x[0-9a-fA-F]{4,16}"), "", 0, 0),  # a memory address
    # an element ref of a page snapshot: [ref=e12], ref=e12
    (re.compile(r"\[ref=[^\]\s\"]{1,32}\]"), "", 0, 0),
    (re.compile(r"ref[=:] ?[A-Za-z]?\d+"), "", 0, 0),
    (re.compile(r"#(?<![\w&]#)\d+"), "", 0, 0),  # a run / build number: "run #45"
)


def _mask_led(text: str, pattern: re.Pattern[str], left: str, most: int, least: int) -> str:
    pieces: list[str] = []
    end = 0
    for m in pattern.finditer(text):
        start = m.start()
        while start > end and m.start() - start < most and text[start - 1] in left:
            start -= 1
        if m.start() - start < least:
            continue
        pieces.append(text[end:start])
        pieces.append("~")
        end = m.end()
    if not pieces:
        return text
    pieces.append(text[end:])
    return "".join(pieces)


def _mask(text: str, key_value: re.Pattern[str], led: tuple[Led, ...]) -> str:
    text = key_value.sub('":~', text)
    for pattern, left, most, least in led:
        text = _mask_led(text, pattern, left, most, least)
    return text


class ChurnMask:
    """Masks what churns in a result's canonical JSON (the built-in patterns above, unless
    turned off, plus the config's own regexes, which count as timing)."""

    __slots__ = ("_builtin", "_extra")

    def __init__(self, extra: Iterable[str], *, builtin: bool = True) -> None:
        extra = tuple(extra)
        self._builtin = builtin
        self._extra = re.compile("|".join(f"(?:{p})" for p in extra)) if extra else None

    def timing(self, canonical: str) -> str:
        """Timing masked: what a result answers, to compare answers to different calls."""
        text = _mask(canonical, _TIMING_KEY_VALUE, _TIMING) if self._builtin else canonical
        return text if self._extra is None else self._extra.sub("~", text)

    def identity(self, timed: str) -> str:
        """Identities masked too (on `timing`'s output): to compare repeats of one call."""
        return _mask(timed, _IDENTITY_KEY_VALUE, _IDENTITY) if self._builtin else timed

    def __call__(self, canonical: str) -> str:
        return self.identity(self.timing(canonical))


_KEY_NORMALIZER = re.compile(r"[^0-9a-z]+")


class CanonicalError(ValueError):
    """A payload that cannot be put in canonical form (too big, too deep, not JSON)."""


def normalize_key(key: str) -> str:
    return _KEY_NORMALIZER.sub("", normalize_text(key))


#: what a random-looking value (a nonce, a UUID, a random salt) is replaced with
RANDOM = "<random>"


#: keys whose values name something (an id, a digest, a path): a random-looking value there is
#: a different thing each time, never a nonce, so it is not masked
_NAMING_KEY_SUFFIXES = (
    "id",
    "ids",
    "uuid",
    "guid",
    "sha",
    "hash",
    "digest",
    "ref",
    "refs",
    "reference",
    "key",
    "keys",
    "name",
    "path",
    "url",
    "uri",
    "number",
    "code",
)


class Canonicalizer:
    """Turns JSON-like values into one canonical string.

    Sorted keys, whitespace runs in strings collapsed, integral floats as ints, volatile keys
    (timestamps, request ids, nonces) dropped at any depth. With `fold` (tool arguments,
    which the agent writes): keys and strings normalized (`_text.normalize_text`: look-alikes,
    invisible characters, case), random-looking keys dropped, and random-looking values
    (`_text.looks_random`: a nonce, a random salt) masked unless their key names something
    (`order_id`, `sha`, `path`: a different id is a different call).
    """

    __slots__ = ("_volatile", "_keys", "max_bytes", "max_depth", "fold")

    def __init__(self, volatile_fields: Iterable[str], *, max_bytes: int, max_depth: int = 32, fold: bool = False) -> None:
        self._volatile = frozenset(normalize_key(f) for f in volatile_fields)
        # keys repeat a lot: what a key is (volatile, naming) is decided once and remembered
        # by the key's Python hash (keyed per process), so the cache holds no key text
        self._keys: dict[int, tuple[bool, bool]] = {}
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        self.fold = fold

    def canonical(self, value: Any) -> str:
        try:
            text = json.dumps(
                self._clean(value, 0, self.fold), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
            )
        except (TypeError, ValueError) as exc:
            if isinstance(exc, CanonicalError):
                raise
            raise CanonicalError(f"not a JSON value: {exc}") from None
        if len(text) > self.max_bytes:
            raise CanonicalError(f"payload is {len(text)} characters in canonical form, over the limit of {self.max_bytes}")
        if has_invalid_chars(text):
            raise CanonicalError("payload holds a lone surrogate (not valid Unicode text)")
        return text

    def _key(self, key: str) -> tuple[bool, bool]:
        """(volatile, naming) of a key."""
        h = hash(key)
        info = self._keys.get(h)
        if info is None:
            if len(self._keys) > 10_000:
                self._keys.clear()
            norm = normalize_key(key)
            volatile = norm in self._volatile or (self.fold and looks_random(key))
            info = self._keys[h] = (volatile, norm.endswith(_NAMING_KEY_SUFFIXES))
        return info

    def _string(self, value: str, mask: bool) -> str:
        if self.fold:
            value = normalize_text(value)
        value = " ".join(value.split())
        return RANDOM if mask and len(value) >= MIN_RANDOM_CHARS and looks_random(value) else value

    def _clean(self, value: Any, depth: int, mask: bool) -> Any:
        t = type(value)
        if t is str:
            return self._string(value, mask)
        if t is int or t is bool or value is None:
            return value
        if depth >= self.max_depth:
            raise CanonicalError(f"payload nested deeper than {self.max_depth} levels")
        if t is dict:
            out = {}
            for k, v in value.items():
                k = k if type(k) is str else str(k)
                volatile, naming = self._key(k)
                if not volatile:
                    out[normalize_text(k) if self.fold else k] = self._clean(v, depth + 1, self.fold and not naming)
            return out
        if t is list or t is tuple:
            return [self._clean(v, depth + 1, mask) for v in value]
        if t is float:
            if math.isnan(value) or math.isinf(value):
                raise CanonicalError("payload holds NaN or infinity")
            if value.is_integer() and abs(value) < 2**53:
                return int(value)
            return RANDOM if mask and looks_random_float(value) else value
        if isinstance(value, str):
            return self._string(str(value), mask)
        if isinstance(value, (bool, int)):
            return value
        raise CanonicalError(f"unsupported type {type(value).__name__} in payload")


class Fingerprinter:
    """Keyed hashes of everything the engine keeps about a payload.

    A 64-bit keyed BLAKE2b of canonical calls, results and references, and 32-bit keyed
    hashes of word tokens for fuzzy comparison. Without the key no stored hash can be tested
    against a guess (a PIN, an IBAN word), so stored state reveals no text. Every worker of a
    fleet must hold the same secret, or their fingerprints will not compare.

    Token hashes are cached by the token's Python hash (SipHash under the interpreter's random
    per-process key), never by the token itself: the cache holds no words.
    """

    __slots__ = ("_key", "_exact", "_shape")

    def __init__(self, secret: bytes) -> None:
        if not secret:
            raise ValueError("a fingerprint secret must not be empty")
        self._key = hashlib.blake2b(secret, digest_size=32, person=b"ab-fprint").digest()
        self._exact: dict[int, int] = {}
        self._shape: dict[int, int] = {}

    @classmethod
    def ephemeral(cls) -> Fingerprinter:
        """A random key that lives as long as the process."""
        return cls(secrets.token_bytes(32))

    def hash64(self, *parts: str) -> int:
        """Keyed 64-bit hash of strings (the same in every process holding the same secret)."""
        h = hashlib.blake2b(digest_size=8, key=self._key)
        for part in parts:
            h.update(part.encode("utf-8", "surrogatepass"))
            h.update(b"\x00")
        return int.from_bytes(h.digest(), "big")

    def tokens(self, text: str) -> tuple[int, ...]:
        """One keyed 32-bit hash per word of a text (lower-cased; ASCII punctuation and "_"
        separate words; at most MAX_FINGERPRINT_TOKENS words)."""
        return self._lookup(self._exact, _words(text.lower().encode("utf-8", "surrogatepass")))

    def shapes(self, text: str) -> tuple[int, ...]:
        """The same with digit runs folded to one symbol: ids and numbers aside."""
        return self._lookup(self._shape, _words(_DIGIT_RUNS.sub(b"0", text.lower().encode("utf-8", "surrogatepass"))))

    def _lookup(self, cache: dict[int, int], words: list[bytes]) -> tuple[int, ...]:
        ids = tuple(map(hash, words))
        try:
            return tuple(map(cache.__getitem__, ids))  # all in C when every word is known
        except KeyError:
            if len(cache) >= MAX_HASH_CACHE:
                cache.clear()  # bounded; words repeat a lot, so it refills fast
            key = self._key
            for word, i in zip(words, ids, strict=True):
                if i not in cache:
                    cache[i] = int.from_bytes(hashlib.blake2b(word, digest_size=4, key=key).digest(), "big")
            return tuple(map(cache.__getitem__, ids))


def _words(data: bytes) -> list[bytes]:
    # bytes.translate + split is several times faster than a regex over str
    words = data.translate(_TO_SPACE).split()
    return words[:MAX_FINGERPRINT_TOKENS] if len(words) > MAX_FINGERPRINT_TOKENS else words


MAX_HASH_CACHE = 50_000
_SEPARATORS = bytes(c for c in range(128) if not chr(c).isalnum())
_TO_SPACE = bytes.maketrans(_SEPARATORS, b" " * len(_SEPARATORS))
_DIGIT_RUNS = re.compile(rb"[0-9]+")
