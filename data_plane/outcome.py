"""What one upstream attempt came to: the outcome taxonomy shared by transports and policy.

PURE value types (modelled on httpx's exception tree). Transports in `upstream/` produce them;
`resilience/retry.py` decides on them; the breaker learns from them. No behaviour lives here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TimeoutPhase = Literal["connect", "first_byte", "gap", "read"]


@dataclass(frozen=True, slots=True)
class ConnectFailed:
    """The TCP/TLS connection could not be made (refused, reset, DNS); nothing was sent."""

    label = "connect_failed"


@dataclass(frozen=True, slots=True)
class UpstreamStatus:
    """The engine answered with a non-2xx status (before any byte went to the client)."""

    code: int

    @property
    def label(self) -> str:
        if self.code == 429:
            return "status_429"
        return "status_5xx" if self.code >= 500 else "status_4xx"


@dataclass(frozen=True, slots=True)
class Timeout:
    """`connect`: no connection; `first_byte`: no first byte (streams) or no answer
    (non-streams) before the attempt's endpoint stalled (the model in `data_plane.progress`;
    nothing sent to the client yet), or no response head within the
    transport's read timeout; `gap`: the engine went silent mid-answer (after the first bytes
    of a stream or of a non-streamed body) for longer than its own gap limit, its profiled
    time per token at its load times its observed slowdown and a margin, at least a floor
    (`progress.pace`; lack of progress, an engine fault); `read`: no byte for the
    transport's read timeout (`READ_TIMEOUT_S`, the backstop when no gap limit applies)."""

    phase: TimeoutPhase

    @property
    def label(self) -> str:
        return f"timeout_{self.phase}"


@dataclass(frozen=True, slots=True)
class StreamBroken:
    """The upstream stream failed after the first byte reached the client."""

    label = "stream_broken"


@dataclass(frozen=True, slots=True)
class ResponseTooLarge:
    """The engine's response head (`part` "head") or non-streamed body ("body") passed
    `limit_bytes` while it was being read; the connection was closed there. An engine fault:
    a head that size is no HTTP server's answer (a broken or hostile engine). A body that
    size may also be what the request asked for (many choices, logprobs): the body cap is a
    setting (docs/data_plane.md, "Upstream limits") and such an answer is not retried."""

    part: Literal["head", "body"]
    limit_bytes: int

    label = "response_too_large"


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The client went away; the attempt was cancelled by us, not failed by the engine."""

    label = "cancelled"


@dataclass(frozen=True, slots=True)
class BudgetMissed:
    """The client's limit on the attempt (its TTFT budget, or the time left for a re-ask)
    passed before the engine's first byte: the next candidate is tried, the engine is not
    blamed."""

    label = "ttft_budget_missed"


Outcome = (
    ConnectFailed
    | UpstreamStatus
    | Timeout
    | StreamBroken
    | ResponseTooLarge
    | Cancelled
    | BudgetMissed
)
