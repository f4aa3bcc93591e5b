"""JSON decoding: the standard library's results, at orjson's speed where the two agree.

orjson reads a trace line about four times faster than `json.loads`, and agrees with it on
every document it accepts but one kind: an integer of 19 digits or more, which orjson turns
into a float when it does not fit 64 bits. A line holding such a digit run anywhere, and a line
orjson refuses (NaN, a lone surrogate escape, a number beyond the float range, broken JSON), is
read by `json.loads`, so its value, or its error, is the standard library's.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

# every digit becomes "0" and everything else a space, so that one substring search finds a run
_DIGITS_ONLY = bytes(48 if 48 <= c <= 57 else 32 for c in range(256))
_LONG_RUN = b"0" * 19


def loads(text: str) -> Any:
    """`json.loads(text)`: the same value, or the same exception."""
    data = text.encode("utf-8", "surrogatepass")
    if _LONG_RUN not in data.translate(_DIGITS_ONLY):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # the standard library decides, and words the error
    return json.loads(text)
