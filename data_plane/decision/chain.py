"""The read-only sequences a decision carries: its fallback chain and its rejected pairs.

PURE. `choose_route` decides from flat tuples of figures; these sequences turn them into
`Candidate` / `Rejected` objects only when someone reads them. The proxy reads the first
candidate or two, and the chain works out only as many as are read; `/v1/route` and
strict-mode errors read everything. A sequence holds only
values fixed at decision time (never the live load mapping), so reading it later gives what
an eager decision would have held. Both behave like tuples: indexing, slicing (a tuple),
iteration, `len`, and equality with tuples and with each other.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar, overload

from data_plane.domain import Candidate, CompiledEndpoint, CompiledPair, Rejected

# One feasible pair as the scan leaves it: its sort key first (cost, predicted latency,
# table order), then what the Candidate needs.
FeasibleRow = tuple[
    float,  # estimated cost, USD
    float,  # predicted latency, s
    int,  # table order (the stable tie-break)
    CompiledPair,
    tuple[CompiledEndpoint, ...],  # endpoints in preference order
    int,  # input tokens
    float,  # predicted TTFT, s
    float,  # load behind the prediction (this request included)
]


def candidate_of(row: FeasibleRow, output_tokens: int) -> Candidate:
    cost, latency_s, _, pair, endpoints, input_tokens, ttft_s, load = row
    return Candidate(
        pair=pair,
        endpoints=endpoints,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        predicted_ttft_s=ttft_s,
        predicted_latency_s=latency_s,
        estimated_cost_usd=cost,
        load=load,
    )


T = TypeVar("T")


class _TupleLike(Sequence[T]):
    """Equality, hashing and repr of a tuple for the lazy sequences below."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _TupleLike | tuple):
            return tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to tuples, so not hashable

    def __repr__(self) -> str:
        return repr(tuple(self))


class CandidateChain(_TupleLike[Candidate]):
    """The fallback chain. Its head (the choice) is known at decision time; the rows after it
    come from `leading(n)` when first read: the chain's first n rows (all of them when it is
    shorter), starting with that same head. Reading candidate i asks for i + 1 rows only, so
    the proxy's look at the next candidate costs what that candidate costs (`scan.Rest`),
    not the whole chain; `len`, negative indices and slices ask for every row. Candidates
    are built when first read and then kept (the same object on every read, so identity
    checks work)."""

    __slots__ = ("_built", "_leading", "_output_tokens", "_rows")

    def __init__(
        self,
        rows: Sequence[FeasibleRow],
        output_tokens: int,
        leading: Callable[[int], Sequence[FeasibleRow]] | None = None,
    ) -> None:
        if not rows:
            raise ValueError("a chain starts with its head")
        self._rows = rows  # the chain's first rows: all of them once `_leading` is None
        self._output_tokens = output_tokens
        self._leading = leading
        self._built: dict[int, Candidate] = {}

    def _first(self, n: int) -> Sequence[FeasibleRow]:
        """The chain's first `n` rows, or all of them when it is shorter (or more, once known)."""
        if self._leading is not None and len(self._rows) < n:
            rows = self._leading(n)
            if rows[0] is not self._rows[0]:
                raise AssertionError("the chain's rows must keep its head")
            if len(rows) < n:
                self._leading = None  # that is the whole chain
            self._rows = rows
        return self._rows

    def _all(self) -> Sequence[FeasibleRow]:
        return self._first(sys.maxsize)

    def __len__(self) -> int:
        return len(self._all())

    def _at(self, i: int) -> Candidate:
        """Candidate `i` (from 0); IndexError past the end."""
        c = self._built.get(i)
        if c is None:
            rows = self._first(i + 1)
            if i >= len(rows):
                raise IndexError("candidate index out of range")
            c = self._built[i] = candidate_of(rows[i], self._output_tokens)
        return c

    @overload
    def __getitem__(self, index: int) -> Candidate: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Candidate, ...]: ...

    def __getitem__(self, index: int | slice) -> Candidate | tuple[Candidate, ...]:
        if isinstance(index, slice):
            return tuple(self._at(i) for i in range(*index.indices(len(self._all()))))
        if index < 0:
            index += len(self._all())
            if index < 0:
                raise IndexError("candidate index out of range")
        return self._at(index)

    def __iter__(self) -> Iterator[Candidate]:
        i = 0
        while i < len(self._first(i + 1)):
            yield self._at(i)
            i += 1


class RejectionList(_TupleLike[Rejected]):
    """Every rejected pair with its reason and operator words, computed on first read by
    `explain` (a function of values fixed at decision time)."""

    __slots__ = ("_explain", "_items")

    def __init__(self, explain: Callable[[], tuple[Rejected, ...]]) -> None:
        self._explain: Callable[[], tuple[Rejected, ...]] | None = explain
        self._items: tuple[Rejected, ...] = ()

    def _all(self) -> tuple[Rejected, ...]:
        if self._explain is not None:
            self._items, self._explain = self._explain(), None
        return self._items

    def __len__(self) -> int:
        return len(self._all())

    @overload
    def __getitem__(self, index: int) -> Rejected: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Rejected, ...]: ...

    def __getitem__(self, index: int | slice) -> Rejected | tuple[Rejected, ...]:
        return self._all()[index]

    def __iter__(self) -> Iterator[Rejected]:
        return iter(self._all())
