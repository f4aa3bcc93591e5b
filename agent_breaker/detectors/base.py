"""The similarity all fuzzy detectors share (what a detector returns when it trips, `Trip`,
lives in verdicts)."""

from __future__ import annotations

from rapidfuzz.distance import Indel


def similarity(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """Indel similarity of two token-hash sequences, 0..1 (rapidfuzz). On sorted sequences
    this is the Dice coefficient of the two token multisets: word order does not matter."""
    if not a and not b:
        return 1.0
    return Indel.normalized_similarity(a, b)
