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
from operator import itemgetter
from typing import Any

import orjson

from ._errors import AgentBreakerError
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

_KEY_NORMALIZER = re.compile(r"[^0-9a-z]+")


class CanonicalError(AgentBreakerError, ValueError):
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

    __slots__ = ("_volatile", "_keys", "_kept_keys", "max_bytes", "max_depth", "fold")

    def __init__(self, volatile_fields: Iterable[str], *, max_bytes: int, max_depth: int = 32, fold: bool = False) -> None:
        self._volatile = frozenset(normalize_key(f) for f in volatile_fields)
        # keys repeat a lot: what a key is (volatile, naming) is decided once and remembered
        # by the key's Python hash (keyed per process), so the cache holds no key text
        self._keys: dict[int, tuple[bool, bool]] = {}
        # without fold, the hashes of the key tuples of dicts whose keys are all str and kept: such
        # a dict is kept as it is (its values cleaned) after one lookup instead of one a key
        self._kept_keys: set[int] = set()
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        self.fold = fold

    def canonical(self, value: Any) -> str:
        # without fold most of a payload is clean already and kept as it is (_kept); what that
        # way fails on, or orjson refuses of what it made, is done again the exact way (_clean)
        text = None if self.fold else self._kept_text(value)
        valid = True  # orjson refuses lone surrogates
        if text is None:
            try:
                tree = self._clean(value, 0, self.fold)
                try:
                    text = orjson.dumps(tree, option=_ORJSON_OPTIONS).decode()
                except orjson.JSONEncodeError:
                    # an int beyond 64 bits, a _ReprFloat, a key made of str() but not a str, a
                    # lone surrogate: json writes (or refuses) what orjson refuses
                    text = json.dumps(tree, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
                    valid = not has_invalid_chars(text)
            except (TypeError, ValueError) as exc:
                if isinstance(exc, CanonicalError):
                    raise
                raise CanonicalError(f"not a JSON value: {exc}") from None
        if len(text) > self.max_bytes:
            raise CanonicalError(f"payload is {len(text)} characters in canonical form, over the limit of {self.max_bytes}")
        if not valid:
            raise CanonicalError("payload holds a lone surrogate (not valid Unicode text)")
        return text

    def is_volatile(self, key: str) -> bool:
        """Is this key dropped from the canonical form (a timestamp, a request id)."""
        return self._key(key)[0]

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
        value = collapse_whitespace(value)
        return RANDOM if mask and len(value) >= MIN_RANDOM_CHARS and looks_random(value) else value

    def _clean(self, value: Any, depth: int, mask: bool) -> Any:
        """The value as it is written: dicts, lists, str, int, float, bool and None that json.dumps
        writes in canonical form, and orjson too when it takes them."""
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
            if mask and looks_random_float(value):
                return RANDOM
            return value if _ORJSON_FLOATS[0] <= abs(value) < _ORJSON_FLOATS[1] else _ReprFloat(value)
        if isinstance(value, str):
            return self._string(str(value), mask)
        if isinstance(value, int):
            # json writes an int subclass as the int it holds (int.__repr__), orjson an enum's value
            return int.__index__(value)
        raise CanonicalError(f"unsupported type {type(value).__name__} in payload")

    def _kept_text(self, value: Any) -> str | None:
        """The canonical form of `value` made the fast way (no fold), or None where only the
        exact way can tell it (an error to word, a key to make a str of)."""
        try:
            return orjson.dumps(self._kept(value, 0), option=_ORJSON_OPTIONS).decode()
        except (TypeError, ValueError):  # orjson's refusals (TypeError) and CanonicalError
            return None

    def _kept(self, value: Any, depth: int) -> Any:
        """`_clean(value, depth, False)` that keeps what is clean already as it is instead of
        copying it. A dict is checked by the hash of its key tuple, known when its keys are all
        str and kept; a tuple of other keys with the same hash ("" hashes as 0 and False do)
        keeps its keys, which orjson refuses."""
        t = type(value)
        if t is dict and depth < self.max_depth:
            signature = hash(tuple(value))
            if signature not in self._kept_keys:
                if not _STR.issuperset(map(type, value)):
                    return self._clean(value, depth, False)
                kept = [k for k in value if not self._key(k)[0]]
                if len(kept) < len(value):
                    value = {k: value[k] for k in kept}
                else:
                    if len(self._kept_keys) > 10_000:
                        self._kept_keys.clear()
                    self._kept_keys.add(signature)
            return self._kept_values(value, value.items(), depth)
        if (t is list or t is tuple) and depth < self.max_depth:
            return self._kept_values(value, enumerate(value), depth)
        return self._clean(value, depth, False)

    def _kept_values(self, value: Any, items: Iterable[tuple[Any, Any]], depth: int) -> Any:
        """`value` (a dict of kept keys, a list or a tuple) with its values `_kept`: itself when
        none changes (the common case), else a copy. What `_clean` keeps as it is (a clean
        string, an int, a float in _ORJSON_FLOATS) is recognized here: a call costs as much."""
        out = None
        depth += 1
        nested = depth < self.max_depth  # a container or a float here is not too deep
        for k, v in items:
            t = type(v)
            if t is str:
                c = collapse_whitespace(v)
                if c == v:
                    continue
            elif (
                t is int
                or v is None
                or t is bool
                or (nested and t is float and _ORJSON_FLOATS[0] <= abs(v) < _ORJSON_FLOATS[1] and not v.is_integer())
            ):
                continue
            elif nested and t is dict and hash(tuple(v)) in self._kept_keys:  # _kept's case of a known dict
                c = self._kept_values(v, v.items(), depth)
                if c is v:
                    continue
            else:
                c = self._kept(v, depth)
                if c is v:
                    continue
            if out is None:
                out = dict(value) if type(value) is dict else list(value)
            out[k] = c
        return value if out is None else out


_STR = frozenset((str,))
_ORJSON_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_SUBCLASS
#: the floats whose text orjson writes as Python's repr does (fixed notation; below, orjson
#: writes 0.0000999 for 9.99e-05, and older versions 1e16 for 1e+16)
_ORJSON_FLOATS = (1e-4, 1e16)


class _ReprFloat(float):
    """A float outside _ORJSON_FLOATS: orjson refuses float subclasses, json.dumps writes them
    with float.__repr__ like any float."""

    __slots__ = ()


# the whitespace of str.split() but the space: the ASCII characters are replaced one by one
# (each found by memchr), the others only in text that is not ASCII
_ASCII_WHITESPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f"
_OTHER_WHITESPACE = re.compile("[\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")
_SPACES = re.compile("  [ ]*")  # "  +" has no literal prefix for the regex engine to skip to
_LONG_TEXT = 160


def collapse_whitespace(text: str) -> str:
    """`" ".join(text.split())`: each run of whitespace one space, none at either end. Splitting
    costs a string a word; a long text is done by the run instead (a shell output: a run a line)."""
    if len(text) < _LONG_TEXT:
        return " ".join(text.split())
    for c in _ASCII_WHITESPACE:
        if c in text:
            text = text.replace(c, " ")
    if not text.isascii():
        text = _OTHER_WHITESPACE.sub(" ", text)
    return _SPACES.sub(" ", text).strip(" ")


class Fingerprinter:
    """Keyed hashes of everything the engine keeps about a payload.

    A 64-bit keyed BLAKE2b of canonical calls, results and references, and 32-bit keyed
    hashes of word tokens for fuzzy comparison. Without the key no stored hash can be tested
    against a guess (a PIN, an IBAN word), so stored state reveals no text. Every worker of a
    fleet must hold the same secret, or their fingerprints will not compare.

    Token hashes are cached by the token's Python hash (SipHash under the interpreter's random
    per-process key), never by the token itself: the cache holds no words.
    """

    __slots__ = ("_hash64", "_hash32", "_exact", "_shape", "_labeled")

    def __init__(self, secret: bytes) -> None:
        if not secret:
            raise ValueError("a fingerprint secret must not be empty")
        key = hashlib.blake2b(secret, digest_size=32, person=b"ab-fprint").digest()
        # keyed states with the key already absorbed: each hash copies one (half the work)
        self._hash64 = hashlib.blake2b(digest_size=8, key=key)
        self._hash32 = hashlib.blake2b(digest_size=4, key=key)
        self._exact: dict[int, int] = {}
        self._shape: dict[int, int] = {}
        self._labeled: dict[int, int] = {}

    @classmethod
    def ephemeral(cls) -> Fingerprinter:
        """A random key that lives as long as the process."""
        return cls(secrets.token_bytes(32))

    def hash64(self, *parts: str) -> int:
        """Keyed 64-bit hash of strings (the same in every process holding the same secret)."""
        h = self._hash64.copy()
        for part in parts:
            h.update(part.encode("utf-8", "surrogatepass"))
            h.update(b"\x00")
        return int.from_bytes(h.digest(), "big")

    def labeled(self, label: str, text: str) -> int:
        """`hash64(label, text)`, remembered (by the pair's Python hash, never by the text): for
        short values that come back again and again (argument values, digit runs)."""
        i = hash((label, text))
        found = self._labeled.get(i)
        if found is None:
            if len(self._labeled) >= MAX_HASH_CACHE:
                self._labeled.clear()
            # kept here, not read back: another thread may empty the cache
            found = self._labeled[i] = self.hash64(label, text)
        return found

    def labeled_many(self, label: str, items: Iterable[bytes]) -> set[int]:
        """`{hash64(label, item) for item in items}` for ASCII byte strings, the label absorbed
        once (many short items: a page's digit runs)."""
        base = self._hash64.copy()
        base.update(label.encode() + b"\x00")
        out = set()
        for item in items:
            h = base.copy()
            h.update(item + b"\x00")
            out.add(int.from_bytes(h.digest(), "big"))
        return out

    def tokens(self, text: str) -> tuple[int, ...]:
        """One keyed 32-bit hash per word of a text (lower-cased; ASCII punctuation and "_"
        separate words; at most MAX_FINGERPRINT_TOKENS words)."""
        return self._lookup(self._exact, _words(text, False))

    def shapes(self, text: str) -> tuple[int, ...]:
        """The same with digit runs folded to one symbol: ids and numbers aside."""
        return self._lookup(self._shape, _words(text, True))

    def _lookup(self, cache: dict[int, int], words: list[bytes]) -> tuple[int, ...]:
        ids = list(map(hash, words))  # a list: tuple() of a map grows step by step
        try:
            # all in C when every word is known (itemgetter: no method call a word)
            return itemgetter(*ids)(cache) if len(ids) > 1 else tuple(map(cache.__getitem__, ids))
        except KeyError:
            if len(cache) >= MAX_HASH_CACHE:
                cache.clear()  # bounded; words repeat a lot, so it refills fast
            hashes = []
            for word, i in zip(words, ids, strict=True):
                found = cache.get(i)
                if found is None:  # kept here, not read back: another thread may empty the cache
                    h = self._hash32.copy()
                    h.update(word)
                    found = cache[i] = int.from_bytes(h.digest(), "big")
                hashes.append(found)
            return tuple(hashes)


def _words(text: str, fold_digits: bool) -> list[bytes]:
    """The first MAX_FINGERPRINT_TOKENS words of a text, lower-cased (digit runs one "0" each
    with `fold_digits`)."""
    # a long ASCII text is read from a prefix holding more words than are kept: its first words
    # are whole (ASCII lower-casing looks at no neighbour; other text's does: the final sigma)
    if len(text) > _PREFIX_CHARS and text.isascii():
        words = _split(text[:_PREFIX_CHARS], fold_digits)
        if len(words) > MAX_FINGERPRINT_TOKENS:
            return words[:MAX_FINGERPRINT_TOKENS]
    words = _split(text, fold_digits)
    return words[:MAX_FINGERPRINT_TOKENS] if len(words) > MAX_FINGERPRINT_TOKENS else words


def _split(text: str, fold_digits: bool) -> list[bytes]:
    # bytes.translate + split is several times faster than a regex over str
    data = text.lower().encode("utf-8", "surrogatepass")
    if fold_digits:
        # every digit "0", then each run of them one: a regex led by a literal skips to it fast,
        # one led by a class ([0-9]+) tries every byte
        return _ZERO_RUNS.sub(b"0", data.translate(_TO_SPACE_DIGITS_TO_ZERO)).split()
    return data.translate(_TO_SPACE).split()


MAX_HASH_CACHE = 50_000
_SEPARATORS = bytes(c for c in range(128) if not chr(c).isalnum())
_TO_SPACE = bytes.maketrans(_SEPARATORS, b" " * len(_SEPARATORS))
_TO_SPACE_DIGITS_TO_ZERO = bytes.maketrans(_SEPARATORS + b"0123456789", b" " * len(_SEPARATORS) + b"0" * 10)
_ZERO_RUNS = re.compile(rb"00+")
_PREFIX_CHARS = 16 * MAX_FINGERPRINT_TOKENS
