"""What churns in a result while nothing changes: masked before judging whether a result is new.

The masks work on a result's canonical JSON. Ids, timestamps, durations, element refs and run
numbers change on every call of a stuck tool. Counts, states and messages are kept, so
"3 passed" -> "4 passed" is still progress. There are two kinds of churn. Timing (how long,
when, which attempt) never tells two answers apart. Identity (an id, a ref, a run number)
tells them apart when the arguments differ (two customers' records), but not when the same call
is repeated (the same report under a fresh sub-agent id).

Each pattern starts with a literal, because the regex engine skips to a literal at ~0.4 ns per
character, while a class or a look-behind first costs 6 to 12 ns per character (CPython 3.11).
Where the churn begins before that literal, `left` says which characters, and how many, join
the match.

Speed. Even at that rate, one pattern's scan of a 5 KB result costs ~2 us when nothing
matches. So a pass is skipped when a cheaper check proves that it cannot match: a character
missing from the text (`in` runs at memchr speed, ~4x faster), a scan for a rarer literal of
the pattern (`_ADDRESS_AT`, `_REF_AT`), or one scan that stands for two passes
(`_TIMING_KEY_OR_TIME_OF_DAY`, `_SOME_MILLIS`). A skip is decided on the text as it is just
before the pass. The masking itself has no Python step per match where the matches allow it
(`_mask_led`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import repeat
from operator import sub

from ._text import looks_random

# Keys are matched as a suffix after a separator or a camel-case hump ("message_id",
# "messageId"), or as the whole key. Each one is a fixed-width look-behind, tried only where a
# key ends (`":`).
_ID_SUFFIXES = ("id", "ids", "uuid", "guid", "ref", "refs")
_ID_KEYS = ("etag", "pid", "rid", "run_number", "runnumber", "runNumber", "run_no", "correlation", "nonce")
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
    # how long something has been waiting or running: it grows while nothing else moves
    "elapsed",
    "elapsed_s",
    "elapsed_ms",
    "elapsedMs",
    "elapsed_seconds",
    "waited",
    "waited_s",
    "waited_ms",
    "waitedMs",
    "wait_ms",
    "age",
    "age_s",
    "age_ms",
    "age_seconds",
    "running_for",
    "running_for_s",
    "running_for_ms",
    "runningFor",
    "uptime",
    "uptime_s",
    "time_taken",
    "duration_so_far",
    "seconds_elapsed",
)


_TIMING_KEY_SET = frozenset(_TIMING_KEYS)


def is_timing_key(key: str) -> bool:
    """A key whose value the timing mask hides (attempt, duration_ms, tookMs, ...)."""
    return key in _TIMING_KEY_SET


def _key_behind(ends: list[tuple[str, str]]) -> str:
    """A zero-width test, just after `":`, that the key is one of these (given as (look-behind,
    key) pairs). One look-behind on the key's last two characters turns most keys away. The keys
    left then try only the look-behinds of their own last two characters, in the order of `ends`."""
    groups: dict[str, list[str]] = {}
    for behind, key in ends:
        groups.setdefault(key[-2:], []).append(f'(?<={behind}":)')
    penults = "".join(sorted({tail[0] for tail in groups}))
    lasts = "".join(sorted({tail[1] for tail in groups}))
    alternatives = "|".join(f'(?<={tail}":)(?:{"|".join(alts)})' for tail, alts in groups.items())
    return f'(?<=[{penults}][{lasts}]":)(?:{alternatives})'


# a JSON string or number; the string is written unrolled: the same matches as
# `"(?:[^"\\]|\\.)*"`, with no alternation tried per character
_SCALAR = r'(?:"[^"\\]*(?:\\.[^"\\]*)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)'

# whole keys first: "id" is by far the most common
_IDENTITY_KEY = _key_behind(
    [(f'"{x}', x) for x in _ID_SUFFIXES + tuple(x.upper() for x in _ID_SUFFIXES) + _ID_KEYS]
    + [(f"[_\\-. ]{x}", x) for x in _ID_SUFFIXES]
    + [(f"[a-z0-9]{x.capitalize()}", x.capitalize()) for x in _ID_SUFFIXES]
    + [(f"[_\\-. ]{x.upper()}", x.upper()) for x in _ID_SUFFIXES]
)
_TIMING_KEY = _key_behind([(f'"{x}', x) for x in _TIMING_KEYS])
_IDENTITY_KEY_VALUE = re.compile(f'":{_IDENTITY_KEY}{_SCALAR}')
_TIMING_KEY_VALUE = re.compile(f'":{_TIMING_KEY}{_SCALAR}')

_HEX = "0123456789abcdefABCDEF"
_DIGITS = "0123456789"
# a time of day, with the date before it when written 2024-05-01T12:00:01
_CLOCK = r":[0-5]\d:[0-5]\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
_TIME_OF_DAY = re.compile(_CLOCK)
# where a timing key or a time of day is: both passes look at colons, so one scan stands for both
_TIMING_KEY_OR_TIME_OF_DAY = re.compile(f":(?:{_TIMING_KEY}|{_CLOCK[1:]})")
# a duration: "in 0.53s", "took 12.5 ms", "3.2 seconds"; and whole milliseconds: "120ms"
_DURATION = re.compile(r"\.\d+ ?(?:ms|s|sec|secs|seconds)(?![A-Za-z])")
_MILLIS = re.compile(r"ms(?<=\dms)(?![A-Za-z])")
_SPACED_MILLIS = re.compile(r" ms(?![A-Za-z])")
# where either millisecond pass would mask something: `_SPACED_MILLIS` masks only after a digit
_SOME_MILLIS = re.compile(r"ms(?:(?<=\dms)|(?<=\d ms))(?![A-Za-z])")
# a UUID: the match starts at its first dash, its first 8 hex digits precede it
_UUID = re.compile(r"-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?![0-9a-zA-Z])")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,16}")  # a memory address
_ADDRESS_AT = re.compile(r"x(?<=0x)[0-9a-fA-F]{4}")  # whether one is there: "x" is rarer than "0"
# an element ref of a page snapshot: [ref=e12], ref=e12
_ELEMENT_REF = re.compile(r"\[ref=[^\]\s\"]{1,32}\]")
_REF = re.compile(r"ref[=:] ?[A-Za-z]?\d+")
_REF_AT = re.compile(r"f[=:](?<=ref[=:])")  # whether one is there: "f" is rarer than "r"
_RUN_NUMBER = re.compile(r"#(?<![\w&]#)\d+")  # a run / build number: "run #45"


def _mask_led(text: str, pattern: re.Pattern[str], left: str, most: int, least: int) -> str:
    """Each match of `pattern`, with the up to `most` characters of `left` right before it (not
    reaching into the previous mask), masked as one "~"; a match with fewer than `least` of
    them is kept as it is."""
    between = pattern.split(text)
    if len(between) == 1:
        return text
    # Where every match has `least` to `most` of them, each is masked and takes just what
    # `rstrip` takes off the text since the previous match: no Python step per match.
    kept = list(map(str.rstrip, between[:-1], repeat(left)))
    taken = list(map(sub, map(len, between), map(len, kept)))
    if least <= min(taken) and max(taken) <= most:
        kept.append(between[-1])
        return "~".join(kept)
    return _mask_each(text, pattern, left, most, least)


def _mask_each(text: str, pattern: re.Pattern[str], left: str, most: int, least: int) -> str:
    """`_mask_led` one match at a time: a match may take fewer characters than are there, or
    be kept, which lets the next one reach back past it."""
    pieces: list[str] = []
    end = 0
    for m in pattern.finditer(text):
        start, stop = m.span()
        lo = max(end, start - most)
        led = lo + len(text[lo:start].rstrip(left))
        if start - led < least:
            continue
        pieces.append(text[end:led])
        pieces.append("~")
        end = stop
    if not pieces:
        return text
    pieces.append(text[end:])
    return "".join(pieces)


def _mask_timing(text: str) -> str:
    if _TIMING_KEY_OR_TIME_OF_DAY.search(text):
        text = _TIMING_KEY_VALUE.sub('":~', text)
        text = _mask_led(text, _TIME_OF_DAY, _DIGITS + "-T", 13, 1)
    text = _mask_led(text, _DURATION, _DIGITS, 12, 1)
    if _SOME_MILLIS.search(text):
        text = _mask_led(text, _MILLIS, _DIGITS, 12, 1)
        text = _mask_led(text, _SPACED_MILLIS, _DIGITS, 12, 1)
    # handles: a memory address, an element ref of a page snapshot name nothing outside the
    # answer they are in (the same page drawn again gets new ones)
    if _ADDRESS_AT.search(text):
        text = _ADDRESS.sub("~", text)
    if "=" in text:
        text = _ELEMENT_REF.sub("~", text)
    return text


def _mask_identity(text: str) -> str:
    text = _IDENTITY_KEY_VALUE.sub('":~', text)
    if "-" in text:
        text = _mask_led(text, _UUID, _HEX, 8, 8)
    if _REF_AT.search(text):
        text = _REF.sub("~", text)
    if "#" in text:
        text = _RUN_NUMBER.sub("~", text)
    return _mask_counters(text)


# Counters a tool or its shell adds to every run, which change while nothing else does: a shell's
# line number ("bash: line 13008: cd: ..."), a traceback's, a process, group, job or thread
# number, a port, a chunk, request or trace number, a temp file's name. A count of what the
# run did ("5 failed") has no such label and stays.
_LINE_NUMBER = re.compile(r"line \d+")
_COUNTER_LABELS = ("pid", "pgid", "tid", "process", "job", "port", "thread", "worker", "chunk", "request", "trace", "span")
_COUNTER = re.compile(
    r"\b((?:p?pids?|pgid|tid|process(?: group)?(?: id| pgid)?|job|port|thread|worker|chunk|request|trace|span|seq)"
    r"(?:[ _-]?ids?)?(?:[ _#:=(\[-]{1,3}))\d+",
    re.IGNORECASE,
)
_TEMP_FILE = re.compile(r"(?:/tmp/|/var/folders/|\btmp)[\w.-]*\d[\w.-]*")


def _mask_counters(text: str) -> str:
    if "line " in text:
        text = _LINE_NUMBER.sub("line ~", text)
    lowered = text.lower()
    if any(label in lowered for label in _COUNTER_LABELS):
        text = _COUNTER.sub(r"\1~", text)
    if "tmp" in text or "/var/folders/" in text:
        text = _TEMP_FILE.sub("~", text)
    return text


# Beside the counters, a failure's text carries ids made up for the run: a long number, a hex id
# (a digest, a container's), a random token. A failure's text is short, so these slower passes
# read it alone, never a whole result.
_LONG_NUMBER = re.compile(r"(?<![\d.])\d{6,}(?![\d.])")
_HEX_ID = re.compile(r"\b(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b")
_TOKEN = re.compile(r"[A-Za-z0-9+/_=-]{16,}")
#: a count of what a failed run did or found ("5 failed", "3 of 7"): its change is news
_COUNT = re.compile(
    r"\b(\d+) ?(passed|failed|failures?|errors?|warnings?|skipped|deselected|xfailed|xpassed|tests?|"
    r"succeeded|remaining|left|fixed|issues?|problems?|files?|changed)\b|\b(\d+) ?(?:/|of) ?(\d+)\b|\d+(?:\.\d+)?%",
    re.IGNORECASE,
)


def mask_failure_ids(text: str) -> str:
    """A failure's text (already masked as a repeat's) without the ids made up for its run."""
    text = _LONG_NUMBER.sub("~", text)
    text = _HEX_ID.sub("~", text)
    return _TOKEN.sub(lambda m: "~" if looks_random(m.group()) else m.group(), text)


def counts(text: str) -> tuple[str, ...]:
    """The counts a failure reports, in order ("5 failed", "3/7"): two failures that read alike
    but count differently are news (an edit fixed one test of five)."""
    return tuple(m.group().lower() for m in _COUNT.finditer(text))


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
        text = _mask_timing(canonical) if self._builtin else canonical
        return text if self._extra is None else self._extra.sub("~", text)

    def identity(self, timed: str) -> str:
        """Identities masked too (on `timing`'s output): to compare repeats of one call."""
        return _mask_identity(timed) if self._builtin else timed

    def __call__(self, canonical: str) -> str:
        return self.identity(self.timing(canonical))
