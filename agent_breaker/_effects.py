"""What a mutating call does, in one spelling (duplicate_mutation).

A model asked to pay twice can write the second payment otherwise: the amount `1875`, `"1875.00"`,
`"1 875,00"`, `"1,875"`, `"kr1875"`, `"NOK 1875.00"`; the account with spaces, dashes or in lower
case; an idempotency key or a reference it made up itself. The effect of a call is its tool and
its arguments' values read as what they name: amounts as numbers (currency marks and separators
aside), identifiers as their letters and digits (case and separators aside), keys the model
makes up (idempotency keys, dedupe references, nonces) left out. Free text (a memo, a
description: words more than ids) is kept apart: two calls with one effect and other free text
may both be meant (two payments with two invoice numbers in their memos), so they are warned, not
refused.

Pure: plain values in, strings out (the engine hashes them with its key).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from typing import Any, NamedTuple

from ._canonical import normalize_key
from ._text import normalize_text

#: argument names whose value the model makes up to tell one try from the next (besides the
#: configured idempotency fields): never part of an effect
_MADE_UP_KEY = re.compile(r"idempot|dedup|nonce|opkey|operationkey|requestkey|clientref|clientkey|retrykey|attemptid")
#: argument names that hold free text whatever it reads like
_TEXT_KEYS = frozenset(("memo", "note", "notes", "description", "comment", "comments", "message", "reason", "purpose"))
#: a number as people write amounts: thousands separated by space, comma, dot or apostrophe,
#: a decimal part after a comma or a dot
_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:[ ,.'\u00a0\u202f]\d{3})+|\d+)(?:[.,]\d+)?")
#: currency codes and marks written beside an amount (ISO 4217's common ones, and local marks)
_CURRENCIES = frozenset(
    [
        "usd",
        "eur",
        "gbp",
        "jpy",
        "cny",
        "rmb",
        "inr",
        "nok",
        "sek",
        "dkk",
        "isk",
        "chf",
        "cad",
        "aud",
        "nzd",
        "brl",
        "mxn",
        "zar",
        "sgd",
        "hkd",
        "krw",
        "rub",
        "try",
        "pln",
        "czk",
        "huf",
        "ron",
        "bgn",
        "ils",
        "aed",
        "sar",
        "qar",
        "thb",
        "idr",
        "myr",
        "php",
        "vnd",
        "ngn",
        "kes",
        "egp",
        "ars",
        "clp",
        "cop",
        "pen",
        "uah",
        "kr",
        "zl",
        "zł",
        "rs",
        "r$",
        "us$",
        "kč",
        "ft",
        "lei",
    ]
)
_WORD = re.compile(r"\w+")
_NOT_ALNUM = re.compile(r"[\W_]+")
MAX_LEAVES = 256


class Effect(NamedTuple):
    """A call's effect: its parts (`path=value`, sorted), its free text's words (sorted), and
    whether it names an amount (a sum of money, a quantity: done twice, it moves twice as much)."""

    parts: list[str]
    words: list[str]
    amount: bool


def effect_of(args: Any, idempotency_fields: frozenset[str]) -> Effect:
    """What a call does, in one spelling."""
    parts: list[str] = []
    words: list[str] = []
    amounts = 0
    for path, value in _leaves(args, idempotency_fields):
        if isinstance(value, bool) or value is None:
            parts.append(f"{path}={value}")
        elif isinstance(value, (int, float)):
            parts.append(f"{path}={_number(str(value))}")
            amounts += 1
        elif isinstance(value, str):
            text = normalize_text(value).strip()
            amount = amount_of(text)
            if amount is not None:
                parts.append(f"{path}={amount}")
                amounts += 1
            elif path.rpartition(".")[2] in _TEXT_KEYS or _is_prose(text):
                words.extend(_WORD.findall(text))
            elif text:
                parts.append(f"{path}={_NOT_ALNUM.sub('', text)}")
    return Effect(sorted(parts), sorted(words), amounts > 0)


def amount_of(text: str) -> str | None:
    """An amount written any way, as one number ("kr1 875,00" -> "1875"); None for other text."""
    text = _without_currency(text.strip())
    return _number(text) if _NUMBER.fullmatch(text) else None


def _without_currency(text: str) -> str:
    """The text without a currency code or mark before or after it."""
    if text[:1] and unicodedata.category(text[0]) == "Sc":
        text = text[1:].lstrip()
    elif text[-1:] and unicodedata.category(text[-1]) == "Sc":
        text = text[:-1].rstrip()
    else:
        head = _LEADING_LETTERS.match(text)
        if head is not None and head.group(1) in _CURRENCIES:
            text = text[head.end() :]
        else:
            tail = _TRAILING_LETTERS.search(text)
            if tail is not None and tail.group(1) in _CURRENCIES:
                text = text[: tail.start()]
    return text


_LEADING_LETTERS = re.compile(r"([^\d\s+-]{1,3})\s?(?=[+-]?\d)")
_TRAILING_LETTERS = re.compile(r"(?<=\d)\s?([^\d\s]{1,3})$")


def _number(num: str) -> str:
    """A number's digits with its thousands separators aside and its decimal part normalized."""
    num = num.replace(" ", "").replace("'", "").replace("\u00a0", "").replace("\u202f", "")
    if "," in num and "." in num:  # the later one is the decimal point
        num = num.replace("," if num.rfind(",") < num.rfind(".") else ".", "").replace(",", ".")
    elif "," in num:  # 1,875 thousands; 18,75 decimals
        head, _, tail = num.rpartition(",")
        num = num.replace(",", "") if len(tail) == 3 and "," not in head or num.count(",") > 1 else f"{head}.{tail}"
    elif num.count(".") > 1 or (num.count(".") == 1 and len(num.rpartition(".")[2]) == 3 and num[0] != "0"):
        num = num.replace(".", "")  # 1.875.000, 1.875: thousands (a decimal amount has 2 digits)
    try:
        value = Decimal(num)
    except InvalidOperation:
        return num
    return format(value.normalize(), "f") if value == value.to_integral_value() else str(value.normalize())


def _is_prose(text: str) -> bool:
    """A sentence more than a name or an id: four words or more, most of them holding no digit."""
    tokens = text.split()
    return len(tokens) >= PROSE_WORDS and sum(not any(c.isdigit() for c in t) for t in tokens) * 2 > len(tokens)


#: a value of this many words (most without digits) is free text; fewer name something ("Hana Sato")
PROSE_WORDS = 4


def _leaves(args: Any, idempotency_fields: frozenset[str], path: str = "", depth: int = 0) -> Iterator[tuple[str, Any]]:
    """(normalized key path, value) of the scalars of a call's arguments, made-up keys aside."""
    if depth > 8:
        return
    if isinstance(args, dict):
        for k, v in list(args.items())[:MAX_LEAVES]:
            key = normalize_key(str(k))
            if key in idempotency_fields or _MADE_UP_KEY.search(key):
                continue
            yield from _leaves(v, idempotency_fields, f"{path}.{key}" if path else key, depth + 1)
    elif isinstance(args, (list, tuple)):
        for i, v in enumerate(args[:MAX_LEAVES]):
            yield from _leaves(v, idempotency_fields, f"{path}[{i}]", depth + 1)
    else:
        yield path, args
