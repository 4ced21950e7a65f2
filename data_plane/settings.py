"""Settings of one data-plane process: env prefix GEARBOX_DP_, loaded once in `__main__`.

Bad values fail at startup with the field named; nothing here reads the environment after
construction, and no other module reads `os.environ`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from contracts.redis_keys import DEFAULT_PREFIX, RedisKeys

OtelExporter = Literal["none", "console", "otlp"]
EventLoop = Literal["uvloop", "asyncio"]
UpstreamClientKind = Literal["http1", "aiohttp"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


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
    # Latency feedback summaries to Redis every this many seconds (0 = off).
    feedback_interval_s: float = Field(default=10.0, ge=0.0, le=3600.0)

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

    @field_validator("redis_key_prefix")
    @classmethod
    def _valid_prefix(cls, value: str) -> str:
        RedisKeys(value)  # raises ValueError naming the prefix
        return value

    @model_validator(mode="after")
    def _consistent(self) -> DataPlaneSettings:
        if self.breaker_cooldown_max_s < self.breaker_cooldown_s:
            raise ValueError("breaker_cooldown_max_s must be >= breaker_cooldown_s")
        if self.otel_exporter == "otlp" and not self.otel_endpoint:
            raise ValueError("otel_endpoint is required when otel_exporter is 'otlp'")
        return self

    @property
    def redis_keys(self) -> RedisKeys:
        return RedisKeys(self.redis_key_prefix)
