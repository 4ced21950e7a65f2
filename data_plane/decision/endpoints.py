"""A compiled table with other endpoints for some pairs (endpoints discovered per pod).

PURE. Everything that holds a pair (the pairs, the alias lists, the scan rows, baselines,
the next more precise pair) is rebuilt around the new `CompiledPair`s; the cost floors and
accuracies do not depend on endpoints and are kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType

from data_plane.decision.compile import scan_row
from data_plane.domain import CompiledEndpoint, CompiledTable


def with_endpoints(
    table: CompiledTable, endpoints: Mapping[str, tuple[CompiledEndpoint, ...]]
) -> CompiledTable:
    """`table` with `endpoints[pair]` (non-empty) replacing the endpoints of each pair named."""
    if not endpoints:
        return table
    pairs = tuple(
        replace(p, endpoints=endpoints[p.pair]) if endpoints.get(p.pair) else p for p in table.pairs
    )
    by_name = {p.pair: p for p in pairs}
    rows = tuple(scan_row(p) for p in pairs)
    by_alias = {a: tuple(by_name[p.pair] for p in ps) for a, ps in table.by_alias.items()}
    return replace(
        table,
        pairs=pairs,
        by_alias=MappingProxyType(by_alias),
        baselines=MappingProxyType({f: by_name[p.pair] for f, p in table.baselines.items()}),
        more_precise=MappingProxyType(
            {name: by_name[p.pair] for name, p in table.more_precise.items()}
        ),
        scan_rows=MappingProxyType(
            {a: tuple(rows[p.order] for p in ps) for a, ps in by_alias.items()}
        ),
    )
