"""Head sampling as OpenTelemetry's OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG describe it.

The SDK's built-in samplers, decided once per trace where it enters this process (a root span,
or a span under a remote parent); spans under a local parent take their parent's decision,
which is what each of these samplers would decide again for the same trace id.
- `always_on`, `always_off`: every trace, none.
- `traceidratio`: a trace is sampled when the low 64 bits of its id are below ratio x 2^64
  (the SDK's TraceIdRatioBased, so every process with the same ratio agrees).
- `parentbased_*`: a remote parent's `sampled` flag decides; a root uses the named sampler.
"""

from __future__ import annotations

_TRACE_ID_LIMIT = 2**64  # the SDK compares the low 64 bits of the trace id
_BASES = frozenset({"always_on", "always_off", "traceidratio"})


class Sampler:
    """One of the SDK's built-in samplers, by its OTEL_TRACES_SAMPLER name."""

    __slots__ = ("_bound", "_parent_based", "name")

    def __init__(self, name: str = "parentbased_always_on", ratio: float = 1.0) -> None:
        base = name.removeprefix("parentbased_")
        if base not in _BASES or not 0.0 <= ratio <= 1.0:
            raise ValueError(f"unknown sampler {name!r} or ratio {ratio!r} outside [0, 1]")
        if base == "always_on":
            ratio = 1.0
        elif base == "always_off":
            ratio = 0.0
        self.name = name
        self._parent_based = name != base
        self._bound = round(ratio * _TRACE_ID_LIMIT)

    def root(self, trace_id: int) -> bool:
        """Whether a new trace is sampled."""
        return (trace_id & (_TRACE_ID_LIMIT - 1)) < self._bound

    def under_remote(self, trace_id: int, parent_sampled: bool) -> bool:
        """Whether a span whose parent came from another process is sampled."""
        return parent_sampled if self._parent_based else self.root(trace_id)


DEFAULT_SAMPLER = Sampler()
