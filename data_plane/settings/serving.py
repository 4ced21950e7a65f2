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

    host: str = Field(
        default="0.0.0.0",  # a server in a container listens on all interfaces
        description="address to listen on",
    )
    port: int = Field(default=8080, ge=0, le=65535, description="port to listen on")
    api_keys: Annotated[tuple[SecretStr, ...], NoDecode] = Field(
        default=(),
        description="comma-separated bearer keys (>= 8 characters); none = open API; each is its "
        'own tenant with the policy\'s default class (see "Tenants, priorities and admission"); '
        "environment only",
    )
    api_keys_file: Path | None = Field(
        default=None,
        description="JSON list of keys, each a string (as `SERVER_API_KEYS`) or "
        '`{"key", "tenant", "priorities", "default_priority", "trusted_gateway"}`; a bad file '
        'stops startup naming the entry and field (see "Tenants, priorities and admission")',
    )
    metrics_token: SecretStr | None = Field(
        default=None,
        description="when set, `/metrics` answers only `Authorization: Bearer <token>` (401 "
        "otherwise); environment only",
    )
    max_body_bytes: int = Field(
        default=4 * 1024 * 1024, ge=1024, description="larger request bodies get a 413 envelope"
    )
    shutdown_timeout_s: float = Field(
        default=10.0, ge=0.0, description="how long a stopping server lets requests finish"
    )
    # Slow clients (slowloris).
    keepalive_timeout_s: float = Field(
        default=10.0,
        gt=0.0,
        le=3600.0,
        description="an idle or header-trickling client connection is closed after this",
    )
    body_read_timeout_s: float = Field(
        default=10.0,
        gt=0.0,
        le=3600.0,
        description="a request body not fully in after this gets a 408 envelope and the "
        "connection is closed",
    )
    lingering_time_s: float = Field(
        default=1.0,
        ge=0.0,
        le=60.0,
        description="after an early answer (408, 413), how long an unread body is drained",
    )

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
        description="`http1`: keep-alive HTTP/1.1 to engines with answers parsed by llhttp "
        "(`httptools`), https via aiohttp; `aiohttp`: aiohttp's client for everything",
    )
    connector_limit: int = Field(
        default=1000,
        ge=1,
        description="upstream connections in use, in all; further sends wait, with either client",
    )
    connector_limit_per_host: int = Field(
        default=0, ge=0, description="upstream connections in use per engine (`0` = no cap)"
    )
    connect_timeout_s: float = Field(
        default=2.0, gt=0.0, le=300.0, description="connecting to an engine (`sock_connect`)"
    )
    read_timeout_s: float = Field(
        default=120.0,
        gt=0.0,
        le=3600.0,
        description="the longest wait for one read from an engine (`sock_read`)",
    )
    max_body_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=64 * 1024,
        description="an engine's non-streamed answer (or error body) past this ends the attempt "
        'with a 502 (see "Upstream limits")',
    )


class ProxyConfig(Group):
    """The proxy's attempts and deadlines (docs/reliability.md)."""

    max_attempts: int = Field(
        default=3, ge=1, le=20, description="attempts per request, all pairs together"
    )
    default_timeout_s: float = Field(
        default=300.0,
        gt=0.0,
        le=3600.0,
        description="deadline when no latency budget applies (or best-effort relaxed it)",
    )
    grace_s: float = Field(
        default=0.5,
        ge=0.0,
        le=60.0,
        description="added to the latency budget before the deadline cancels the request",
    )


