"""The common practice Gearbox replaces: a static complexity-threshold router (PURE).

A complexity score from character entropy plus code / JSON / math markers and length, mapped
to fixed precision tiers by fixed thresholds. It never looks at the request's budget or
accuracy floor, nor at load: that is the point of the comparison.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

_CODE = re.compile(r"```|\bdef |\breturn\b|\bclass |;\s*$|=>|\{\s*$|#include|\bfunction\b", re.M)
_JSON = re.compile(r"\{\s*\"|\"\s*:|\bjson\b", re.I)
_MATH = re.compile(r"\d+\s*[-+*/^=]\s*\d+|\b(?:compute|solve|integral|equation|prove)\b", re.I)

# Fixed thresholds on the score (set once so chat lands on int4 and code on the top tier,
# never tuned on results); tiers go from the cheapest to the most precise pair.
THRESHOLDS = (0.42, 0.50, 0.57)


def char_entropy_bits(text: str) -> float:
    """Shannon entropy of the character distribution, in bits per character."""
    if not text:
        return 0.0
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def complexity_score(text: str) -> float:
    """0..1: entropy (English prose is about 4.2 bits/char) plus markers and length."""
    entropy = min(1.0, char_entropy_bits(text) / 5.5)
    code = 1.0 if _CODE.search(text) else 0.0
    json_marker = 1.0 if _JSON.search(text) else 0.0
    math_marker = 1.0 if _MATH.search(text) else 0.0
    length = min(1.0, len(text) / 2000)
    score = 0.45 * entropy + 0.2 * code + 0.1 * json_marker + 0.15 * math_marker + 0.1 * length
    return min(1.0, score)


def choose_tier(text: str, tiers: Sequence[str]) -> str:
    """The pair for `text`: tiers[k] where k counts the thresholds the score reaches."""
    if len(tiers) != len(THRESHOLDS) + 1:
        raise ValueError(f"need {len(THRESHOLDS) + 1} tiers, got {len(tiers)}")
    score = complexity_score(text)
    return tiers[sum(1 for t in THRESHOLDS if score >= t)]
