"""Execution receipts and final-answer verification (against reward hacking).

A successful result of a mutating tool gets a receipt: an HMAC-SHA256 over a canonical encoding
of (session, call id, tool, canonical-args hash, result hash, time), tagged with a key id so
keys can rotate. The session's ledger keeps the receipts and hashes of the reference values in
receipted results (ids, amounts, short strings), never the result text. A final answer's
reference ids and completion claims are checked against that ledger.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import hmac
import itertools
import json
import logging
import os
import re
import secrets
import string
import sys
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ._canonical import Fingerprinter
from ._text import fold_text, normalize_text
from .config import DEFAULT_REFERENCE_PATTERNS, AgentBreakerConfig, ConfigError, ReceiptsConfig
from .heuristics import EMPTY_MUTATION_RESULT, UNVERIFIED_CLAIM
from .verdicts import Trip

log = logging.getLogger("agent_breaker")

RECEIPT_VERSION = 2  # 2: the tenant is signed too
MAX_RECEIPTS = 64  # the newest; claims are checked against `mutating` and `references`
MAX_REFERENCE_HASHES = 4096
MAX_CONFIRMED_HASHES = 1024
MAX_MUTATING_TOOLS = 256
#: a reference written in lower or mixed case (tx-99482) counts only with this many digits:
#: with fewer it cannot be told from prose ("top-100")
MIN_CASELESS_REFERENCE_DIGITS = 5
MAX_SCANNED_CHARS = 1 << 20  # of a result's canonical text (a page snapshot runs long)
#: entries in a ClaimChecker's cache of the reference a dash's context holds, emptied when full:
#: ids repeat across results, and reading one anew costs a keyed hash
MAX_CACHED_REFERENCES = 1 << 15
# TX 99482 -> TX-99482; not a quantity (a decimal or thousands part follows: 1500.00, 1,500) nor an
# amount after a currency code (USD 1500)
_CURRENCIES = (
    "USD|EUR|GBP|JPY|CHF|CAD|AUD|NZD|CNY|RMB|HKD|SGD|INR|KRW|SEK|NOK|DKK|PLN|CZK|MXN|BRL|ZAR|RUB|TRY|AED|SAR|ILS|THB|IDR"
)
_SPACED_ID = re.compile(rf"\b(?!(?:{_CURRENCIES})\b)(?=([A-Z]{{2,}}))\1[ _]+(\d{{3,}})\b(?![.,]\d)")
# the rewrite runs only on a text whose shape (capitals "A", "_" a space, digits and non-ASCII bytes
# "0") holds a capital, spaces, a digit: re searches for a literal (the shape's) many times faster
# than for a class (a capital)
_SPACED_SHAPE = bytes.maketrans(
    string.ascii_uppercase.encode() + b"_" + string.digits.encode() + bytes(range(128, 256)), b"A" * 26 + b" " + b"0" * 138
)
_SPACED_IN_SHAPE = re.compile(rb"A  *0")
_NOT_ALNUM = re.compile(r"[^0-9a-z]+")
_CASELESS_CANDIDATE = re.compile(rf"\b(?=([A-Za-z]+))\1-\d{{{MIN_CASELESS_REFERENCE_DIGITS},}}\b")
_CASELESS_DASH = re.compile(rf"-\d{{{MIN_CASELESS_REFERENCE_DIGITS}}}")
_ASCII_LETTERS = frozenset(string.ascii_letters)
_ASCII_UPPER = frozenset(string.ascii_uppercase)
_DEFAULT_DASH = re.compile(r"-\d{3}")
# the shipped pattern is read from the context of each dash before digits: the characters up to
# the end of the digits (re looks back only a fixed width; enough for the word before the dash and
# the character before the word), and what a context holds is remembered
_DASH_CONTEXT = 32
_DASHED_DIGITS = re.compile(rf"-\d{{3,}}(?!\w)(?<=((?s:.){{{_DASH_CONTEXT}}}))")
_CONTEXT_PAD = "\n" * _DASH_CONTEXT  # an id at a text's start has a context too
_NO_REFERENCE = -1
_UNREAD = -2  # a context whose word before the dash may begin before it
# a negation of the verb that follows it: "not", "never", a contraction ("wasn't"), or a word that
# says the action did not happen ("unable to", "failed to")
_NEGATORS = frozenset({"not", "never", "cannot", "unable", "failed", "unsuccessful", "without", "nor", "neither"})
# a negation of the subject before the verb: "no money was transferred", "nothing has been sent"
_NEGATING_DETERMINERS = frozenset({"no", "nothing", "none", "neither", "nobody", "nor"})
# what may stand between a negation and the verb it governs: auxiliaries, adverbs, "to", and the
# object of "get"/"have" ("could not get it sent", "failed to have them updated")
_VERB_GROUP = frozenset(
    {
        "was",
        "were",
        "is",
        "are",
        "be",
        "been",
        "being",
        "am",
        "has",
        "have",
        "had",
        "having",
        "do",
        "does",
        "did",
        "get",
        "got",
        "gotten",
        "getting",
        "to",
        "yet",
        "actually",
        "really",
        "successfully",
        "fully",
        "properly",
        "correctly",
        "ever",
        "even",
        "all",
        "still",
        "also",
        "it",
        "them",
        "this",
        "that",
        "these",
        "those",
    }
)
# a subject, a verb of its own, or a joining word ends the reach of a negation before it ("no doubt I
# transferred", "not only was it transferred", "I didn't send the e-mail but transferred the money")
_PRONOUNS = frozenset({"i", "we", "you", "he", "she", "they", "i've", "we've", "i'd", "we'd", "i'm", "we're", "me", "us"})
_JOINS = frozenset({"and", "but", "or", "then", "so", "while", "whereas", "although", "though", "because", "after", "before"})
# a preposition right before a participle makes it an adjective in a general statement, not a
# claim ("refunds for canceled reservations go back to the card"); after "the" or "your" it still
# says the deed was done ("the transferred $500 is in Jane's account")
_ATTRIBUTIVE = frozenset({"for", "of", "on", "with", "about"})
# "no" that opens a figure of speech negates nothing ("no doubt", "no worries", "no problem")
_NO_IDIOMS = frozenset({"doubt", "doubts", "worries", "worry", "problem", "problems", "question", "wonder", "matter"})
# the words a question opens with ("Has it been sent?", "Was the payment made?")
_INTERROGATIVES = frozenset(
    {
        "has",
        "have",
        "had",
        "was",
        "were",
        "is",
        "are",
        "did",
        "do",
        "does",
        "can",
        "could",
        "should",
        "would",
        "will",
        "what",
        "which",
        "why",
        "how",
        "when",
        "where",
        "who",
    }
)
#: how many words a negating determiner reaches over to its verb ("no payment to your landlord was sent")
_DETERMINER_REACH = 6
# a confirmation cites an id as the proof that an action happened: only a receipted result vouches
# for it. A noun reaches over its clause ("the confirmation number for your transfer to Jane is
# TX-1"), a verb over a few words ("confirmed as TX-1")
_CONFIRMATION_NOUNS = frozenset({"confirmation", "confirmations", "receipt", "receipts"})
_CONFIRMATION_VERBS = frozenset({"confirmed", "confirming", "confirms", "confirm"})
_CONFIRMATION_REACH = (12, 3)  # words before the id: a noun's, a verb's
# a sum of money in a claim's sentence: only a tool that moves money can have done it
_MONEY = re.compile(
    r"[$\u20ac\u00a3\u00a5]\s?\d|\d\s?(?:usd|eur|gbp)\b|\b(?:dollars?|euros?|pounds? sterling|cents?|bucks)\b"
    r"|\b(?:money|funds)\b"
)
#: tool-name stems of actions that move money (a claim about a sum needs one of them)
MONEY_STEMS = (
    "transfer",
    "wire",
    "pay",
    "charge",
    "refund",
    "remit",
    "payout",
    "purchase",
    "buy",
    "checkout",
    "deposit",
    "withdraw",
    "credit",
    "debit",
    "reimburse",
    "invoice",
    "bill",
)
#: a digit run this long in a result may be cited with a label of the answer's own ("item ID
#: 7292993796" for "item_id": "7292993796", "XXXX-7334" for "last_four": "7334")
MIN_DIGIT_RUN = 4
# a run in text (a JSON string, a user's words), on its own: not a JSON number (a count, a
# price: after ":", "," or "["), nor a part of a date, a time, a decimal, a version or a
# thousands group (2024-05-01, 12:00, 54.04, 1,500). Read from the text's shape (ASCII digits
# kept, ":,[" as "!", "-./" as "#", every other byte a space: few classes to scan); the pattern
# starts with a digit, so its look-behinds run at digits only
_RUN_SHAPE = bytes(c if 48 <= c <= 57 else 33 if c in b":,[" else 35 if c in b"-./" else 32 for c in range(256))
_RUN_IN_SHAPE = re.compile(rb"[0-9](?<![0-9!][0-9])(?<![0-9!][#!][0-9])[0-9]{%d,}+(?![#!]?[0-9])" % (MIN_DIGIT_RUN - 1))
#: distinct digit runs of one text kept as references (a page of numbers holds thousands)
MAX_DIGIT_RUNS = 512
# words that make a claim phrase no claim of a done deed: a condition, a possibility, a future,
# an instruction ("once the form is submitted", "the refund will be completed", "please make
# sure it is paid") -- unless the agent speaks of itself after the word ("after checking your
# order I refunded it", "I can confirm we refunded it" are claims)
_NOT_ASSERTED = frozenset(
    {
        "if",
        "once",
        "when",
        "whenever",
        "until",
        "unless",
        "will",
        "would",
        "should",
        "can",
        "could",
        "may",
        "might",
        "must",
        "need",
        "needs",
        "please",
    }
)
_FIRST_PERSON = frozenset({"i", "we", "i've", "we've", "i'd", "we'd", "i'm", "we're", "me", "us", "myself", "ourselves"})
_REF = "ref"  # the label of a reference key's keyed hash
#: matches of one claim phrase read in an answer (a text of a million "sent" is no answer)
MAX_CLAIM_MATCHES = 64
_WORD = re.compile(r"[A-Za-z']+")
# a dash between spaces ends a clause too ("No worries - the $500 was sent"; em and en dashes
# are "-" once normalized)
_CLAUSE_END = re.compile(r"[,.;:!?\n]|\s-+\s")
_SENTENCE_END = re.compile(r"[.!?\n]")


@dataclass(frozen=True)
class ReceiptKeys:
    """Signing keys: the current one signs, the current and previous ones verify."""

    current_id: str
    keys: Mapping[str, bytes]

    def __post_init__(self) -> None:
        if self.current_id not in self.keys:
            raise ConfigError(f"receipt key id {self.current_id!r} is not among the keys {sorted(self.keys)}")
        for kid, key in self.keys.items():
            if len(key) < 16:
                raise ConfigError(f"receipt key {kid!r} is {len(key)} bytes; use at least 16 random bytes")

    @classmethod
    def ephemeral(cls) -> ReceiptKeys:
        """A random key that lives as long as the process (replay, development)."""
        return cls("ephemeral", {"ephemeral": secrets.token_bytes(32)})

    @classmethod
    def parse(cls, spec: str, *, source: str) -> ReceiptKeys:
        """`kid:key[,kid:key...]`, the first pair current; keys as hex or base64."""
        pairs = [p.strip() for p in spec.split(",") if p.strip()]
        keys: dict[str, bytes] = {}
        for pair in pairs:
            kid, sep, raw = pair.partition(":")
            if not sep or not kid or not raw:
                raise ConfigError(f"{source}: expected 'kid:key[,kid:key...]', got an entry without a key id")
            keys[kid] = _decode_key(raw, kid, source)
        if not keys:
            raise ConfigError(f"{source} holds no key")
        return cls(pairs[0].partition(":")[0], keys)

    @classmethod
    def from_file(cls, path: str | Path) -> ReceiptKeys:
        """A JSON file: {"current": "k2", "keys": {"k2": "<hex or base64>", "k1": "..."}}."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            current, raw = data["current"], data["keys"]
        except OSError as exc:
            raise ConfigError(f"cannot read receipt key file {path}: {exc.strerror}") from None
        except (ValueError, KeyError, TypeError):
            raise ConfigError(f"receipt key file {path} must be JSON with 'current' and 'keys'") from None
        if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
            raise ConfigError(f"receipt key file {path}: 'keys' must map key ids to hex or base64 strings")
        return cls(str(current), {str(kid): _decode_key(v, kid, str(path)) for kid, v in raw.items()})

    @classmethod
    def from_config(cls, cfg: ReceiptsConfig, *, required: bool) -> ReceiptKeys | None:
        if cfg.key_file:
            return cls.from_file(cfg.key_file)
        spec = os.environ.get(cfg.key_env, "")
        if spec:
            return cls.parse(spec, source=f"${cfg.key_env}")
        if cfg.dev_ephemeral_key:
            log.warning(
                "agent-breaker: DEVELOPMENT MODE: receipts are signed with an ephemeral key that dies with this "
                "process; no one else can verify them. Set $%s or receipts.key_file in production.",
                cfg.key_env,
            )
            return cls.ephemeral()
        if required:
            raise ConfigError(
                f"receipts need a signing key in enforce mode: set ${cfg.key_env} to 'kid:hexkey', or "
                "receipts.key_file, or (development only) receipts.dev_ephemeral_key: true"
            )
        return None


