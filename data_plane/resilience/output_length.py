"""How long a tenant's answers run, learned from the engines' `usage.completion_tokens` per
(tenant, family, category): the output length flow control predicts the tenant's requests'
service time with (docs/data_plane.md, "Flow control"), instead of assuming each writes its
`max_tokens`.

The figure for a (tenant, family, category) is the QUANTILE of its last SAMPLES answers'
output tokens, none before MIN_SAMPLES; a request is predicted at the smaller of its tenant's
figure and its own `max_tokens` (`decision.saturation.Seen.limits_for`), and at its
`max_tokens` (or the category's typical output) while the figure is unknown. Samples are this
replica's clean first-choice answers that report `usage`. An answer cut at its request's
`max_tokens` says only that it would have run at least that long: it counts as longer than
any figure (a sample of infinity), so where more than 1 - QUANTILE of the answers are cut the
figure is unknown and requests are predicted at their `max_tokens` as before.

Other tenants' capacity is what a short figure spends (it admits more requests at once, and
lets them wait longer in the queue), so a figure is learned from one tenant's answers and
judges only that tenant's requests: a tenant whose answers are all one token long cannot make
another tenant's long answers look cheap. What one tenant can still do to others: make its own
requests look cheap (short answers while learning, long ones after) and so hold more of a pair
than its answers allow, until SAMPLES x (1 - QUANTILE) of its long answers have come (7); and
evict other tenants' figures by inventing MAX_KINDS tenant names, which makes their requests
predicted at `max_tokens` again (the figure before learning), never shorter. Requests without
a tenant are one tenant (`anonymous`). What else could explain a short figure: a workload
whose answers are short, which is what it measures.
Event-loop thread only; memory is SAMPLES per (tenant, family, category), MAX_KINDS of them.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping

SAMPLES = 64  # the recent answers per (tenant, family, category) the figure is the quantile of
MIN_SAMPLES = 16  # fewer samples than this: the request's max_tokens is used
QUANTILE = 0.9
MAX_KINDS = 4096  # (tenant, family, category) kept; the least recently answered goes first

_NONE: Mapping[tuple[str, str], int] = {}


class OutputLengths:
    """tenant -> (family, category) -> learned output tokens; read through `saturation.Seen`."""

    __slots__ = ("_figures", "_max_kinds", "_recent")

    def __init__(self, max_kinds: int = MAX_KINDS) -> None:
        self._max_kinds = max_kinds
        self._recent: OrderedDict[tuple[str, str, str], deque[float]] = OrderedDict()
        self._figures: dict[str, dict[tuple[str, str], int]] = {}

    def answered(self, kind: tuple[str, str, str], tokens: tuple[int, int | None]) -> None:
        """One answer of `kind` (tenant, family, category): `tokens` = (its output tokens,
        its request's max_tokens or None)."""
        output, cap = tokens
        if output < 0:
            return
        recent = self._recent.get(kind)
        if recent is None:
            recent = self._recent[kind] = deque(maxlen=SAMPLES)
            if len(self._recent) > self._max_kinds:
                self._forget(next(iter(self._recent)))
        else:
            self._recent.move_to_end(kind)
        recent.append(math.inf if cap is not None and output >= cap else float(output))
        if len(recent) >= MIN_SAMPLES:
            figure = sorted(recent)[int(QUANTILE * (len(recent) - 1))]
            self._set(kind, None if math.isinf(figure) else max(1, int(figure)))

    def of(self, tenant: str) -> Mapping[tuple[str, str], int]:
        """`tenant`'s figures: (family, category) -> output tokens."""
        return self._figures.get(tenant, _NONE)

    def figures(self) -> Iterator[tuple[str, str, str, int]]:
        """Every learned figure: (tenant, family, category, output tokens), for the gauge
        `gearbox_flow_output_tokens` (`telemetry.flow_metrics`)."""
        for tenant, mine in self._figures.items():
            for (family, category), tokens in mine.items():
                yield tenant, family, category, tokens

    def _set(self, kind: tuple[str, str, str], figure: int | None) -> None:
        tenant, family, category = kind
        mine = self._figures.get(tenant)
        if figure is not None:
            if mine is None:
                mine = self._figures[tenant] = {}
            mine[(family, category)] = figure
        elif mine is not None:
            mine.pop((family, category), None)
            if not mine:
                del self._figures[tenant]

    def _forget(self, kind: tuple[str, str, str]) -> None:
        del self._recent[kind]
        self._set(kind, None)
