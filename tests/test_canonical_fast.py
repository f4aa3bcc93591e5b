"""The canonical form and the word fingerprints of `_canonical` are exactly what the code they
replaced gave, for every input: that code, copied here as the oracle, against the new one
(hypothesis) on arbitrary JSON-like values (whitespace of every kind, escapes, lone surrogates,
volatile keys in every spelling, floats of every range, huge ints, subclasses, deep nesting),
with the same errors; and the facts the fast paths stand on (orjson writes what json writes,
the whitespace str.split() splits on)."""

from __future__ import annotations

import enum
import hashlib
import json
import math
import random
import re
import struct
from typing import Any

import orjson
import pytest
from conftest import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_breaker._canonical import (
    _ASCII_WHITESPACE,
    _NAMING_KEY_SUFFIXES,
    _ORJSON_FLOATS,
    _ORJSON_OPTIONS,
    _OTHER_WHITESPACE,
    _PREFIX_CHARS,
    DEFAULT_VOLATILE_FIELDS,
    MAX_FINGERPRINT_TOKENS,
    RANDOM,
    CanonicalError,
    Canonicalizer,
    Fingerprinter,
    collapse_whitespace,
    normalize_key,
)
from agent_breaker._text import MIN_RANDOM_CHARS, has_invalid_chars, looks_random, looks_random_float, normalize_text


# ---- the oracle: Canonicalizer and the word fingerprints as they were in _canonical.py ----
class OracleCanonicalizer:
    def __init__(self, volatile_fields: Any, *, max_bytes: int, max_depth: int = 32, fold: bool = False) -> None:
        self._volatile = frozenset(normalize_key(f) for f in volatile_fields)
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


class OracleFingerprinter:
    def __init__(self, secret: bytes) -> None:
        self._key = hashlib.blake2b(secret, digest_size=32, person=b"ab-fprint").digest()
        self._exact: dict[int, int] = {}
        self._shape: dict[int, int] = {}

    def tokens(self, text: str) -> tuple[int, ...]:
        return self._lookup(self._exact, _oracle_words(text.lower().encode("utf-8", "surrogatepass")))

    def shapes(self, text: str) -> tuple[int, ...]:
        return self._lookup(self._shape, _oracle_words(_DIGIT_RUNS.sub(b"0", text.lower().encode("utf-8", "surrogatepass"))))

    def _lookup(self, cache: dict[int, int], words: list[bytes]) -> tuple[int, ...]:
        ids = tuple(map(hash, words))
        try:
            return tuple(map(cache.__getitem__, ids))
        except KeyError:
            if len(cache) >= 50_000:
                cache.clear()
            key = self._key
            for word, i in zip(words, ids, strict=True):
                if i not in cache:
                    cache[i] = int.from_bytes(hashlib.blake2b(word, digest_size=4, key=key).digest(), "big")
            return tuple(map(cache.__getitem__, ids))


def _oracle_words(data: bytes) -> list[bytes]:
    words = data.translate(_TO_SPACE).split()
    return words[:MAX_FINGERPRINT_TOKENS] if len(words) > MAX_FINGERPRINT_TOKENS else words


_SEPARATORS = bytes(c for c in range(128) if not chr(c).isalnum())
_TO_SPACE = bytes.maketrans(_SEPARATORS, b" " * len(_SEPARATORS))
_DIGIT_RUNS = re.compile(rb"[0-9]+")

# ---------------------------------------------------------------------------------- the facts

#: every character str.split() splits on
WHITESPACE = "".join(c for c in map(chr, range(0x110000)) if c.isspace())


def test_the_whitespace_replaced_is_what_str_split_splits_on() -> None:
    others = "".join(c for c in WHITESPACE if not c.isascii())
    assert sorted(WHITESPACE) == sorted(_ASCII_WHITESPACE + " " + others)
    assert _OTHER_WHITESPACE.sub("", others) == ""
    assert not _OTHER_WHITESPACE.search("".join(c for c in map(chr, range(0x80, 0x110000)) if not c.isspace()))


def test_orjson_writes_every_character_as_json_does_in_values_and_sorted_keys() -> None:
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    chunks = ["".join(chars[i : i + 2048]) + "\\" + '"' for i in range(0, len(chars), 2048)]
    # each character once as a key of its own, so that sorting compares them all
    keyed = {c: i for i, c in enumerate(chars[::97])}
    for value in (chunks, keyed):
        expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert orjson.dumps(value, option=_ORJSON_OPTIONS).decode() == expected


