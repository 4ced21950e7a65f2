"""Settings of one data-plane process: env prefix GEARBOX_DP_, loaded once in `__main__`.

Bad values fail at startup with the field named; nothing here reads the environment after
construction, and no other module reads `os.environ`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import unquote

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from contracts.redis_keys import DEFAULT_PREFIX, RedisKeys
from data_plane.engine_keys import check_key, read_keys_file

OtelExporter = Literal["none", "console", "otlp"]
EventLoop = Literal["uvloop", "asyncio"]
UpstreamClientKind = Literal["http1", "aiohttp"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]
# OTEL_TRACES_SAMPLER values the data plane implements (the OpenTelemetry SDK's built-ins).
TraceSampler = Literal[
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
]
OtlpCompression = Literal["none", "gzip"]
ExtProcBodyMode = Literal["buffered", "full_duplex_streamed"]


class DataPlaneSettings(BaseSettings):
    """Everything a data plane is configured with (units in the names; seconds unless `_ms`)."""

    model_config = SettingsConfigDict(
        env_prefix="GEARBOX_DP_", extra="forbid", frozen=True, validate_default=True
    )

    host: str = "0.0.0.0"  # a server in a container listens on all interfaces
    port: int = Field(default=8080, ge=0, le=65535)
    # "" = no Redis: serve the snapshot file only (static mode, and component tests).
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_key_prefix: str = DEFAULT_PREFIX
    instance_id: str = Field(default="dp-0", min_length=1, max_length=200)
    snapshot_path: Path | None = None
    table_poll_interval_s: float = Field(default=5.0, gt=0.0, le=3600.0)
    redis_timeout_s: float = Field(default=2.0, gt=0.0, le=60.0)
    redis_backoff_max_s: float = Field(default=10.0, gt=0.0, le=600.0)
    api_keys: Annotated[tuple[SecretStr, ...], NoDecode] = ()
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    connector_limit: int = Field(default=1000, ge=1)
    connector_limit_per_host: int = Field(default=0, ge=0, description="0 = no per-host cap")
    connect_timeout_s: float = Field(default=2.0, gt=0.0, le=300.0)
    read_timeout_s: float = Field(default=120.0, gt=0.0, le=3600.0)
    default_request_timeout_s: float = Field(
        default=300.0, gt=0.0, le=3600.0, description="deadline when no latency budget applies"
    )
    deadline_grace_s: float = Field(default=0.5, ge=0.0, le=60.0)
    max_attempts: int = Field(default=3, ge=1, le=20)
    retry_budget_ratio: float = Field(default=0.2, ge=0.0, le=1.0)
    retry_budget_min_per_s: float = Field(default=5.0, ge=0.0)
    retry_budget_window_s: float = Field(default=10.0, gt=0.0)
    breaker_consecutive_failures: int = Field(default=5, ge=1)
    breaker_failure_ratio: float = Field(default=0.5, gt=0.0, le=1.0)
    breaker_window_s: float = Field(default=10.0, gt=0.0)
    breaker_min_requests: int = Field(default=20, ge=1)
    breaker_cooldown_s: float = Field(default=5.0, gt=0.0)
    breaker_cooldown_max_s: float = Field(default=60.0, gt=0.0)
    scrape_interval_s: float = Field(default=1.0, ge=0.0, description="0 = scraping off")
    scrape_timeout_s: float = Field(default=1.0, gt=0.0, le=60.0)
    live_state_interval_s: float = Field(default=5.0, gt=0.0)
    live_state_ttl_s: int = Field(default=30, ge=1)
    otel_exporter: OtelExporter = "none"
    otel_endpoint: str | None = None
    otel_service_name: str = "gearbox-data-plane"
    upstream_client: UpstreamClientKind = Field(
        default="http1",
        description="http1 (lean keep-alive HTTP/1.1 to engines) or aiohttp's ClientSession",
    )
    gc_young_threshold: int = Field(
        default=20_000,
        ge=0,
        description="allocations between young-generation collections (0 = Python's 700)",
    )
    event_loop: EventLoop = Field(
        default="uvloop", description="uvloop (C event loop, less CPU per request) or asyncio"
    )
    log_level: LogLevel = "INFO"
    git_sha: str = Field(default="unknown", max_length=64)
    shutdown_timeout_s: float = Field(default=10.0, ge=0.0)
    # Slow clients (slowloris): an idle or header-trickling connection is closed after
    # keepalive_timeout_s; a body that has not fully arrived after body_read_timeout_s gets 408.
    keepalive_timeout_s: float = Field(default=10.0, gt=0.0, le=3600.0)
    body_read_timeout_s: float = Field(default=10.0, gt=0.0, le=3600.0)
    # After an early answer (408, 413), how long the server keeps draining an unread body.
    lingering_time_s: float = Field(default=1.0, ge=0.0, le=60.0)
    # A half-open breaker's probe that never reports back frees the probe slot after this.
    breaker_probe_timeout_s: float = Field(default=30.0, gt=0.0, le=3600.0)
    # The engine's own deadline for one attempt (docs/reliability.md): its predicted TTFT
    # (streams) or latency (non-streams) x factor + slack; missing it is an engine fault and
    # the next candidate is tried. factor 0 = no engine deadline.
    engine_deadline_factor: float = Field(default=2.0, ge=0.0, le=100.0)
    engine_deadline_slack_s: float = Field(default=0.5, ge=0.0, le=600.0)
    # OpenTelemetry's standard variables (docs/data_plane.md, "Observability"), read here like every
    # other setting: their own names, no GEARBOX_DP_ prefix (the first alias is the field's
    # name, so a command-line flag sets it too). Head sampling: parentbased_always_on.
    otel_traces_sampler: TraceSampler = Field(
        default="parentbased_always_on",
        validation_alias=AliasChoices("otel_traces_sampler"),
        description="OTEL_TRACES_SAMPLER: always_on, always_off, traceidratio, parentbased_*",
    )
    otel_traces_sampler_arg: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        validation_alias=AliasChoices("otel_traces_sampler_arg"),
        description="OTEL_TRACES_SAMPLER_ARG: the ratio of the traceidratio samplers",
    )
    otel_exporter_otlp_traces_endpoint: str | None = Field(
        default=None,
        validation_alias=AliasChoices("otel_exporter_otlp_traces_endpoint"),
        description="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: the full URL spans are posted to",
    )
    otel_exporter_otlp_endpoint: str | None = Field(
        default=None,
        validation_alias=AliasChoices("otel_exporter_otlp_endpoint"),
        description="OTEL_EXPORTER_OTLP_ENDPOINT: base URL; spans go to <base>/v1/traces",
    )
    otel_exporter_otlp_traces_headers: Annotated[tuple[tuple[str, str], ...], NoDecode] = Field(
        default=(),
        validation_alias=AliasChoices(
            "otel_exporter_otlp_traces_headers", "otel_exporter_otlp_headers"
        ),
        description="OTEL_EXPORTER_OTLP_[TRACES_]HEADERS: k=v,k2=v2 (values URL-encoded)",
    )
    otel_exporter_otlp_traces_timeout: float = Field(
        default=10_000.0,
        gt=0.0,
        le=600_000.0,
        validation_alias=AliasChoices(
            "otel_exporter_otlp_traces_timeout", "otel_exporter_otlp_timeout"
        ),
        description="OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT: milliseconds per export",
    )
    otel_exporter_otlp_traces_compression: OtlpCompression = Field(
        default="none",
        validation_alias=AliasChoices(
            "otel_exporter_otlp_traces_compression", "otel_exporter_otlp_compression"
        ),
        description="OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION: none or gzip",
    )
    otel_resource_attributes: Annotated[tuple[tuple[str, str], ...], NoDecode] = Field(
        default=(),
        validation_alias=AliasChoices("otel_resource_attributes"),
        description="OTEL_RESOURCE_ATTRIBUTES: k=v,... on every span (service.name is ours)",
    )
    # Engines behind `vllm serve --api-key` (data_plane.engine_keys): one key for every
    # engine (environment only), and/or a JSON file {endpoint id | pair | "*": key}.
    engine_api_key: SecretStr | None = None
    engine_api_keys_file: Path | None = Field(
        default=None, description='JSON {"<endpoint id>" | "<pair>" | "*": "<engine API key>"}'
    )
    # `python -m data_plane extproc` (docs/gateway.md): the ext_proc gRPC port, the header an
    # HTTPRoute per pair matches, and the body mode assumed when Envoy does not say.
    extproc_port: int = Field(default=9004, ge=0, le=65535)
    extproc_pair_header: str = Field(
        default="x-gearbox-pair", min_length=1, max_length=100, pattern=r"^[a-z0-9][a-z0-9-]*$"
    )
    extproc_body_mode: ExtProcBodyMode = Field(
        default="buffered",
        description="request body mode of the ext_proc filter when Envoy sends no protocol_config",
    )
    # Endpoints are pods (docs/data_plane.md, "Endpoint discovery"): engine URLs whose host is
    # a name are re-resolved at this interval into one endpoint per address. 0 = off.
    endpoint_discovery_interval_s: float = Field(default=0.0, ge=0.0, le=3600.0)
    endpoint_dns_servers: str = Field(
        default="", description="ADDRESS[:PORT],... ('' = the system resolver)"
    )
    endpoint_dns_timeout_s: float = Field(default=2.0, gt=0.0, le=60.0)
    # Replicas eject together (docs/data_plane.md, "Breaker announcements"): an opened breaker
    # is announced on Redis; the others skip the endpoint for its cooldown, at most this long.
    breaker_announcements: bool = True
    breaker_announce_max_ttl_s: float = Field(default=30.0, gt=0.0, le=600.0)
    # Latency feedback summaries to Redis every this many seconds (0 = off).
    feedback_interval_s: float = Field(default=10.0, ge=0.0, le=3600.0)
    # Replicas share their in-flight counts per endpoint over Redis pub/sub every this many ms
    # (docs/data_plane.md, "In-flight sharing"); each replica's snapshot counts for at most
    # in_flight_share_ttl_s after it arrived. 0 = off.
    in_flight_share_interval_ms: int = Field(default=25, ge=0, le=10_000)
    in_flight_share_ttl_s: float = Field(default=1.0, gt=0.0, le=60.0)

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

    @field_validator("otel_exporter_otlp_traces_headers", "otel_resource_attributes", mode="before")
    @classmethod
    def _split_key_values(cls, value: object) -> object:
        # OpenTelemetry's list format: "k1=v1,k2=v2", values URL-encoded.
        if not isinstance(value, str):
            return value
        pairs = []
        for item in (i.strip() for i in value.split(",")):
            name, eq, text = item.partition("=")
            if not item:
                continue
            if not eq or not name.strip():
                raise ValueError(f"{item!r} is not name=value")
            pairs.append((name.strip(), unquote(text.strip())))
        return tuple(pairs)

    @field_validator("engine_api_key")
    @classmethod
    def _engine_key_fits_a_header(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            check_key(value.get_secret_value(), "every engine")
        return value

    @field_validator("engine_api_keys_file")
    @classmethod
    def _engine_keys_file_reads(cls, value: Path | None) -> Path | None:
        if value is not None:
            read_keys_file(value)  # ValueError naming the problem, never a key
        return value

    @field_validator("endpoint_dns_servers")
    @classmethod
    def _dns_servers(cls, value: str) -> str:
        parse_dns_servers(value)  # raises ValueError naming the bad entry
        return value

    @field_validator("redis_key_prefix")
    @classmethod
    def _valid_prefix(cls, value: str) -> str:
        RedisKeys(value)  # raises ValueError naming the prefix
        return value

    @model_validator(mode="after")
    def _consistent(self) -> DataPlaneSettings:
        if self.breaker_cooldown_max_s < self.breaker_cooldown_s:
            raise ValueError("breaker_cooldown_max_s must be >= breaker_cooldown_s")
        if self.in_flight_share_ttl_s * 1000 < self.in_flight_share_interval_ms:
            raise ValueError("in_flight_share_ttl_s must be >= in_flight_share_interval_ms")
        if self.otel_exporter == "otlp" and not self.otlp_traces_url:
            raise ValueError(
                "otel_endpoint (or OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT) is required when "
                "otel_exporter is 'otlp'"
            )
        return self

    @property
    def otlp_traces_url(self) -> str | None:
        """Where spans are posted: otel_endpoint, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
        else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces."""
        if self.otel_endpoint or self.otel_exporter_otlp_traces_endpoint:
            return self.otel_endpoint or self.otel_exporter_otlp_traces_endpoint
        base = self.otel_exporter_otlp_endpoint
        return base.rstrip("/") + "/v1/traces" if base else None

    @property
    def redis_keys(self) -> RedisKeys:
        return RedisKeys(self.redis_key_prefix)

    @property
    def endpoint_dns_server_list(self) -> list[tuple[str, int]]:
        return parse_dns_servers(self.endpoint_dns_servers)


def parse_dns_servers(text: str) -> list[tuple[str, int]]:
    """`"10.0.0.10, 127.0.0.1:5353"` -> [(address, port)]; port 53 when not given."""
    servers = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, "53"
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"DNS server {item!r} is not ADDRESS or ADDRESS:PORT")
        servers.append((host, int(port)))
    return servers
