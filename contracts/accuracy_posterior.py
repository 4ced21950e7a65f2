"""What best effort believes about an accuracy the data cannot prove: a Beta posterior.

PURE: scipy's regularized incomplete beta, no I/O. The bounds of `contracts.accuracy_bound`
are the guarantee floors are checked with; this is a belief, used only to rank pairs when
no pair is proven (docs/accuracy.md, "Best effort: the chance of meeting the request").
Unlike a bound it is not changed by optional stopping: the posterior depends on the counts
alone, not on when asking stopped.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy.special import betainc

Floats = npt.NDArray[np.float64]


def posterior_tail(right: int, n: int, floors: Floats) -> Floats:
    """P(true accuracy >= f | `right` of `n` right) for each floor f, under a uniform prior:
    the upper tail of the Beta(right + 1, n - right + 1) posterior.

    >>> [round(float(p), 3) for p in posterior_tail(88, 100, np.array([0.86, 0.90]))]
    [0.671, 0.208]
    """
    if n < 0 or not 0 <= right <= n:
        raise ValueError(f"need 0 <= right <= n, got {right}/{n}")
    # = 1 - I_f(right + 1, n - right + 1), written as I_(1-f)(n - right + 1, right + 1):
    # the same number, and scipy computes it about twenty times faster
    tail: Floats = betainc(n - right + 1, right + 1, 1.0 - floors)
    return tail
