"""Text normalization against evasion: one spelling for strings that read the same.

An agent (or whoever feeds the guard) can make two identical calls, tool names or claims look
different to a byte comparison: fullwidth or Cyrillic look-alike letters, zero-width and other
invisible characters, dash and apostrophe variants, case. `normalize_text` folds all of these
to one form before anything is compared or hashed. `looks_random` spots values that are new on
every call by construction (nonces, UUIDs, random salts), which the canonical form masks.
"""

from __future__ import annotations

import math
import re
import time
import unicodedata
from collections import Counter
from collections.abc import Callable

# invisible characters, removed: every format character (Unicode category Cf: zero-width spaces
# and joiners, bidi controls, the soft hyphen, tag characters, ...; a test checks this list
# against the running Python's Unicode data) and the invisible ones of other categories
# (combining grapheme joiner, Hangul fillers, variation selectors, Khmer and Mongolian marks)
_INVISIBLE = re.compile(
    "[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
    "\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0\U000e0100-\U000e01ef]"
)

# look-alikes NFKC leaves alone: Cyrillic and Greek letters that render as Latin ones, then
# dash, apostrophe and quote variants
_LOWER_LOOKALIKES = {
    "а": "a",
    "в": "b",
    "е": "e",
    "ё": "e",
    "һ": "h",
    "і": "i",
    "ї": "i",
    "ј": "j",
    "ӏ": "l",
    "о": "o",
    "р": "p",
    "ԛ": "q",
    "с": "c",
    "ѕ": "s",
    "у": "y",
    "ү": "y",
    "х": "x",
    "ԝ": "w",
    "ԁ": "d",
    "ɡ": "g",
    "ո": "n",
    "ս": "u",
    "к": "k",
    "м": "m",
    "н": "h",
    "т": "t",
    "α": "a",
    "β": "b",
    "ε": "e",
    "ζ": "z",
    "η": "n",
    "ι": "i",
    "κ": "k",
    "μ": "m",
    "ν": "v",
    "ο": "o",
    "ρ": "p",
    "τ": "t",
    "υ": "u",
    "χ": "x",
    "ω": "w",
    "ϲ": "c",
    "ϳ": "j",
    "ı": "i",
    "ȷ": "j",
    "ℓ": "l",
}
_UPPER_LOOKALIKES = {
    "А": "A",
    "В": "B",
    "Е": "E",
    "Ё": "E",
    "Н": "H",
    "І": "I",
    "Ј": "J",
    "К": "K",
    "М": "M",
    "О": "O",
    "Р": "P",
    "С": "C",
    "Ѕ": "S",
    "Т": "T",
    "У": "Y",
    "Х": "X",
    "Ԛ": "Q",
    "Ԝ": "W",
    "Α": "A",
    "Β": "B",
    "Ε": "E",
    "Ζ": "Z",
    "Η": "H",
    "Ι": "I",
    "Κ": "K",
    "Μ": "M",
    "Ν": "N",
    "Ο": "O",
    "Ρ": "P",
    "Τ": "T",
    "Υ": "Y",
    "Χ": "X",
}
_PUNCTUATION = {
    "\u2010": "-",
    "\u2011": "-",
    "\u2012": "-",
    "\u2013": "-",
    "\u2014": "-",
    "\u2015": "-",
    "\u2212": "-",
    "\u2043": "-",
    "\ufe58": "-",
    "\ufe63": "-",
    "\u02d7": "-",
    "\u2796": "-",
    "\u2e3a": "-",
    "\u2e3b": "-",
    "\u2053": "-",
    "\u058a": "-",
    "\u05be": "-",
    "\u1400": "-",
    "\u1806": "-",
    "\u2e17": "-",
    "\u2018": "'",
    "\u2019": "'",
    "\u201a": "'",
    "\u201b": "'",
    "\u02bc": "'",
    "\u2032": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u201e": '"',
    "\u2033": '"',
}
_FOLD_CASED = str.maketrans({**_LOWER_LOOKALIKES, **_UPPER_LOOKALIKES, **_PUNCTUATION})
_FOLD_LOWER = str.maketrans({**_LOWER_LOOKALIKES, **_PUNCTUATION})


def fold_text(text: str) -> str:
    """NFKC, invisible characters removed, look-alikes and dash variants mapped to ASCII; the
    case of every letter is kept (reference ids are matched by case)."""
    if text.isascii():
        return text
    return unicodedata.normalize("NFKC", _INVISIBLE.sub("", text)).translate(_FOLD_CASED)


def normalize_text(text: str) -> str:
    """`fold_text`, then case folding: the one spelling that strings which read the same share."""
    if text.isascii():
        return text.lower()
    return unicodedata.normalize("NFKC", _INVISIBLE.sub("", text)).casefold().translate(_FOLD_LOWER)