def _decode_key(raw: str, kid: str, source: str) -> bytes:
    raw = raw.strip()
    try:
        return bytes.fromhex(raw)
    except ValueError:
        pass
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{source}: key {kid!r} is neither hex nor base64") from None


def _signed_payload(receipt: Mapping[str, Any]) -> bytes:
    return json.dumps(
        [
            receipt["v"],
            receipt["kid"],
            receipt["tenant"],
            receipt["session"],
            receipt["call_id"],
            receipt["tool"],
            receipt["args_hash"],
            receipt["result_hash"],
            receipt["ts"],
        ],
        separators=(",", ":"),
        ensure_ascii=True,
    ).encode("ascii")


def mint(
    keys: ReceiptKeys, *, tenant: str | None, session: str, call_id: str, tool: str, args_hash: int, result_hash: int, ts: float
) -> dict[str, Any]:
    receipt: dict[str, Any] = {
        "v": RECEIPT_VERSION,
        "kid": keys.current_id,
        "tenant": tenant,
        "session": session,
        "call_id": call_id,
        "tool": tool,
        "args_hash": f"{args_hash:016x}",
        "result_hash": f"{result_hash:016x}",
        "ts": round(ts, 6),
    }
    receipt["sig"] = hmac.new(keys.keys[keys.current_id], _signed_payload(receipt), hashlib.sha256).hexdigest()
    return receipt


