"""The session's ledger: its receipts, the keyed hashes of the references its tool results (and
its user) gave, those of receipted results apart, and each mutating tool tried. Hashes only,
never the result text."""

from __future__ import annotations

import base64
import bisect
import sys
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

MAX_RECEIPTS = 64  # the newest; claims are checked against `mutating` and `references`
MAX_REFERENCE_HASHES = 4096
MAX_CONFIRMED_HASHES = 1024
MAX_MUTATING_TOOLS = 256


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
