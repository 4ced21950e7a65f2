"""The soak (`python -m bench soak`) in miniature: 20 s with every event scaled down, so a
change that breaks it, or the flatness it measures, shows up in `make test`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.common.machine import Pinning
from bench.quality.verdicts import soak_checks
from bench.soak.section import run_soak

pytestmark = pytest.mark.integration


def test_short_soak_has_no_errors_a_flapping_breaker_and_follows_republishes(
    tmp_path: Path,
) -> None:
    result = run_soak(Pinning("", ""), tmp_path, duration_s=20.0)
    assert result.requests >= 0.9 * result.rate_rps * result.duration_s
    assert result.unexpected_errors == 0, result.error_kinds
    assert result.ok == result.requests
    assert result.fault_toggles >= 2
    assert result.breaker_transitions >= 2  # opened and closed again
    assert result.tables_published >= 3
    assert result.last_served_version == result.last_published_version
    assert len(result.rss_samples_bytes) >= 5
    # 20 s is too short to judge flatness (the 10-minute soak does); only gross leaks here.
    assert max(result.rss_samples_bytes) < 2 * min(result.rss_samples_bytes)
    assert max(result.fd_samples) < 200
    unexpected = next(c for c in soak_checks(result) if "unexpected" in c.name)
    assert unexpected.passed
