"""Final-answer verification (against reward hacking): the reference ids an answer cites must
come from the session's tool results, and each completed action it claims needs a receipted
success of a tool able to do it."""

from __future__ import annotations

import bisect
import itertools
import re
import string
from collections.abc import Iterator

from ._canonical import Fingerprinter
from ._ledger import MAX_REFERENCE_HASHES, Citation, Ledger, Refs
from ._text import fold_text, normalize_text
from .config import DEFAULT_REFERENCE_PATTERNS, AgentBreakerConfig
from .heuristics import UNVERIFIED_CLAIM
from .verdicts import Trip

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
_NEGATORS = frozenset(
    {"not", "never", "cannot", "unable", "failed", "unsuccessful", "without", "nor", "neither"}
    # ... in the languages of the claim verbs (their "no" is a negating determiner below)
    | {"pas", "jamais", "nicht", "niemals", "nie", "kein", "keine", "não", "nao", "nunca", "non", "ni"}
)
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
        # auxiliaries and adverbs of the claim verbs' other languages
        "se",
        "ha",
        "han",
        "he",
        "hemos",
        "sido",
        "fue",
        "fueron",
        "está",
        "esta",
        "correctamente",
        "a",
        "été",
        "est",
        "sont",
        "bien",
        "correctement",
        "wurde",
        "wurden",
        "ist",
        "sind",
        "hat",
        "haben",
        "worden",
        "erfolgreich",
        "foi",
        "foram",
        "é",
        "stato",
        "stata",
        "è",
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
    rf"[$\u20ac\u00a3\u00a5\u20b9\u20a9\u20bd\u20ba\u20aa]\s?\d|\d\s?(?:{_CURRENCIES.lower()})\b"
    r"|\b(?:dollars?|euros?|pounds? sterling|cents?|bucks|francs?|kronor|kroner|yen|rupees?)\b|\b(?:money|funds)\b"
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
_WORD = re.compile(r"(?:[^\W\d_]|')+")
# a failure denied ("it is not true that the payment didn't go through", "there is no way the
# transfer failed"): an assertion that the action happened
_DENIED_FAILURE = re.compile(
    r"\b(?:not (?:true|the case|correct)|no way|untrue|false|impossible)\b[^.!?\n]{0,120}?"
    r"(?:n't\b|\b(?:not|never|fail(?:ed|s)?|failure|unsuccessful|bounced|rejected|declined)\b)"
    r"|\b(?:did|does|has|have|was|were)(?: not|n't) (?:fail|bounce|get rejected|get declined)\b"
)
#: a reference written without its dash, after a word that names it ("reference KBX77310"):
#: letters and at least MIN_DIGIT_RUN digits
_NAMED_REFERENCE = re.compile(
    r"\b(?:reference|ref|confirmation|transaction|receipt|tracking|booking|order|code"
    r"|referencia|refer\u00eancia|r\u00e9f\u00e9rence|referenz|c\u00f3digo|codigo|n\u00famero|num\u00e9ro|nummer"
    r"|confirmaci\u00f3n|confirma\u00e7\u00e3o|best\u00e4tigung)"
    r"(?:\s+(?:number|no|id|code|#|de r\u00e9f\u00e9rence|de referencia))?"
    r"(?:\s+(?:is|was|es|est|ist|\u00e9))?\s*[:#.]?\s*([A-Za-z]{1,6}\d{4,}|\d{4,}[A-Za-z]{1,6})\b",
    re.IGNORECASE,
)
# a dash between spaces ends a clause too ("No worries - the $500 was sent"; em and en dashes
# are "-" once normalized)
_CLAUSE_END = re.compile(r"[,.;:!?\n]|\s-+\s")
_SENTENCE_END = re.compile(r"[.!?\n]")


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
    such word is not followed by the agent speaking of itself ("once" opening "once again" or
    "once more" is no condition)."""
    for i in range(len(before) - 1, -1, -1):
        if before[i] in _NOT_ASSERTED and not (before[i] == "once" and before[i + 1 : i + 2] in (["again"], ["more"])):
            return _FIRST_PERSON.isdisjoint(before[i + 1 :])
    return False


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
        written_in = [*self._written_in(text), *((m.start(1), m.group(1)) for m in _NAMED_REFERENCE.finditer(text))]
        out = []
        for start, written in written_in:
            digits = "".join(c for c in written if c.isdigit())
            before = _WORD.findall(text[max(0, start - 160) : start].lower())
            nouns, verbs = (before[-n:] for n in _CONFIRMATION_REACH)
            out.append(
                Citation(
                    self._reference_hash(written),
                    self._reference_hash(digits) if len(digits) >= MIN_DIGIT_RUN else None,
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
        missing = self._unbacked(self._claims(text, list(ledger.mutating)), ledger)
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

    def _claims(self, text: str, tried: list[str]) -> dict[str, bool]:
        """Claim phrases asserted in the text (not negated, not a condition, a future or a
        question), lower-cased, each with whether its sentence names a sum of money. A phrase of
        a done deed that names no action ("processed", "went through", "successful": the stem
        `complete`) counts only in a sentence about an action tried (`tried`: its name's words,
        or its kin's: "payment" for a transfer) or about a sum; a denied failure ("not true that
        it didn't go through") is such a phrase too. The text's sentence ends are found once."""
        lowered = normalize_text(text)
        ends = [m.start() for m in _SENTENCE_END.finditer(lowered)]
        kin = self._kin_words(tried)
        found: dict[str, bool] = {}
        for phrase, pattern in self._phrase_patterns:
            for m in itertools.islice(pattern.finditer(lowered), MAX_CLAIM_MATCHES):
                i = bisect.bisect_left(ends, m.end())
                sentence = lowered[ends[i - 1] + 1 if i else 0 : ends[i] + 1 if i < len(ends) else len(lowered)]
                if not _asserted(lowered, m.start(), sentence):
                    continue
                money = _MONEY.search(sentence) is not None
                if self._generic.get(phrase) == _ANY_ACTION and not money and not _names_any(sentence, kin):
                    continue
                found[phrase] = found.get(phrase, False) or money
        for m in itertools.islice(_DENIED_FAILURE.finditer(lowered), MAX_CLAIM_MATCHES):
            sentence = lowered[m.start() : m.end()]
            if _names_any(sentence, kin) or _MONEY.search(sentence) is not None:
                found[_DENIED] = found.get(_DENIED, False) or _MONEY.search(sentence) is not None
        return found

    def _kin_words(self, tried: list[str]) -> list[str]:
        """The stems a sentence about one of these actions may use: the words of their names,
        the stems of the families they belong to, and for one that moves money the stems of
        every money action ("payment", "transfer" for move_money)."""
        names = [t.lower() for t in tried]
        words = {w for t in names for w in _NAME_WORDS.findall(t)}
        kin = {w for w in words if len(w) >= MIN_KIN_CHARS}
        for family in self._families.values():
            stems = [f for f in family if f != "*"]
            if any(w.startswith(f) for f in stems for w in words):
                kin.update(f for f in stems if len(f) >= MIN_KIN_CHARS)
        if any(m in t for t in names for m in (*MONEY_STEMS, "money", "funds")):
            kin.update(MONEY_STEMS)
        return sorted(kin)

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
            stem = _ANY_ACTION if phrase == _DENIED else self._generic.get(phrase)
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


#: the stem of the claim phrases that name no action of their own (any action may back them)
_ANY_ACTION = "complete"
#: the claim of a denied failure, by this name among the phrases found
_DENIED = "(a failure denied)"
_NAME_WORDS = re.compile(r"[a-z]+")
#: a stem this short says nothing of what a sentence is about ("add", "set")
MIN_KIN_CHARS = 4


def _names_any(sentence: str, stems: list[str]) -> bool:
    """Does a word of the sentence start with one of the stems ("payment" with "pay")."""
    return any(word.startswith(stem) for word in _WORD.findall(sentence) for stem in stems)


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
