"""bench/replicas/section.py: the RESULTS.md section for 1, 2 and 4 replicas
(docs/benchmarks.md)."""

from __future__ import annotations

from bench.replicas.section import ReplicaResult, replica_lines


def test_replica_section_shows_every_figure() -> None:
    result = ReplicaResult(
        replicas=2,
        rate_rps=40.0,
        requests=800,
        budget_met_ratio=0.995,
        pair_shares={"a@int4": 0.5, "a@fp8": 0.5},
        agreement_ratio=0.9,
        ejection_s=[0.31, None],
    )
    text = "\n".join(replica_lines([result]))
    assert "## Replicas behind a load balancer" in text
    assert "| 2 | 40 | 800 | 99.5% | 90.0% | 0.31, — | a@int4 50%, a@fp8 50% |" in text
