"""The read-only sequences a decision carries: its fallback chain and its rejected pairs.

PURE. `choose_route` decides from flat tuples of figures; these sequences turn them into
`Candidate` / `Rejected` objects only when someone reads them. The proxy reads the first
candidate or two; `/v1/route` and strict-mode errors read everything. A sequence holds only
values fixed at decision time (never the live load mapping), so reading it later gives what
an eager decision would have held. Both behave like tuples: indexing, slicing (a tuple),
iteration, `len`, and equality with tuples and with each other.
"""

from __future__ import annotations

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
    """The fallback chain. Its head (the choice) is known at decision time; the rest may come
    from `complete()` on first read beyond the head, whose rows start with that same head.
    Candidates are built when first read and then kept (the same object on every read, so
    identity checks work)."""

    __slots__ = ("_built", "_complete", "_output_tokens", "_rows")

    def __init__(
        self,
        rows: Sequence[FeasibleRow],
        output_tokens: int,
        complete: Callable[[], Sequence[FeasibleRow]] | None = None,
    ) -> None:
        if not rows:
            raise ValueError("a chain starts with its head")
        self._rows = rows
        self._output_tokens = output_tokens
        self._complete = complete
        self._built: dict[int, Candidate] = {}

    def _all(self) -> Sequence[FeasibleRow]:
        if self._complete is not None:
            rows, self._complete = self._complete(), None
            if rows[0] is not self._rows[0]:
                raise AssertionError("the completed chain must keep its head")
            self._rows = rows
        return self._rows

    def __len__(self) -> int:
        return len(self._all())

    def _at(self, i: int) -> Candidate:
        c = self._built.get(i)
        if c is None:
            rows = self._rows if i == 0 else self._all()
            c = self._built[i] = candidate_of(rows[i], self._output_tokens)
        return c

    @overload
    def __getitem__(self, index: int) -> Candidate: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Candidate, ...]: ...

    def __getitem__(self, index: int | slice) -> Candidate | tuple[Candidate, ...]:
        if index == 0:
            return self._at(0)  # the choice: never needs the rest of the chain
        n = len(self._all())
        if isinstance(index, slice):
            return tuple(self._at(i) for i in range(*index.indices(n)))
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("candidate index out of range")
        return self._at(index)

    def __iter__(self) -> Iterator[Candidate]:
        yield self._at(0)
        for i in range(1, len(self._all())):
            yield self._at(i)


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