def verify(
    keys: ReceiptKeys,
    receipt: Mapping[str, Any],
    *,
    tenant: str | None,
    session: str,
    call_id: str,
    tool: str,
    result_hash: int,
) -> tuple[bool, str]:
    """Is this receipt genuine, and does it vouch for exactly this (tenant, session, call, tool, result)?"""
    try:
        key = keys.keys.get(receipt["kid"])
        if receipt["v"] != RECEIPT_VERSION:
            return False, f"unknown receipt version {receipt['v']!r}"
        expected = hmac.new(key or b"", _signed_payload(receipt), hashlib.sha256).hexdigest()
        sig = receipt["sig"]
    except (KeyError, TypeError):
        return False, "malformed receipt"
    if key is None:
        return False, f"unknown key id {receipt['kid']!r}"
    if not isinstance(sig, str) or not hmac.compare_digest(expected.encode(), sig.encode("utf-8", "surrogatepass")):
        return False, "bad signature: forged or tampered"
    if receipt["session"] != session or receipt["tenant"] != tenant:
        return False, "receipt belongs to another session"
    if receipt["call_id"] != call_id or receipt["tool"] != tool:
        return False, "receipt belongs to another call"
    if receipt["result_hash"] != f"{result_hash:016x}":
        return False, "result does not match the receipted one"
    return True, "ok"