class ProgressConfig(Group):
    """Lack of progress, judged from the engine's own pace (docs/reliability.md, "What a
    breaker counts"; `progress.pace`, `progress.stall`). An attempt is overdue after
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

    factor: float = Field(
        default=3.0,
        ge=0.0,
        le=100.0,
        description="an attempt's allowance: its profiled time for the first byte (streams) or "
        "for the longest answer the request allows (non-streams: `max_tokens`, else the context "
        "left after the prompt) at its load now, x its endpoint's observed slowdown (at most "
        "`PROGRESS_MAX_PACE_RATIO`) x this; past it the attempt is overdue, not yet at fault "
        '(`0` = no engine limit; docs/reliability.md, "What a breaker counts")',
    )
    stall_window_s: float = Field(
        default=1.5,
        ge=0.0,
        le=600.0,
        description="an endpoint stalls each time it has sent no byte on any attempt for a "
        "further window W of this long (or the longest overdue allowance, or the longest "
        "first-token allowance of an attempt waiting there, a prefill, if longer) while some "
        "attempt at it was overdue: one breaker failure per stall, however many attempts wait; "
        "its overdue attempts whose request has a next candidate that fits its deadline then end "
        "as lack of progress (`timeout_first_byte`), the others wait for the client's own limit "
        "or the hang (`PROGRESS_OPEN_WINDOWS`)",
    )
    open_windows: int = Field(
        default=3,
        ge=1,
        le=100,
        description="a silence this many windows long (4.5 s at the floor) opens the endpoint's "
        "breaker at once: a hang, not a slow engine",
    )
    probe_timeout_s: float = Field(
        default=1.0,
        ge=0.0,
        le=60.0,
        description="while attempts wait overdue at an endpoint, its token counters "
        "(`vllm:prompt_tokens_total`, `vllm:generation_tokens_total` of the pair's served model) "
        "are read from its `/metrics`: one GET within this, on a pool of its own, at most one in "
        "flight per endpoint, never on a request's path; no answer within it, twice running, "
        "counts as a frozen process (once, beside counters, as nothing) (`0` = no reads: the "
        "stall windows' rules alone)",
    )
    still_windows: int = Field(
        default=3,
        ge=1,
        le=100,
        description="those counters, read each window W of our attempts' waiting (W = "
        "max(`PROGRESS_STALL_WINDOW_S`, the longest first-token allowance among them)), that "
        "show no movement across this many windows (4.5 s at the floor), or reads without an "
        "answer across them, open the endpoint's breaker at once and end its overdue attempts "
        "(a hang); counters that moved make its stalls count nothing and never hang (it works, "
        "for someone)",
    )
    slack_s: float = Field(
        default=0.5,
        ge=0.0,
        le=600.0,
        description="added to the gap limit (scheduling noise between tokens)",
    )
    max_pace_ratio: float = Field(
        default=8.0,
        ge=1.0,
        le=100.0,
        description="an endpoint's observed slowdown loosens its allowances up to this much",
    )
    gap_floor_s: float = Field(
        default=5.0,
        ge=0.0,
        le=600.0,
        description="the engine's gap limit mid-answer (after the first bytes of a stream or of "
        "a non-streamed body) is its profiled time per token at its load x the same slowdown x "
        "factor + slack, at least this (a batch stalled by other requests' prefills or a "
        "preemption is not a hung engine); silence past it is lack of progress, an engine fault "
        "(`timeout_gap`; timed only while the data plane waits for the engine, never while it "
        "writes to a slow client)",
    )


class RetryBudgetSettings(Group):
    """Retries at most `ratio` of the recent requests, plus a floor (`RetryBudget`)."""

    ratio: float = Field(
        default=0.2, ge=0.0, le=1.0, description="retries at most this share of recent requests"
    )
    min_per_s: float = Field(
        default=5.0, ge=0.0, description="retries per second allowed on top of the ratio"
    )
    window_s: float = Field(
        default=10.0, gt=0.0, description="how far back recent requests and retries count"
    )


class BreakerConfig(Group):
    """One endpoint's breaker (docs/reliability.md): when it opens, how long it stays open."""

    consecutive_failures: int = Field(
        default=5, ge=1, description="an endpoint's breaker opens after this many failures in a row"
    )
    failure_ratio: float = Field(
        default=0.5,
        gt=0.0,
        le=1.0,
        description="...or when this share of the window's requests failed",
    )
    window_s: float = Field(default=10.0, gt=0.0, description="the sliding window of the ratio")
    min_requests: int = Field(
        default=20, ge=1, description="...holding at least this many requests"
    )
    cooldown_s: float = Field(
        default=5.0, gt=0.0, description="the first open period, doubling on each re-open"
    )
    max_cooldown_s: float = Field(
        default=60.0, gt=0.0, description="the cap of the doubling open period"
    )
    probe_timeout_s: float = Field(
        default=30.0,
        gt=0.0,
        le=3600.0,
        description="a half-open probe that never reports back frees the probe slot after this",
    )

    @model_validator(mode="after")
    def _cooldowns(self) -> BreakerConfig:
        if self.max_cooldown_s < self.cooldown_s:
            raise ValueError("breaker_max_cooldown_s must be >= breaker_cooldown_s")
        return self


class EngineKeySettings(Group):
    """Engines behind `vllm serve --api-key` (data_plane.engine_keys): one key for every
    engine (environment only), and/or a JSON file {endpoint id | pair | "*": key}."""

    api_key: SecretStr | None = Field(
        default=None,
        description="key sent as `Authorization: Bearer` to every engine (`vllm serve "
        "--api-key`); environment only",
    )
    api_keys_file: Path | None = Field(
        default=None,
        description='JSON `{"<endpoint id>" | "<family@quantization>" | "*": "<key>"}`; the most '
        "specific entry wins, then `*`, then `ENGINE_KEYS_API_KEY`",
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
    HTTPRoute per pair matches, the body mode assumed when Envoy does not say, and the
    longest a request is held unanswered in the queue (Envoy's ext_proc filter answers 504
    once its `message_timeout` passes: keep this below it)."""

    port: int = Field(
        default=9004,
        ge=0,
        le=65535,
        description="the ext_proc gRPC port (gateway mode only: `python -m data_plane extproc`, "
        "docs/gateway.md)",
    )
    pair_header: str = Field(
        default="x-gearbox-pair",
        min_length=1,
        max_length=100,
        pattern=r"^[a-z0-9][a-z0-9-]*$",
        description="the header naming the chosen pair, which an HTTPRoute per pair matches",
    )
    body_mode: ExtProcBodyMode = Field(
        default="buffered",
        description="request body mode of the ext_proc filter when Envoy sends no "
        "protocol_config (`buffered` or `full_duplex_streamed`)",
    )
    max_hold_s: float = Field(
        default=1.5,
        gt=0.0,
        le=3600.0,
        description="longest a request waits in the queue; below the filter's message_timeout",
    )
