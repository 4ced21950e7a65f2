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

    control_plane_token: SecretStr | None = Field(
        default=None, description="bearer token for `--push` (`--token` wins)"
    )
    connect_timeout_s: float = Field(
        default=5.0, gt=0, le=300, description="connecting to an endpoint (`sock_connect`)"
    )
    read_timeout_s: float = Field(
        default=120.0, gt=0, le=3600, description="the longest gap inside a stream (`sock_read`)"
    )
    request_timeout_s: float = Field(
        default=600.0, gt=0, le=86400, description="one request, in all"
    )
    preflight_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="the check that an endpoint answers and serves the model, before any "
        "measurement",
    )
    eval_concurrency: int = Field(
        default=8, ge=1, le=1024, description="accuracy-eval requests in flight at once"
    )
    max_in_flight: int = Field(
        default=512,
        ge=1,
        le=100_000,
        description="the open-loop load's requests in flight, at most",
    )
    metrics_interval_s: float = Field(
        default=1.0, gt=0, le=60, description="how often the engine's `/metrics` is scraped"
    )
    engine: str = Field(
        default="vllm", min_length=1, max_length=100, description="the engine named in the report"
    )
    engine_version: str | None = Field(
        default=None, max_length=100, description="the engine version in the report (a flag wins)"
    )
    hardware: str | None = Field(
        default=None,
        max_length=200,
        description="the hardware named in the report (a flag wins; else `unspecified`)",
    )
    git_sha: str | None = Field(
        default=None,
        max_length=64,
        description="the profiler's commit in the report (unset: `git rev-parse HEAD`)",
    )
    seed: int = Field(default=0, description="seed of the load runner's random choices")