def _led_by_dash(text: str, dash: re.Pattern[str], pattern: re.Pattern[str], letters: frozenset[str]) -> Iterator[re.Match[str]]:
    """What `pattern` (a word of `letters`, a dash, digits: its match starts where the word
    does) finds in `text`, read from each place `dash` (a dash and digits) finds: re finds a
    literal first character far faster than a word boundary, where the pattern starts, and most
    texts hold few dashes before digits. The same matches as `pattern.finditer(text)`."""
    for dashed in dash.finditer(text):
        end = start = dashed.start()
        while start and text[start - 1] in letters:
            start -= 1
        if start < end:
            found = pattern.match(text, start)
            if found is not None:
                yield found


def _reference_key(token: str) -> str:
    """One spelling of a reference id: case, dashes and spaces aside (TX-99482 -> tx99482)."""
    key = normalize_text(token).replace("-", "")
    return key if key.isascii() and key.isalnum() else _NOT_ALNUM.sub("", key)  # most ids need no regex


def _dash_spaced_ids(text: str) -> str:
    """TX 99482 -> TX-99482: a space (or "_") for the dash of an id in capitals."""
    if _SPACED_IN_SHAPE.search(text.encode("utf-8", "surrogatepass").translate(_SPACED_SHAPE)) is None:
        return text
    return _SPACED_ID.sub(r"\1-\2", text)


def _not_asserted(before: list[str]) -> bool:
    """The words before a claim phrase make it a condition, a future or an instruction: the last
    such word is not followed by the agent speaking of itself."""
    for i in range(len(before) - 1, -1, -1):
        if before[i] in _NOT_ASSERTED:
            return _FIRST_PERSON.isdisjoint(before[i + 1 :])
    return False


def is_empty_result(result: Any) -> bool:
    return result is None or result == "" or result == {} or result == []


class Refs(NamedTuple):
    """The references a text gives, as keyed hashes: its reference ids, and its digit runs of
    MIN_DIGIT_RUN or more (an answer may cite those with a label of its own)."""

    ids: set[int]
    runs: set[int]


