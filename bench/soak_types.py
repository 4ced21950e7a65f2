"""Result type of the soak run (`python -m bench soak`); pure data."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SoakResult:
    duration_s: float
    rate_rps: float
    requests: int
    ok: int
    expected_errors: int  # answers the injected faults explain (e.g. 503 while all are down)
    unexpected_errors: int
    rss_first_bytes: int  # after the first minute
    rss_last_bytes: int
    fds_first: int
    fds_last: int
    tables_published: int
    fault_toggles: int
    rss_samples_bytes: tuple[int, ...] = ()
    fd_samples: tuple[int, ...] = ()
    error_kinds: tuple[tuple[str, int], ...] = ()