def test_orjson_writes_the_floats_it_is_given_as_repr_does() -> None:
    rng = random.Random(7)
    low, high = _ORJSON_FLOATS
    checked = 0
    while checked < 100_000:
        x = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if not low <= abs(x) < high:
            x = math.copysign(10 ** rng.uniform(-4, 16), x)
            x = round(x, rng.randint(0, 17)) if rng.random() < 0.5 else x
        if low <= abs(x) < high:
            assert orjson.dumps(x).decode() == repr(x)
            checked += 1
    for x in (low, math.nextafter(high, 0), 0.1, 123.456, 2.0**53, 2.0**53 + 2, 1234567890123456.7, 0.30000000000000004):
        assert orjson.dumps(x).decode() == repr(x)


@pytest.mark.parametrize("value", [{"a": 1}, {"k": [1, 2.5]}, (1, 2)])
def test_orjson_refuses_what_the_fast_path_leaves_to_json(value: Any) -> None:
    class Key(str):
        pass

    class Float(float):
        pass

    class Int(int):
        pass

    for odd in (Float(1.5), Int(3), 2**64, -(2**63) - 1, "\ud800", {Key("a"): 1}, {1: 2}, {"\udfff": 1}):
        with pytest.raises(orjson.JSONEncodeError):
            orjson.dumps([value, odd], option=_ORJSON_OPTIONS)


# ---------------------------------------------------------------------------------- strategies

SPECIAL = list(WHITESPACE) + [
    '"',
    "\\",
    "/",
    "\x00",
    "\x08",
    "\x7f",
    "\ud800",
    "\udfff",
    "é",
    "Σ",
    "ς",
    "ﬁ",
    "Ａ",
    "\u200b",
    "\ufeff",
]
chars = st.one_of(st.sampled_from(SPECIAL), st.characters(exclude_categories=()))
short_text = st.text(chars, max_size=12)
# long texts cross collapse_whitespace's long case: words and runs of whitespace of every kind
pieces = st.one_of(
    st.text(st.sampled_from('abcXYZ09\\"é_-.:Σ'), min_size=1, max_size=9),
    st.text(st.sampled_from(WHITESPACE), min_size=1, max_size=7),
    st.sampled_from(["\r\n", " \n", "\n    ", "  ", "\\n", "\\\\n", '\\"', "\ud800"]),
)
long_text = st.lists(pieces, min_size=20, max_size=160).map("".join)
texts = st.one_of(short_text, long_text)


class Color(enum.IntEnum):
    RED = 1


class Label(str):
    pass


class Count(int):
    pass


def _spellings(name: str) -> list[str]:
    camel = name[:2] + name[2:].capitalize()
    return [name, name.upper(), name.title(), camel, name[:2] + "_" + name[2:], name[:1] + "-" + name[1:].upper(), " " + name]


VOLATILE_KEYS = [s for name in DEFAULT_VOLATILE_FIELDS for s in _spellings(name)] + [
    "Request-ID",
    "ｔｉｍｅｓｔａｍｐ",
    "tіmestamp",
]
NAMED_KEYS = ["order_id", "sha", "path", "name", "url", "user", "query", "id", "x", "a b", "a\nb", 'q"', "back\\slash", ""]
keys = st.one_of(
    short_text,
    st.sampled_from(VOLATILE_KEYS + NAMED_KEYS),
    st.text(st.sampled_from("0123456789abcdefABCDEFxyz"), min_size=16, max_size=24),  # random-looking
    st.builds(Label, short_text),
    st.integers(-3, 3),
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
)


FLOATS = [
    -0.0,
    0.0,
    1e-4,
    9.99e-5,
    1e-5,
    1e-7,
    1e-10,
    5e-324,
    1e16,
    1e15 + 0.5,
    2.0**53,
    2.0**53 + 2,
    1e300,
    3.0,
    -7.0,
    0.1,
    0.123456789012345,
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**30]),
    st.just(None).map(lambda _: 10**5000),  # beyond what int -> str converts (a repr of its own fails)
    st.floats(),
    st.sampled_from(FLOATS),
    st.floats(min_value=1e-6, max_value=1e17),
    texts,
    st.text(st.sampled_from("0123456789abcdefABCDEF"), min_size=16, max_size=40),  # random-looking values
    st.builds(Label, texts),
    st.builds(Count, st.integers()),
    st.just(Color.RED),
)
unsupported = st.sampled_from([b"bytes", frozenset({1}), 1j, object()])
values = st.recursive(
    st.one_of(scalars, scalars, scalars, unsupported),
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(keys, children, max_size=5),
    ),
    max_leaves=30,
)


def nest(leaf: Any, kinds: list[int]) -> Any:
    for kind in kinds:
        leaf = [leaf] if kind == 0 else (leaf,) if kind == 1 else {"k": leaf, "ts": 1} if kind == 2 else {"k": leaf}
    return leaf