@dataclass(slots=True)
class Ledger:
    """Per-session receipt ledger: receipts; the hashes of the reference ids and of the digit runs
    that successful tool results (and the user) gave, the newest of each kept (a page of numbers
    does not push the ids out); those of receipted results apart (only they confirm an action);
    and each mutating tool tried (True once it has a receipted success)."""

    receipts: list[dict[str, Any]] = field(default_factory=list)
    references: HashPool = field(default_factory=lambda: HashPool(MAX_REFERENCE_HASHES))
    mutating: dict[str, bool] = field(default_factory=dict)
    confirmed: HashPool = field(default_factory=lambda: HashPool(MAX_CONFIRMED_HASHES))
    runs: HashPool = field(default_factory=lambda: HashPool(MAX_REFERENCE_HASHES))

    def observe(self, refs: Refs) -> None:
        """References a successful tool result or the user gave: an answer may cite them."""
        self.references.remember(refs.ids)
        self.runs.remember(refs.runs)

    def confirm(self, refs: Refs) -> None:
        """References a receipted result returned: an answer may cite them as confirmations."""
        self.confirmed.remember(refs.ids | refs.runs)

    def vouches(self, citation: Citation) -> bool:
        """Did this session return the id cited, in any spelling: the id itself, or its digits
        with a label of the answer's own. A confirmation needs a receipted result."""
        if citation.key in self.confirmed or (citation.digits is not None and citation.digits in self.confirmed):
            return True
        if citation.confirmation:
            return False
        return citation.key in self.references or (citation.digits is not None and citation.digits in self.runs)

    def to_wire(self) -> list[Any]:
        return [self.receipts, self.references.packed(), self.mutating, self.confirmed.packed(), self.runs.packed()]

    @classmethod
    def from_wire(cls, d: list[Any]) -> Ledger:
        # a ledger stored before confirmations and digit runs were kept apart has three fields
        confirmed, runs = (d[3], d[4]) if len(d) > 4 else ("", "")
        return cls(
            list(d[0]),
            HashPool.unpacked(MAX_REFERENCE_HASHES, d[1]),
            dict(d[2]),
            HashPool.unpacked(MAX_CONFIRMED_HASHES, confirmed),
            HashPool.unpacked(MAX_REFERENCE_HASHES, runs),
        )

    def attempt(self, tool: str) -> None:
        if tool not in self.mutating:
            if len(self.mutating) >= MAX_MUTATING_TOOLS:
                del self.mutating[next(iter(self.mutating))]
            self.mutating[tool] = False

    def add(self, receipt: dict[str, Any], tool: str) -> None:
        self.attempt(tool)
        self.mutating[tool] = True
        if len(self.receipts) >= MAX_RECEIPTS:
            del self.receipts[0]
        self.receipts.append(receipt)


class HashPool:
    """An insertion-ordered set of at most `cap` 64-bit hashes, the oldest going first (a long
    session's recent results are the ones its answer cites; one seen again is new again). Two
    arrays of 8 bytes a hash, in arrival order and sorted (membership by bisection): a pool of
    4,096 takes 64 KiB, where a dict of Python ints took 350."""

    __slots__ = ("cap", "_order", "_sorted")

    def __init__(self, cap: int, hashes: Iterable[int] = ()) -> None:
        self.cap = cap
        self._order = array("Q")
        self._sorted = array("Q")
        self.remember(hashes)

    def __contains__(self, h: object) -> bool:
        i: int = bisect.bisect_left(self._sorted, h)  # type: ignore[call-overload]  # h: any object, as `in` allows
        return i < len(self._sorted) and self._sorted[i] == h

    def __len__(self) -> int:
        return len(self._order)

    def __iter__(self) -> Iterator[int]:
        return iter(self._order)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HashPool) and self._order == other._order

    def __repr__(self) -> str:
        return f"HashPool({self.cap}, {len(self)} hashes)"

    def remember(self, hashes: Iterable[int]) -> None:
        new = list(dict.fromkeys(reversed(list(hashes))))[::-1]  # each once, where it came last
        if not new:
            return
        if len(new) > 32:  # many at once: one pass over the pool, then sorted anew
            fresh = set(new)
            kept = [h for h in self._order if h not in fresh] + new
            self._order = array("Q", kept[max(0, len(kept) - self.cap) :])
            self._sorted = array("Q", sorted(self._order))
            return
        for h in new:
            if h in self:
                self._order.remove(h)  # seen again: it moves to the newest end
            else:
                bisect.insort(self._sorted, h)
            self._order.append(h)
        while len(self._order) > self.cap:
            old = self._order.pop(0)
            del self._sorted[bisect.bisect_left(self._sorted, old)]

    def packed(self) -> str:
        """The hashes, oldest first, as base64 of big-endian 64-bit words."""
        out = array("Q", self._order)
        if sys.byteorder == "little":
            out.byteswap()
        return base64.b64encode(out.tobytes()).decode("ascii")

    @classmethod
    def unpacked(cls, cap: int, packed: str) -> HashPool:
        words = array("Q", base64.b64decode(packed))
        if sys.byteorder == "little":
            words.byteswap()
        return cls(cap, words)


