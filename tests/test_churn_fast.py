"""The churn masks of `_churn` give exactly what the masks they replaced gave, for every input:
the replaced implementation, copied here as the oracle (with the keys and the counters pass
added since), against the new one (hypothesis) on arbitrary text, on text made of the patterns'
own pieces (where passes meet, overlap and reach back), and on canonical JSON of tool results
keyed with every spelling the keys take."""

from __future__ import annotations

import json
import re
import string
from collections.abc import Iterable

import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_breaker import _churn
from agent_breaker._churn import ChurnMask

# ---- the oracle: ChurnMask and its helpers as they were in agent_breaker/_canonical.py ----
# The keys are data, not the algorithm under test: the oracle takes today's. Keys are matched as
# a suffix after a separator or a camel-case hump ("message_id", "messageId"), or whole; each is a
# fixed-width look-behind tried only where a key ends (`":`).
_ID_SUFFIXES = _churn._ID_SUFFIXES
_ID_KEYS = _churn._ID_KEYS
_TIMING_KEYS = _churn._TIMING_KEYS


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
    # handles moved here from identity: they tell no two answers apart
    (re.compile(r"0x[0-9a-fA-F]{4,16}"), "", 0, 0),  # a memory address
    (re.compile(r"\[ref=[^\]\s\"]{1,32}\]"), "", 0, 0),  # an element ref of a page snapshot: [ref=e12]
)
_IDENTITY: tuple[Led, ...] = (
    # a UUID: the match starts at its first dash, its first 8 hex digits precede it
    (re.compile(r"-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?![0-9a-zA-Z])"), _HEX, 8, 8),
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


class OldChurnMask:
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
        """Identities masked too (on `timing`'s output): to compare repeats of one call. The
        counters pass came after the rewrite and is not under test here, so the oracle runs it."""
        return _churn._mask_counters(_mask(timed, _IDENTITY_KEY_VALUE, _IDENTITY)) if self._builtin else timed

    def __call__(self, canonical: str) -> str:
        return self.identity(self.timing(canonical))


# ---- the comparison ----

#: (extra patterns, builtin): built-ins on and off, with and without the config's own
SETUPS = [((), True), ((), False), ((r"seq=\d+", r"\bv\d+\b"), True), ((r"ms|#",), False)]
PAIRS = [(OldChurnMask(extra, builtin=builtin), ChurnMask(extra, builtin=builtin)) for extra, builtin in SETUPS]


def assert_same(text: str) -> None:
    for old, new in PAIRS:
        timed = old.timing(text)
        assert new.timing(text) == timed
        assert new.identity(timed) == old.identity(timed)
        assert new.identity(text) == old.identity(text)  # identity takes any text, not only timing's
        assert new(text) == old(text)


# ---- what the inputs are made of ----

TIMESTAMPS = ("2024-05-01T12:00:01.123Z", "12:00:01+02:00", "2024-05-01 12:00:01", "T23:59:59,5-0330", "10:57:11")
DURATIONS = ("0.53s", "12.5 ms", "120ms", "3.2 seconds", "1.0 sec", "7.25secs", "45 ms", "0.5msx")
IDENTITIES = (
    "123e4567-e89b-12d3-a456-426614174000",
    "9F0C1D2E-0000-4ABC-8DEF-0123456789AB",
    "0x7ffd1234",
    "0xdeadbeefdeadbeefdead",
    "[ref=e12]",
    "ref=e5",
    "ref: 7",
    "run #45",
    "&#45",
    "a#1",
)
#: pieces of the patterns, so that joined at random they meet, overlap and run into each other
PIECES = (
    (
        ":",
        ":00",
        ":59",
        ":60",
        "12",
        "1",
        "0",
        "9",
        "-",
        "T",
        "Z",
        "+02:00",
        "-0330",
        ".",
        ",",
        ".5",
        "5.",
        " ",
        "ms",
        " ms",
        "s",
        "sec",
        "secs",
        "seconds",
        "x",
        "0x",
        "abcd",
        "ABCDEF",
        "deadbeef",
        "-abcd",
        "e89b",
        "[ref=",
        "]",
        "ref=",
        "ref:",
        "ref",
        "e",
        "#",
        "&",
        '"',
        '":',
        "\\",
        '\\"',
        "\n",
        "{",
        "}",
        ",",
        "~",
        "\u0663",  # ARABIC-INDIC DIGIT THREE: \d matches it
        "é",
    )
    + TIMESTAMPS
    + DURATIONS
    + IDENTITIES
)
KEY_WORDS = _ID_SUFFIXES + _ID_KEYS + _TIMING_KEYS + ("paid", "Id", "iD", "xid", "video", "took_s", "durationMS", "latencies")
key_words = st.sampled_from(KEY_WORDS)
#: a key as written: whole, after a separator, camel-cased, upper-cased, or anything
keys = st.one_of(
    key_words,
    st.builds(lambda w: w.upper(), key_words),
    st.builds(
        lambda p, s, w: p + s + w, st.sampled_from(("message", "order", "x", "9", "")), st.sampled_from("_-. /"), key_words
    ),
    st.builds(lambda p, w: p + w[:1].upper() + w[1:], st.sampled_from(("message", "order", "x9", "A", "_")), key_words),
    st.builds(lambda p, s, w: (p + s + w).upper(), st.sampled_from(("message", "order")), st.sampled_from("_-. "), key_words),
    st.text(string.ascii_letters + "_-. ", max_size=8),
)
piece_joins = st.lists(st.sampled_from(PIECES), max_size=40).map("".join)
#: a string value of a tool result: churn among words, digits and hex, or pieces joined at random
value_texts = st.one_of(
    st.lists(
        st.one_of(
            st.sampled_from(TIMESTAMPS + DURATIONS + IDENTITIES),
            st.uuids().map(str),
            st.uuids().map(lambda u: str(u).upper()),
            st.integers(0, 10**12).map(str),
            st.text(string.hexdigits, min_size=1, max_size=20),
            st.text(string.ascii_letters, min_size=1, max_size=8),
            st.builds(
                "{}.{}{}{}".format,
                st.integers(0, 999),
                st.integers(0, 99),
                st.sampled_from(("", " ")),
                st.sampled_from(("s", "ms", "sec", "seconds", "x")),
            ),
            st.builds("0x{}".format, st.text("0123456789abcdefABCDEF", min_size=1, max_size=20)),
        ),
        max_size=8,
    ).flatmap(lambda words: st.sampled_from((" ", "", ", ", "\n", ": ", "-", "/")).map(lambda sep: sep.join(words))),
    piece_joins,
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**15), 10**15),
    st.floats(allow_nan=False, allow_infinity=False),
    value_texts,
)
json_values = st.recursive(
    scalars, lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=5), max_leaves=25
)


def canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# ---- the tests ----


@settings(max_examples=examples(300), deadline=None)
@given(st.text(st.characters(exclude_categories=())))
def test_any_text_is_masked_as_before(text):
    assert_same(text)


@settings(max_examples=examples(400), deadline=None)
@given(piece_joins)
def test_text_made_of_the_patterns_pieces_is_masked_as_before(text):
    assert_same(text)


@settings(max_examples=examples(200), deadline=None)
@given(st.text(':0123456789.-Tms xZ+#&[]ref="\\aAbcdEF_ ', max_size=60))
def test_text_dense_with_the_patterns_characters_is_masked_as_before(text):
    assert_same(text)


@settings(max_examples=examples(150), deadline=None)
@given(st.dictionaries(keys, json_values, max_size=8))
def test_canonical_results_are_masked_as_before(result):
    assert_same(canonical(result))


@pytest.mark.parametrize(
    "text",
    [
        "x:00:001:00:00",  # a time kept for want of a date lets the next one reach back into it
        "1:00:00:00:00",  # one right after another: nothing left to lead the second
        "1234567890123456:00:00",  # more date characters than a time takes
        '"id":"id":5',  # a key inside the value masked before it
        '"id":"a_id":5',
        '"took":12:00:00',  # a timing key and a time of day on one colon
        "0123456789-abcd-abcd-abcd-0123456789ab",  # more hex before a UUID than it takes
        "x-abcd-abcd-abcd-0123456789ab",  # too little
        "12345678-abcd-abcd-abcd-0123456789ab-abcd-abcd-abcd-0123456789ab",
        "0x1234#5",  # a mask lets a run number through its look-behind
        "[ref=0x1234567890123456789012345678901234567890]",  # a mask shortens a ref to fit
        "ref=0x12345",
        "5.3s ms",
        "12ms3ms 4 ms",
        "1 ms ms",
        "took 1.5 seconds, 2secs, 3.25 sec",
        "1.5 msec 2.5ms",
        "\u0663.\u0663s \u0663:00:00",  # digits that are not ASCII
        "PID 2024-05-01T12:00:01.123Z",  # a counter's label before a date
        "",
        "~",
    ],
)
def test_cases_where_passes_meet_are_masked_as_before(text):
    assert_same(text)
    assert_same(canonical({"output": text, "id": 1}))


def test_the_patterns_masked_by_split_have_no_groups() -> None:
    """_mask_led splits the text on its pattern: a capturing group would put the group's text
    among the pieces and break the mask without an error."""
    patterns = [v for k, v in vars(_churn).items() if isinstance(v, re.Pattern) and k in _LED]
    assert len(patterns) == len(_LED) and all(p.groups == 0 for p in patterns)


_LED = {"_TIME_OF_DAY", "_DURATION", "_MILLIS", "_SPACED_MILLIS", "_UUID"}
