"""The knobs of serving requests: the server, the proxy's attempts and deadlines, the retry
budget, the breakers, the engine client and its keys, and gateway mode.

`ProxyConfig` and `BreakerConfig` are the proxy's and the breaker board's own configuration;
the other groups are handed whole to the part that uses them by `data_plane.app`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from contracts.knobs import Group
from data_plane.client_keys import read_client_keys
from data_plane.engine_keys import check_key, read_keys_file

UpstreamClientKind = Literal["http1", "aiohttp"]
ExtProcBodyMode = Literal["buffered", "full_duplex_streamed"]


class ServerSettings(Group):
    """The HTTP server and its gate: where it listens, client keys, slow clients, shutdown."""

    host: str = "0.0.0.0"  # a server in a container listens on all interfaces
    port: int = Field(default=8080, ge=0, le=65535)
    api_keys: Annotated[tuple[SecretStr, ...], NoDecode] = ()
    # Keys with their tenant, classes and default class (data_plane.client_keys).
    api_keys_file: Path | None = Field(
        default=None,
        description='JSON list of client keys or {"key", "tenant", "priorities", '
        '"default_priority", "trusted_gateway"} objects',
    )
    # `/metrics` answers only `Authorization: Bearer <token>` when set (environment only).
    metrics_token: SecretStr | None = None
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    shutdown_timeout_s: float = Field(default=10.0, ge=0.0)
    # Slow clients (slowloris): an idle or header-trickling connection is closed after
    # keepalive_timeout_s; a body that has not fully arrived after body_read_timeout_s gets 408.
    keepalive_timeout_s: float = Field(default=10.0, gt=0.0, le=3600.0)
    body_read_timeout_s: float = Field(default=10.0, gt=0.0, le=3600.0)
    # After an early answer (408, 413), how long the server keeps draining an unread body.
    lingering_time_s: float = Field(default=1.0, ge=0.0, le=60.0)

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: object) -> object:
        # Env gives "k1,k2"; a JSON list works too.
        if isinstance(value, str):
            return tuple(k.strip() for k in value.split(",") if k.strip())
        return value

    @field_validator("api_keys")
    @classmethod
    def _keys_not_short(cls, value: tuple[SecretStr, ...]) -> tuple[SecretStr, ...]:
        for key in value:
            if len(key.get_secret_value()) < 8:
                raise ValueError("each API key must be at least 8 characters")
        return value

    @field_validator("api_keys_file")
    @classmethod
    def _client_keys_file_reads(cls, value: Path | None) -> Path | None:
        if value is not None:
            read_client_keys(value)  # ValueError naming the entry and field, never a key
        return value

    @field_validator("metrics_token")
    @classmethod
    def _metrics_token_fits_a_header(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            check_key(value.get_secret_value(), "/metrics")
        return value


class UpstreamSettings(Group):
    """The client of engine calls and its connection pool."""

    client: UpstreamClientKind = Field(
        default="http1",
        description="http1 (lean keep-alive HTTP/1.1 to engines) or aiohttp's ClientSession",
    )
    connector_limit: int = Field(default=1000, ge=1)
    connector_limit_per_host: int = Field(default=0, ge=0, description="0 = no per-host cap")
    connect_timeout_s: float = Field(default=2.0, gt=0.0, le=300.0)
    read_timeout_s: float = Field(default=120.0, gt=0.0, le=3600.0)
    # An engine's non-streamed answer past this many bytes ends its attempt (docs/data_plane.md,
    # "Upstream limits").
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=64 * 1024)


class ProxyConfig(Group):
    """The proxy's attempts and deadlines (docs/reliability.md)."""

    max_attempts: int = Field(default=3, ge=1, le=20)
    # The deadline when no latency budget applies (or best-effort relaxed).
    default_timeout_s: float = Field(
        default=300.0, gt=0.0, le=3600.0, description="deadline when no latency budget applies"
    )
    # Added to the latency budget before the deadline cancels the request.
    grace_s: float = Field(default=0.5, ge=0.0, le=60.0)