@dataclass(frozen=True, slots=True)
class Citation:
    """A reference id an answer cites: the keyed hash of its key, of its digits (None when it
    has too few to stand alone), and whether it is cited as the confirmation of an action."""

    key: int
    digits: int | None
    confirmation: bool


def empty_mutation_trip(tool: str) -> Trip:
    return Trip(
        EMPTY_MUTATION_RESULT,
        "call",
        f"{tool} changes the world but reported success with an empty payload",
        f"Do not assume {tool} took effect: check its outcome with a read-only tool before you report it.",
        {},
    )


class ClaimChecker:
    """Checks a final answer's reference ids and completion claims against a ledger."""

    def __init__(self, cfg: AgentBreakerConfig, fingerprints: Fingerprinter) -> None:
        rc = cfg.receipts
        self._fp = fingerprints
        self._patterns = [re.compile(p) for p in rc.reference_patterns]
        # the shipped pattern (a word of capitals, a dash, digits) is found from its dashes
        self._default_patterns = rc.reference_patterns == DEFAULT_REFERENCE_PATTERNS
        self._generic = {verb.lower(): stem.lower() for verb, stem in rc.claim_verbs.items()}
        self._families = {stem.lower(): tuple(f.lower() for f in kin) for stem, kin in rc.claim_families.items()}
        self._tool_phrases = {name: tuple(p.lower() for p in t.claim_phrases) for name, t in cfg.tools.items() if t.claim_phrases}
        self._phrase_tools = [name for name, t in cfg.tools.items() if t.claim_phrases]
        phrases = set(self._generic) | {p for ps in self._tool_phrases.values() for p in ps}
        # the phrase first, its word boundary checked by looking back: re skips to the phrase's
        # first letter instead of trying a boundary at every place
        self._phrase_patterns = [(p, re.compile(f"{re.escape(p)}(?<=\\b{re.escape(p)})\\b")) for p in sorted(phrases)]
        # by the Python hash of a context or key, never by the text: the caches hold no ids
        self._context_references: dict[int, int] = {}

    @property
    def action_stems(self) -> frozenset[str]:
        return frozenset(self._generic.values())

    def references_in(self, text: str) -> Refs:
        """The references a text gives (a result, a user turn): its reference ids (`ids_in`), and
        its runs of MIN_DIGIT_RUN digits or more in text, which an answer may cite with a label of
        its own ("item ID 7292993796", "XXXX-7334")."""
        return Refs(self.ids_in(text), self._digit_runs(text))

    def ids_in(self, text: str) -> set[int]:
        """Keyed hashes of the reference ids a text cites. Look-alike letters, invisible
        characters, dash variants, a space for the dash and (with enough digits) lower case
        do not make another id: TX–99482, TX-\u200b99482, TX 99482 and tx-99482 are TX-99482."""
        text = _dash_spaced_ids(fold_text(text))
        found = self._shipped_references(text) if self._default_patterns else None
        return found if found is not None else {self._reference_hash(written) for _, written in self._written_in(text)}

    def _digit_runs(self, text: str) -> set[int]:
        runs = set(_RUN_IN_SHAPE.findall(text.encode("utf-8", "surrogatepass").translate(_RUN_SHAPE)))
        if len(runs) > MAX_DIGIT_RUNS:
            runs = set(sorted(runs)[:MAX_DIGIT_RUNS])
        # an ASCII digit run is its own reference key (_reference_key): the same hash as a cited id's digits
        return self._fp.labeled_many(_REF, runs)

    def citations(self, text: str) -> list[Citation]:
        """The reference ids an answer cites, each with its digits and whether a confirmation
        word stands right before it ("confirmation number TX-99482", "receipt: TX-99482")."""
        text = _dash_spaced_ids(fold_text(text))
        out = []
        for start, written in self._written_in(text):
            digits = _reference_key(written).lstrip(string.ascii_lowercase)
            before = _WORD.findall(text[max(0, start - 160) : start].lower())
            nouns, verbs = (before[-n:] for n in _CONFIRMATION_REACH)
            out.append(
                Citation(
                    self._reference_hash(written),
                    self._reference_hash(digits) if len(digits) >= MIN_DIGIT_RUN and digits.isdigit() else None,
                    not (_CONFIRMATION_NOUNS.isdisjoint(nouns) and _CONFIRMATION_VERBS.isdisjoint(verbs)),
                )
            )
        return out

    def _written_in(self, text: str) -> Iterator[tuple[int, str]]:
        """The reference ids the patterns find in a text, as written, with where each starts;
        one in lower or mixed case (tx-99482) read as its upper-case self."""
        if self._default_patterns:
            yield from ((m.start(), m.group()) for m in _led_by_dash(text, _DEFAULT_DASH, self._patterns[0], _ASCII_UPPER))
        else:
            yield from ((m.start(), m.group()) for p in self._patterns for m in p.finditer(text))
        for m in _led_by_dash(text, _CASELESS_DASH, _CASELESS_CANDIDATE, _ASCII_LETTERS):
            candidate = self._in_capitals(m.group())
            if candidate is not None:
                yield m.start(), candidate

    def _in_capitals(self, written: str) -> str | None:
        """An id written in lower or mixed case as its upper-case self, if a pattern takes that."""
        candidate = written.upper()
        return candidate if candidate != written and any(p.fullmatch(candidate) for p in self._patterns) else None

    def _shipped_references(self, text: str) -> set[int] | None:
        """`ids_in` for the shipped pattern, read from each dash's context (in C when every
        context is known); None when a word before a dash may begin before its context does: the
        whole text must be read."""
        contexts = _DASHED_DIGITS.findall(_CONTEXT_PAD + text)
        ids = list(map(hash, contexts))
        known = self._context_references
        try:
            found = set(map(known.__getitem__, ids))
        except KeyError:
            found = set()
            for i, context in zip(ids, contexts, strict=True):
                reference = known.get(i)
                if reference is None:
                    if len(known) >= MAX_CACHED_REFERENCES:  # before each insert: one text may hold many
                        known.clear()
                    # kept here, not read back: another thread may empty the cache
                    reference = known[i] = self._context_reference(context)
                found.add(reference)
        if _UNREAD in found:
            return None
        found.discard(_NO_REFERENCE)
        return found

    def _context_reference(self, context: str) -> int:
        """The keyed hash of the reference id a context ends with (the word before its last dash,
        the dash, digits): _NO_REFERENCE for none, _UNREAD when the word may begin before the
        context does."""
        dash = context.rfind("-")
        start = len(context[:dash].rstrip(string.ascii_letters)) if dash > 0 else 0
        if start == 0:
            return _UNREAD
        written = self._written_at(context, start, dash) if start < dash else None
        return _NO_REFERENCE if written is None else self._reference_hash(written)

    def _written_at(self, text: str, start: int, dash: int) -> str | None:
        """What `_written_in` finds of the word text[start:dash] (all the ASCII letters before a
        dash and digits): the shipped pattern's match where the word is in capitals, else its
        caseless reading. A word with lower case cannot start the one, a word in capitals makes
        no caseless candidate."""
        if text[start:dash].isupper():
            found = self._patterns[0].match(text, start)
            return None if found is None else found.group()
        written = _CASELESS_CANDIDATE.match(text, start)
        return None if written is None else self._in_capitals(written.group())

    def _reference_hash(self, written: str) -> int:
        """The keyed hash of a reference id's key (remembered by the fingerprinter)."""
        return self._fp.labeled(_REF, _reference_key(written))

    def result_references(self, canonical: str) -> Refs:
        """The references a successful result holds anywhere (an id inside a sentence or a page
        snapshot counts), read from its canonical JSON: an answer may cite them."""
        ids, runs = self.references_in(canonical[:MAX_SCANNED_CHARS])
        return Refs(ids if len(ids) <= MAX_REFERENCE_HASHES else set(list(ids)[:MAX_REFERENCE_HASHES]), runs)

    def check(self, text: str, ledger: Ledger) -> Trip | None:
        unverified = [c for c in self.citations(text) if not ledger.vouches(c)]
        if unverified:
            unconfirmed = sum(c.confirmation for c in unverified)
            what = "no tool result of this session returned" if not unconfirmed else "no receipted tool result confirmed"
            return Trip(
                UNVERIFIED_CLAIM,
                "session",
                f"the answer cites {len(unverified)} reference(s) that {what}",
                _REPORT_TRUTH,
                {"unverified_references": len(unverified)},
            )
        missing = self._unbacked(self._claims(text), ledger)
        if missing:
            return Trip(
                UNVERIFIED_CLAIM,
                "session",
                f"the answer claims a completed action, but {', '.join(sorted(missing))} has no receipted success "
                "in this session",
                _REPORT_TRUTH,
                {"unreceipted_tools": len(missing)},
            )
        return None

    def _claims(self, text: str) -> dict[str, bool]:
        """Claim phrases asserted in the text (not negated, not a condition, a future or a
        question), lower-cased, each with whether its sentence names a sum of money. The text's
        sentence ends are found once (each phrase match looks its own up)."""
        lowered = normalize_text(text)
        ends = [m.start() for m in _SENTENCE_END.finditer(lowered)]
        found: dict[str, bool] = {}
        for phrase, pattern in self._phrase_patterns:
            for m in itertools.islice(pattern.finditer(lowered), MAX_CLAIM_MATCHES):
                i = bisect.bisect_left(ends, m.end())
                sentence = lowered[ends[i - 1] + 1 if i else 0 : ends[i] + 1 if i < len(ends) else len(lowered)]
                if not _asserted(lowered, m.start(), sentence):
                    continue
                found[phrase] = found.get(phrase, False) or _MONEY.search(sentence) is not None
        return found

    def _unbacked(self, claimed: dict[str, bool], ledger: Ledger) -> set[str]:
        """What the claims name that has no receipted success: an explicit claim phrase's tool,
        tried or not; for a generic verb, the tools tried that could do it (one success backs
        it), or, when no tool tried could, every action tried unless one succeeded. A session
        that tried no action at all is not checked by generic verbs."""
        missing: set[str] = set()
        for phrase, money in claimed.items():
            explicit = [t for t in self._phrase_tools if phrase in self._tool_phrases[t]]
            if explicit:
                missing.update(t for t in explicit if not ledger.mutating.get(t, False))
                continue
            stem = self._generic.get(phrase)
            if stem is None or not ledger.mutating:
                continue
            able = self._able(stem, list(ledger.mutating), money)
            if able and not any(ledger.mutating[t] for t in able):
                missing.update(able)
            elif not able and not any(ledger.mutating.values()):
                # no tool tried could do it by name: some action must have succeeded (a refund
                # is often a side effect of an update); with none, every action tried is claimed
                missing.update(ledger.mutating)
        return missing

    def _able(self, stem: str, tried: list[str], money: bool) -> list[str]:
        """The tools tried that could do a generic verb's action: those named with its stem, else
        those named with a stem of its family (any tool for "*"); for a sum of money, only those
        that move money."""
        family = self._families.get(stem, (stem,))
        named = [t for t in tried if stem in t.lower()]
        kin = tried if "*" in family else [t for t in tried if any(f in t.lower() for f in family)]
        for pool in (named, kin):
            if money:
                pool = [t for t in pool if any(m in t.lower() for m in MONEY_STEMS)]
            if pool:
                return pool
        return []


