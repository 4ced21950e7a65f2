"""Decision speed (section 2): `choose_route` on 5/50/500-pair tables.

Run by the harness (`python -m bench decision`) with `--benchmark-json`; nothing is asserted
about speed here, the report compares the medians with the targets.
"""

from __future__ import annotations

import random

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from bench.common.tables import synthetic_table
from data_plane.decision.choose import choose_route
from data_plane.decision.compile import compile_table
from data_plane.domain import (
    Budget,
    CompiledTable,
    HealthView,
    RequestFacts,
    RouteDecision,
    RouteRequest,
)
from data_plane.request.category import BUILTIN, classify_text

_URLS = [[f"http://10.0.0.{i}:8000", f"http://10.0.1.{i}:8000"] for i in range(1, 9)]


def _table(n_pairs: int) -> CompiledTable:
    return compile_table(synthetic_table(n_pairs, _URLS))


def _health(table: CompiledTable) -> HealthView:
    """A busy fleet: every endpoint carries some load, one in 16 is ejected."""
    endpoints = [e.id for p in table.pairs for e in p.endpoints]
    return HealthView(
        open_endpoints=frozenset(endpoints[::16]),
        load={e: float(i % 7) for i, e in enumerate(endpoints)},
    )


# A typical request: any family, a chat prompt of ~2,000 characters, 256 output tokens, a
# 5 s budget and a 0.8 floor (which rules out the small families).
REQUEST = RouteRequest(
    facts=RequestFacts(
        alias="auto", category="chat", complexity=0.4, input_chars=2000, max_output_tokens=256
    ),
    budget=Budget(latency_s=5.0, min_accuracy=0.8),
)


@pytest.mark.parametrize("n_pairs", [5, 50, 500], ids=lambda n: f"pairs={n}")
def test_choose_route(benchmark: BenchmarkFixture, n_pairs: int) -> None:
    table = _table(n_pairs)
    health = _health(table)
    rng = random.Random(7)
    benchmark.extra_info.update({"section": "choose_route", "n_pairs": n_pairs})
    decision = benchmark(choose_route, table, REQUEST, health, rng)
    # The benchmark must measure a real decision, not an early "unknown model" exit.
    assert isinstance(decision, RouteDecision)


def _prompt(n_bytes: int) -> str:
    """A realistic mixed prompt (prose, a code fence, numbers) cut to `n_bytes` characters."""
    unit = (
        "Please review this function and explain why the total is off by one for large "
        "inputs, then suggest a fix and a unit test.\n```python\ndef total(xs):\n"
        "    s = 0\n    for i in range(1, len(xs)):\n        s += xs[i]\n    return s\n```\n"
        "The inputs are lists of 10 to 5000 integers; 17 + 25 = 42 in the first example. "
    )
    return (unit * (n_bytes // len(unit) + 1))[:n_bytes]


@pytest.mark.parametrize(
    ("label", "n_bytes"), [("100 B", 100), ("4 KB", 4096), ("32 KB", 32768)], ids=str
)
def test_classify(benchmark: BenchmarkFixture, label: str, n_bytes: int) -> None:
    text = _prompt(n_bytes)
    benchmark.extra_info.update({"section": "classify", "prompt": label})
    # The whole per-request classification: the category model's probabilities (the built-in
    # model; a table's own is the same arithmetic over its terms) and the complexity score.
    probabilities, complexity = benchmark(classify_text, BUILTIN, text)
    assert abs(sum(probabilities) - 1.0) < 1e-9
    assert 0.0 <= complexity <= 1.0
