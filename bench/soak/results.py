"""Result type of the soak run (`python -m bench soak`); pure data."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SoakResult:
    duration_s: float
    rate_rps: float
    requests: int
    ok: int
    unexpected_errors: int  # anything but a complete 200 answer (faults must be absorbed)
    rss_first_bytes: int  # after the first minute
    rss_last_bytes: int
    fds_first: int
    fds_last: int
    tables_published: int
    last_published_version: int
    last_served_version: int  # highest X-Route-Table-Version seen in the last minute
    fault_toggles: int
    breaker_transitions: int  # gearbox_circuit_transitions_total at the end
    fallbacks: int  # gearbox_fallbacks_total at the end
    rss_samples_bytes: tuple[int, ...] = ()
    fd_samples: tuple[int, ...] = ()
    error_kinds: tuple[tuple[str, int], ...] = ()