deep = st.builds(
    nest, st.one_of(scalars, st.dictionaries(keys, scalars, max_size=3)), st.lists(st.integers(0, 3), min_size=25, max_size=70)
)


# ------------------------------------------------------------------------------ canonical form


def outcome(canonicalizer: Any, value: Any) -> tuple[str, str]:
    try:
        return "text", canonicalizer.canonical(value)
    except CanonicalError as exc:
        return "error", str(exc)


# one pair per configuration for the whole run: the new caches (keys seen before) are crossed too
CONFIGS = [
    dict(max_bytes=16 * 1024 * 1024, max_depth=64, fold=False),
    dict(max_bytes=64 * 1024, max_depth=32, fold=True),
    dict(max_bytes=300, max_depth=3, fold=False),
    dict(max_bytes=300, max_depth=3, fold=True),
]
PAIRS = [(OracleCanonicalizer(DEFAULT_VOLATILE_FIELDS, **c), Canonicalizer(DEFAULT_VOLATILE_FIELDS, **c)) for c in CONFIGS]  # type: ignore[arg-type]
SETTINGS = settings(
    max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@pytest.mark.parametrize("pair", PAIRS, ids=[f"fold={c['fold']}-depth={c['max_depth']}" for c in CONFIGS])
@SETTINGS
@given(value=st.one_of(values, deep))
def test_canonical_is_the_oracles_text_or_error(pair: tuple[OracleCanonicalizer, Canonicalizer], value: Any) -> None:
    oracle, new = pair
    expected = outcome(oracle, value)
    assert outcome(new, value) == expected
    assert outcome(new, value) == expected  # again, with what the first call learnt of its keys


@settings(SETTINGS, max_examples=examples(100))
@given(value=values, seen=st.lists(values, max_size=3))
def test_a_fresh_canonicalizer_gives_the_same_after_any_history(value: Any, seen: list[Any]) -> None:
    for config in CONFIGS:
        oracle, new = OracleCanonicalizer(DEFAULT_VOLATILE_FIELDS, **config), Canonicalizer(DEFAULT_VOLATILE_FIELDS, **config)  # type: ignore[arg-type]
        for other in seen:
            outcome(new, other)
        assert outcome(new, value) == outcome(oracle, value)


@pytest.mark.parametrize("fold", [False, True])
@pytest.mark.parametrize("depth", [29, 30, 31, 32, 33, 62, 63, 64, 65])
@pytest.mark.parametrize("leaf", [1, "a  b", 2.5, 3.0, 1e-7, float("nan"), {"a": 1}, [], {"timestamp": object()}, object()])
def test_nesting_at_the_depth_limit(fold: bool, depth: int, leaf: Any) -> None:
    for kinds in ([0] * depth, [3] * depth, [1, 3] * (depth // 2) + [2] * (depth % 2)):
        value = nest(leaf, kinds)
        for max_depth in (32, 64):
            config = dict(max_bytes=1 << 20, max_depth=max_depth, fold=fold)
            oracle, new = OracleCanonicalizer(DEFAULT_VOLATILE_FIELDS, **config), Canonicalizer(DEFAULT_VOLATILE_FIELDS, **config)  # type: ignore[arg-type]
            assert outcome(new, value) == outcome(oracle, value)
            assert outcome(new, value) == outcome(oracle, value)


def test_known_keys_in_a_new_order_a_volatile_key_beside_known_ones_and_keys_not_str() -> None:
    oracle, new = PAIRS[0]
    rows = [
        {"id": 1, "name": "a  b", "price": 2.0},
        {"price": 2.5, "id": 2, "name": " c\r\n"},
        {"id": 3, "name": "d", "price": 1e-5, "requestId": "x"},
        {"id": 4, "name": "e", "price": 1e16, "Timestamp": 5},
        {1: "one", "1": "uno", None: 0, False: 1, 2.5: "f"},
        {"id": 5, "name": Label(" g "), "price": Count(7), "rank": Color.RED},
    ]
    for value in (rows, rows[::-1], {"rows": rows, "total": 2**64, "again": tuple(rows)}):
        assert new.canonical(value) == oracle.canonical(value)


class Alias:
    """A key that hashes as another one and reads as a third."""

    def __init__(self, text: str, like: str) -> None:
        self.text, self.like = text, like

    def __hash__(self) -> int:
        return hash(self.like)

    def __str__(self) -> str:
        return self.text


@pytest.mark.parametrize(
    "value",
    [
        {False: 1},
        {0: "a  b"},
        {0.0: 2},
        {Label(""): 3},
        {Alias("x", "id"): 4},
        {Alias("timestamp", "id"): float("nan")},  # dropped by the exact way: no error
        {Alias("name", "id"): [float("nan")]},
        [{"": 1}, {False: 1}, {"id": 2}, {Alias("Request-ID", "id"): object()}],
    ],
)
def test_keys_hashing_as_keys_seen_before_are_not_taken_for_them(value: Any) -> None:
    oracle, new = (c(DEFAULT_VOLATILE_FIELDS, max_bytes=1 << 20, max_depth=64) for c in (OracleCanonicalizer, Canonicalizer))
    for known in ({"": 0}, {"id": 0}):  # "" hashes as 0, False and 0.0 do
        assert new.canonical(known) == oracle.canonical(known)
    assert outcome(new, value) == outcome(oracle, value)
    assert outcome(new, [value, value]) == outcome(oracle, [value, value])


@SETTINGS
@given(text=texts)
def test_collapse_whitespace_is_split_and_join(text: str) -> None:
    assert collapse_whitespace(text) == " ".join(text.split())


# --------------------------------------------------------------------------- word fingerprints

FINGERPRINTS = (OracleFingerprinter(b"secret"), Fingerprinter(b"secret"))


def words_text(seed: int, ascii_only: bool) -> str:
    """Hundreds of words (enough to pass MAX_FINGERPRINT_TOKENS), made from a seed: cheaper to
    draw than as hypothesis lists."""
    rng = random.Random(seed)
    letters = "abcxyz0123456789" if ascii_only else "abcxyzΣσς0123456789"
    return "".join(
        "".join(rng.choices(letters, k=rng.randint(1, 12))) + "".join(rng.choices(" .,;:_-/\n\t'\"()", k=rng.randint(1, 3)))
        for _ in range(rng.randint(200, 700))
    )


many_words = st.builds(words_text, st.integers(0, 2**32), st.booleans())


@SETTINGS
@given(text=st.one_of(texts, many_words))
def test_tokens_and_shapes_are_the_oracles(text: str) -> None:
    oracle, new = FINGERPRINTS
    assert new.tokens(text) == oracle.tokens(text)
    assert new.shapes(text) == oracle.shapes(text)


@settings(SETTINGS, max_examples=examples(100))
@given(parts=st.lists(texts, max_size=4))
def test_hash64_is_the_keyed_blake2b_of_its_parts(parts: list[str]) -> None:
    key = hashlib.blake2b(b"secret", digest_size=32, person=b"ab-fprint").digest()
    h = hashlib.blake2b(digest_size=8, key=key)
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass") + b"\x00")
    assert FINGERPRINTS[1].hash64(*parts) == int.from_bytes(h.digest(), "big")


@pytest.mark.parametrize("length", [_PREFIX_CHARS - 1, _PREFIX_CHARS, _PREFIX_CHARS + 1, 3 * _PREFIX_CHARS])
@pytest.mark.parametrize("word_length", [1, 3, 14, 15, 16, 17, 40, 5000])
def test_long_ascii_texts_read_from_a_prefix(length: int, word_length: int) -> None:
    oracle, new = FINGERPRINTS
    rng = random.Random(length * 100 + word_length)
    text = ""
    while len(text) < length:
        text += "".join(rng.choice("aZ09") for _ in range(word_length)) + rng.choice([" ", "-", "..", "  "])
    text = text[:length]
    for cut in (text, text[:-1], text + "123", "12" + text):
        assert new.tokens(cut) == oracle.tokens(cut)
        assert new.shapes(cut) == oracle.shapes(cut)


def test_a_non_ascii_text_is_never_read_from_a_prefix() -> None:
    """Lower-casing looks at neighbours outside ASCII (the final sigma): a prefix cut right
    after "aΣ'ʰ" lower-cases Σ as ς, the whole text as σ. Reading the MAX_FINGERPRINT_TOKENS-th
    word from the prefix would then give another token than the text's own."""
    tail = "a\u03a3'\u02b0"
    head_len = _PREFIX_CHARS - len(tail)
    width = (head_len - 255) // 255
    head = " ".join(["x" * width] * 254 + ["x" * (head_len - 255 - width * 254)]) + " "
    text = head + tail + "b rest"
    assert len(head) == head_len and text[_PREFIX_CHARS - 1] == "\u02b0"
    assert len(text[:_PREFIX_CHARS].split()) == MAX_FINGERPRINT_TOKENS  # the sigma word is the last one kept
    oracle, new = FINGERPRINTS
    assert new.tokens(text) == oracle.tokens(text)
    assert new.shapes(text) == oracle.shapes(text)