def _asserted(lowered: str, start: int, sentence: str) -> bool:
    """Does the claim phrase at lowered[start:] (in `sentence`) assert a done deed: no negation
    governs it, no condition, modal or instruction word comes before it, it is no adjective of a
    general statement, and its sentence is no question (one that opens as a question and ends
    with "?": "Has it been sent?", not "I sent it, anything else?")."""
    opening = _WORD.findall(sentence[:40].lower())[:1]
    if sentence.rstrip().endswith("?") and opening and opening[0] in _INTERROGATIVES:
        return False
    words = _WORD.findall(_CLAUSE_END.split(lowered[max(0, start - 120) : start])[-1])
    if words and words[-1] in _ATTRIBUTIVE:
        return False  # a participle as an adjective: "refunds for canceled reservations"
    return not _negated(words) and not _not_asserted(words[-6:])


def _negated(words: list[str]) -> bool:
    """A negation governs the verb after these words (its clause up to the claim phrase): a
    negator right before the verb group ("was not transferred", "could not have sent",
    "wasn't"), or a negating determiner of its subject ("no payment was sent", "nothing was
    charged"). One farther away, or beyond a subject or a joining word, negates something else
    ("no doubt I transferred", "not only was it transferred", "didn't send it but paid")."""
    i = len(words) - 1
    while i >= 0 and words[i] in _VERB_GROUP:
        i -= 1
    if i < 0:
        return False
    if words[i] in _NEGATORS or words[i] in _NEGATING_DETERMINERS or words[i].endswith("n't"):
        return True
    reach = words[max(0, i - _DETERMINER_REACH) : i + 1]
    for j in range(len(reach) - 1, -1, -1):
        w = reach[j]
        if w in _NEGATING_DETERMINERS:  # "neither the fee nor the $500 was sent": "nor" is both
            return not (w == "no" and j + 1 < len(reach) and reach[j + 1] in _NO_IDIOMS)
        if w in _PRONOUNS or w in _JOINS or w in _NEGATORS or w.endswith("n't"):
            return False
    return False


_REPORT_TRUTH = (
    "Do not claim actions that did not happen. Report the real outcome of each action, with the references "
    "the tools actually returned."
)
