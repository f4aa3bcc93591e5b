"""agent_breaker._json.loads is json.loads: the same value (types included), or the same error."""

from __future__ import annotations

import json
import math
from typing import Any

from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_breaker import _json

big_ints = st.integers(min_value=-(10**30), max_value=10**30) | st.sampled_from(
    [2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, -(10**19) + 1, 10**18]
)
scalars = st.none() | st.booleans() | big_ints | st.floats(allow_nan=True, allow_infinity=True) | st.text()
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=20
)


def outcome(fn: Any, text: str) -> tuple[str, Any]:
    try:
        return "value", fn(text)
    except Exception as exc:  # the error's type and words are part of the contract
        return type(exc).__name__, str(exc)


def same(a: Any, b: Any) -> bool:
    """Equal, with equal types all the way down (1 is not 1.0), and NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@settings(max_examples=examples(400))
@given(values, st.booleans())
def test_a_document_reads_the_same(value: Any, ascii_only: bool):
    text = json.dumps(value, ensure_ascii=ascii_only)
    kind, got = outcome(_json.loads, text)
    want_kind, want = outcome(json.loads, text)
    assert kind == want_kind and same(got, want)


@settings(max_examples=examples(400))
@given(st.text(alphabet=st.sampled_from(list('{}[]",:0123456789.eE+-truefalsnNaI \\u"d8') + ["\ud800", "é", "\x00"])))
def test_any_text_reads_or_fails_the_same(text: str):
    kind, got = outcome(_json.loads, text)
    want_kind, want = outcome(json.loads, text)
    assert kind == want_kind
    assert same(got, want) if kind == "value" else got == want


def test_the_cases_where_orjson_alone_would_differ():
    for text in ["12345678901234567890", "-9999999999999999999", "[1E400]", "NaN", '"\\ud800"', '{"a": 1, "a": 2}', "-0"]:
        assert same(_json.loads(text), json.loads(text)), text
    assert type(_json.loads("123456789012345678901234")) is int