def normalize_name(name: str) -> str:
    """A name (a tool's) as compared: `normalize_text`, whitespace trimmed and runs of it one space."""
    return " ".join(normalize_text(name).split())


def has_invalid_chars(text: str) -> bool:
    """Lone surrogates: not text, cannot be encoded, refused before any state changes."""
    return not text.isascii() and _SURROGATE.search(text) is not None


_SURROGATE = re.compile("[\ud800-\udfff]")
# a shell command's status on a line of its output text: Claude Code's error ("Exit code 1"),
# Codex's header ("Process exited with code 1"), the hooks' own "exit code 1"
_EXIT_LINE = re.compile(r"(?:^|\n)\s*(?:Exit code|Process exited with code)[: ]\s*(-?\d+)", re.IGNORECASE)
# Gemini CLI reports it after the whole output, followed only by its other report lines
_EXIT_TRAILER = re.compile(
    r"\nExit Code: (-?\d+)\n(?:(?:Signal|Background PIDs|Process Group PGID): [^\n]*\n)*(?:</untrusted_context>\s*)?$"
)


def reported_exit(text: str) -> int | None:
    """The status a command's output text reports on its own line: near the top, or as the last
    line of Gemini CLI's report after the whole output (None: none). A line that says so in the
    middle of a long output is the output's own."""
    found = _EXIT_LINE.search(text[:2_000]) or _EXIT_TRAILER.search(text[-1_000:])
    return int(found.group(1)) if found else None


# --------------------------------------------------------------------- random-looking values

MIN_RANDOM_CHARS = 16
MAX_RANDOM_CHARS = 1024
#: a float with this many significant digits came from a random generator, not from a model
MIN_RANDOM_FLOAT_DIGITS = 13
_HEX = re.compile(r"[0-9a-fA-F]+(?:-[0-9a-fA-F]+)*")
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_HAS_DIGIT = re.compile(r"[0-9]")
_HAS_LETTER = re.compile(r"[A-Za-z]")
# a class change between neighbours (upper, lower, digit): about 0.62 in random base62 text,
# 0.1-0.45 in identifiers made of words (getUserById2024, iPhone15ProMax)
_MIN_CLASS_CHANGES = 0.55
_MIN_ENTROPY_RATIO = 0.8


def looks_random(value: str) -> bool:
    """A string that is random by construction: a digest, UUID or hex token (hex with digits and
    letters), or a base64 / base62 token whose characters change class (upper, lower, digit)
    as often as random text does. Readable ids (`mia_li_3668`, `getUserById2024`, paths) do not
    qualify. Random base62 tokens are spotted about 70% of the time at 16 characters, 90% at 64."""
    n = len(value)
    if n < MIN_RANDOM_CHARS or n > MAX_RANDOM_CHARS or " " in value:
        return False
    if not (_HAS_DIGIT.search(value) and _HAS_LETTER.search(value)):
        return False
    if _HEX.fullmatch(value):
        return True
    if not _BASE64.fullmatch(value):
        return False
    alnum = value.rstrip("=")
    changes = sum(_class(a) != _class(b) for a, b in zip(alnum, alnum[1:], strict=False))
    if changes < _MIN_CLASS_CHANGES * (len(alnum) - 1):
        return False
    entropy = -sum(c / n * math.log2(c / n) for c in Counter(value).values())
    return entropy >= _MIN_ENTROPY_RATIO * math.log2(min(n, 64))


def looks_random_float(value: float) -> bool:
    """A float with more significant digits than a model writes (random.random(), a jitter)."""
    digits = repr(value).lstrip("-").split("e")[0].replace(".", "").strip("0")
    return len(digits) >= MIN_RANDOM_FLOAT_DIGITS


def _class(c: str) -> int:
    return 0 if c.isupper() else 1 if c.islower() else 2


def utc_text(ts: float | None) -> str:
    """An epoch time as the CLI tables show it (ISO 8601, UTC, seconds), "-" for none."""
    return "-" if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def caseless_matcher(alternation: str) -> Callable[[str], bool]:
    """Whether re.search(alternation, text, re.IGNORECASE) finds something, for an alternation
    that holds no upper-case letter literal: an ASCII text is lower-cased and searched
    case-sensitively, which re does ~2x faster (Unicode case folding only matters beyond
    ASCII: the Kelvin sign is a k)."""
    any_case = re.compile(alternation, re.IGNORECASE)
    lower = re.compile(alternation)
    return lambda text: (lower.search(text.lower()) if text.isascii() else any_case.search(text)) is not None
