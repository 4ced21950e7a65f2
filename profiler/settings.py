"""Profiler settings from the environment (prefix GEARBOX_PROF_); CLI flags override them.

Loaded once in `__main__` and passed down; nothing else reads the environment. Read like the
other planes' settings (`contracts.knobs`): a `GEARBOX_PROF_` variable that is no setting fails
the load, naming the closest setting.
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from contracts.knobs import KnobSettings


class ProfilerSettings(KnobSettings):
    model_config = SettingsConfigDict(env_prefix="GEARBOX_PROF_", extra="forbid", frozen=True)

    control_plane_token: SecretStr | None = Field(default=None, description="bearer for --push")
    connect_timeout_s: float = Field(default=5.0, gt=0, le=300)
    read_timeout_s: float = Field(default=120.0, gt=0, le=3600, description="max gap in a stream")
    request_timeout_s: float = Field(default=600.0, gt=0, le=86400, description="per request")
    preflight_timeout_s: float = Field(default=10.0, gt=0, le=300)
    eval_concurrency: int = Field(default=8, ge=1, le=1024)
    max_in_flight: int = Field(default=512, ge=1, le=100_000, description="open-loop cap")
    metrics_interval_s: float = Field(default=1.0, gt=0, le=60)
    engine: str = Field(default="vllm", min_length=1, max_length=100)
    engine_version: str | None = Field(default=None, max_length=100)
    hardware: str | None = Field(default=None, max_length=200)
    git_sha: str | None = Field(default=None, max_length=64)
    seed: int = 0
