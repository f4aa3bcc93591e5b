"""What a detector returns when it trips, and the similarity all fuzzy detectors share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rapidfuzz.distance import Indel

from ..verdicts import Scope


@dataclass(frozen=True, slots=True)
class Trip:
    """What a check returns when it trips: the heuristic, its scope, why, and what the agent should do."""

    heuristic: str
    scope: Scope
    reason: str
    instruction: str
    counters: dict[str, Any] = field(default_factory=dict)
    retry_after_s: float | None = None
    #: a graduated heuristic's first trips in a pattern: the call runs, the agent is warned
    advisory: bool = False
    #: the heuristic is sure (a duplicate of a call still in flight): never only a warning
    certain: bool = False


def similarity(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """Indel similarity of two token-hash sequences, 0..1 (rapidfuzz). On sorted sequences
    this is the Dice coefficient of the two token multisets: word order does not matter."""
    if not a and not b:
        return 1.0
    return Indel.normalized_similarity(a, b)
