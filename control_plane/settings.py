"""Settings of the control plane: env prefix GEARBOX_CP_, loaded once by `__main__`.

Bad values fail at startup with the field named; no other module reads the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from contracts.redis_keys import DEFAULT_PREFIX, RedisKeys

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]
MIN_TOKEN_CHARS = 16


class ControlPlaneSettings(BaseSettings):
    """Everything the control plane is configured with (seconds and bytes in the names)."""

    model_config = SettingsConfigDict(
        env_prefix="GEARBOX_CP_", extra="forbid", frozen=True, validate_default=True
    )

    host: str = "127.0.0.1"
    port: int = Field(default=8090, ge=0, le=65535)
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_key_prefix: str = DEFAULT_PREFIX
    redis_timeout_s: float = Field(default=2.0, gt=0.0, le=60.0)
    redis_retries: int = Field(default=1, ge=0, le=10)
    admin_token: SecretStr | None = Field(
        default=None, description="bearer token for every write; required by `serve`"
    )
    protect_reads: bool = Field(default=False, description="require the token for reads too")
    policy_file: Path | None = Field(
        default=None, description="policy used while none has been PUT to Redis"
    )
    history_limit: int = Field(default=20, ge=1, le=10_000, description="table versions kept")
    max_body_bytes: int = Field(default=2 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024)
    allow_partial_reports: bool = False
    prune_dominated: bool = True
    publish_lock_ttl_s: float = Field(default=10.0, gt=0.0, le=300.0)
    publish_lock_wait_s: float = Field(default=5.0, ge=0.0, le=300.0)
    log_level: LogLevel = "INFO"
    git_sha: str = Field(default="unknown", max_length=64)
    data_plane_url: str | None = Field(default=None, pattern=r"^https?://[^\s?#@]+$")
    refit_check_interval_s: float = Field(
        default=30.0, ge=0.0, le=86_400.0, description="latency feedback checks (0 = off)"
    )

    @field_validator("redis_key_prefix")
    @classmethod
    def _valid_prefix(cls, value: str) -> str:
        RedisKeys(value)  # raises ValueError with the reason
        return value

    @field_validator("admin_token")
    @classmethod
    def _strong_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value().strip()) < MIN_TOKEN_CHARS:
            raise ValueError(f"must be at least {MIN_TOKEN_CHARS} characters")
        return value

    @property
    def keys(self) -> RedisKeys:
        return RedisKeys(self.redis_key_prefix)