class ProgressConfig(Group):
    """Lack of progress, judged from the engine's own pace (docs/reliability.md, "What a
    breaker counts"; `resilience.progress`, `resilience.stall`). An attempt is overdue after
    the pair's profiled time for its first byte (streams) or for the longest answer the request
    allows (non-streams: max_tokens, else the context left) at the endpoint's load, x its
    observed slowdown (at most `max_pace_ratio`) x `factor`. The endpoint stalls when it sent no
    byte on any attempt for `stall_window_s` (or the longest overdue allowance, or the longest
    first-token allowance of an attempt waiting there, if longer) of time during which some
    attempt was overdue; that stall counts once against its breaker (one
    failure per further window of silence; `open_windows` windows open it at once), and its
    overdue attempts that have somewhere else to go end as lack of progress and the next
    candidate is tried (the others wait until the client's own limit). Meanwhile its token
    counters are read (within `probe_timeout_s`) when an attempt becomes overdue and each window
    of waiting later: counters that did not move, or reads without an answer, across
    `still_windows` windows open the breaker then (a hang); counters that moved make its stalls
    count nothing; none change nothing. After the first byte, the
    engine may go silent for its profiled time per token at that load x the same slowdown x
    `factor` + `slack_s`, at least `gap_floor_s`."""

    # x the engine's pace for the work; 0 = no engine limit at all.
    factor: float = Field(default=3.0, ge=0.0, le=100.0)
    # The least overdue silence on every attempt that stalls an endpoint (scheduling noise,
    # an engine starved of cores before its pace is known).
    stall_window_s: float = Field(default=1.5, ge=0.0, le=600.0)
    # A silence this many windows long opens the breaker at once (a hang, not a slow engine).
    open_windows: int = Field(default=3, ge=1, le=100)
    # While attempts wait overdue, the engine's token counters are read from its /metrics
    # (one GET within this; 0 = never): unmoved across `still_windows` windows, or no answer twice,
    # is a hang and opens the breaker then (`resilience.stillness`).
    probe_timeout_s: float = Field(
        default=1.0, ge=0.0, le=60.0, description="0 = no reads of the engines' token counters"
    )
    still_windows: int = Field(default=3, ge=1, le=100)
    # + this on the gap limit (scheduling noise between tokens).
    slack_s: float = Field(default=0.5, ge=0.0, le=600.0)
    # An observed slowdown loosens the limits up to this much.
    max_pace_ratio: float = Field(default=8.0, ge=1.0, le=100.0)
    # The least silence mid-answer that counts as lack of progress (a batch stalled by other
    # requests' prefills or a preemption is not a hung engine).
    gap_floor_s: float = Field(default=5.0, ge=0.0, le=600.0)


class RetryBudgetSettings(Group):
    """Retries at most `ratio` of the recent requests, plus a floor (`RetryBudget`)."""

    ratio: float = Field(default=0.2, ge=0.0, le=1.0)
    min_per_s: float = Field(default=5.0, ge=0.0)
    window_s: float = Field(default=10.0, gt=0.0)


class BreakerConfig(Group):
    """One endpoint's breaker (docs/reliability.md): when it opens, how long it stays open."""

    consecutive_failures: int = Field(default=5, ge=1)  # open after this many in a row
    failure_ratio: float = Field(default=0.5, gt=0.0, le=1.0)  # ...or this share of the window
    window_s: float = Field(default=10.0, gt=0.0)  # sliding window for the ratio
    min_requests: int = Field(default=20, ge=1)  # ...holding at least this many requests
    cooldown_s: float = Field(default=5.0, gt=0.0)  # first open period
    # The cap of the doubling cooldown.
    max_cooldown_s: float = Field(default=60.0, gt=0.0)
    # A half-open breaker's probe that never reports back frees the probe slot after this.
    probe_timeout_s: float = Field(default=30.0, gt=0.0, le=3600.0)

    @model_validator(mode="after")
    def _cooldowns(self) -> BreakerConfig:
        if self.max_cooldown_s < self.cooldown_s:
            raise ValueError("breaker_max_cooldown_s must be >= breaker_cooldown_s")
        return self


class EngineKeySettings(Group):
    """Engines behind `vllm serve --api-key` (data_plane.engine_keys): one key for every
    engine (environment only), and/or a JSON file {endpoint id | pair | "*": key}."""

    api_key: SecretStr | None = None
    api_keys_file: Path | None = Field(
        default=None, description='JSON {"<endpoint id>" | "<pair>" | "*": "<engine API key>"}'
    )

    @field_validator("api_key")
    @classmethod
    def _engine_key_fits_a_header(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            check_key(value.get_secret_value(), "every engine")
        return value

    @field_validator("api_keys_file")
    @classmethod
    def _engine_keys_file_reads(cls, value: Path | None) -> Path | None:
        if value is not None:
            read_keys_file(value)  # ValueError naming the problem, never a key
        return value


class ExtprocSettings(Group):
    """`python -m data_plane extproc` (docs/gateway.md): the ext_proc gRPC port, the header an
    HTTPRoute per pair matches, and the body mode assumed when Envoy does not say."""

    port: int = Field(default=9004, ge=0, le=65535)
    pair_header: str = Field(
        default="x-gearbox-pair", min_length=1, max_length=100, pattern=r"^[a-z0-9][a-z0-9-]*$"
    )
    body_mode: ExtProcBodyMode = Field(
        default="buffered",
        description="request body mode of the ext_proc filter when Envoy sends no protocol_config",
    )
