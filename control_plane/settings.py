"""Settings of the control plane: env prefix GEARBOX_CP_, loaded once by `__main__`.

One group per concern (`settings.publish` is the publisher's `PublisherOptions`, `settings.build`
the table service's `BuildOptions`), handed whole to the part that uses it. A knob's name is its
path joined with `_` (`contracts.knobs`, the data plane's rule): `server.admin_token` is the
variable `GEARBOX_CP_SERVER_ADMIN_TOKEN` and the key `ControlPlaneSettings(server_admin_token=...)`.
Names retired by that rule still work for one release (`RENAMED`; `serve` logs the new name,
the other commands print it). Bad values fail at startup with the knob named; no other module
reads the environment.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import ClassVar, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from contracts.knobs import Group, KnobSettings, Renamed
from contracts.redis_keys import DEFAULT_PREFIX, RedisKeys
from contracts.redis_topology import Topology, parse_redis_url

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]
MIN_TOKEN_CHARS = 16


class ServerSettings(Group):
    """The HTTP API: where it listens, its token, and what it accepts."""

    host: str = Field(default="127.0.0.1", description="address the API listens on")
    port: int = Field(default=8090, ge=0, le=65535, description="port the API listens on")
    admin_token: SecretStr | None = Field(
        default=None,
        description="bearer token for every write (>= 16 characters); required by `serve`",
    )
    protect_reads: bool = Field(default=False, description="require the token for reads too")
    max_body_bytes: int = Field(
        default=2 * 1024 * 1024,
        ge=1024,
        le=256 * 1024 * 1024,
        description="larger request bodies get a 413",
    )

    @field_validator("admin_token")
    @classmethod
    def _strong_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value().strip()) < MIN_TOKEN_CHARS:
            raise ValueError(f"must be at least {MIN_TOKEN_CHARS} characters")
        return value


class RedisSettings(Group):
    """The Redis client (`make_redis`) and the key prefix."""

    url: str = Field(
        default="redis://127.0.0.1:6379/0",
        description="standalone, Sentinel or Cluster by the scheme: `redis://`, "
        '`redis+sentinel://`, `redis+cluster://` (docs/operations.md, "Redis topologies")',
    )
    key_prefix: str = Field(
        default=DEFAULT_PREFIX, description="prefix of every key (`contracts.redis_keys`)"
    )
    timeout_s: float = Field(default=2.0, gt=0.0, le=60.0, description="socket timeouts")
    retries: int = Field(
        default=1, ge=0, le=10, description="quick retries of a failed Redis command"
    )

    @field_validator("key_prefix")
    @classmethod
    def _valid_prefix(cls, value: str) -> str:
        RedisKeys(value)  # raises ValueError with the reason
        return value

    @field_validator("url")
    @classmethod
    def _valid_url(cls, value: str) -> str:
        parse_redis_url(value)  # raises ValueError saying what is wrong
        return value

    @property
    def topology(self) -> Topology:
        return parse_redis_url(self.url).topology

    @property
    def keys(self) -> RedisKeys:
        return RedisKeys(self.key_prefix, cluster=self.topology is Topology.CLUSTER)


class PublisherOptions(Group):
    """How the publisher keeps history and holds its lock (docs/control_plane.md)."""

    # Versions kept (the current one is always kept too).
    history_limit: int = Field(default=20, ge=1, le=10_000, description="table versions kept")
    lock_ttl_s: float = Field(
        default=10.0, gt=0.0, le=300.0, description="the publish lock's time to live"
    )
    lock_wait_s: float = Field(
        default=5.0, ge=0.0, le=300.0, description="how long a publish waits for the lock"
    )


class BuildOptions(Group):
    """What a table build accepts (`TableService`)."""

    allow_partial: bool = Field(default=False, description="accept partial reports")
    prune: bool = Field(default=True, description="drop dominated pairs")


# Old names that only moved to the knob's path (issue 31): still read for one release.
RENAMED: MappingProxyType[str, Renamed] = MappingProxyType(
    {
        old: Renamed(new)
        for old, new in {
            "host": "server_host",
            "port": "server_port",
            "admin_token": "server_admin_token",
            "protect_reads": "server_protect_reads",
            "max_body_bytes": "server_max_body_bytes",
            "history_limit": "publish_history_limit",
            "allow_partial_reports": "build_allow_partial",
            "prune_dominated": "build_prune",
        }.items()
    }
)


class ControlPlaneSettings(KnobSettings):
    """Everything the control plane is configured with (seconds and bytes in the names)."""

    model_config = SettingsConfigDict(
        env_prefix="GEARBOX_CP_", extra="forbid", frozen=True, validate_default=True
    )
    renamed_knobs: ClassVar[MappingProxyType[str, Renamed]] = RENAMED

    log_level: LogLevel = Field(
        default="INFO", description="`DEBUG`, `INFO`, `WARNING` or `ERROR`; JSON lines on stderr"
    )
    git_sha: str = Field(default="unknown", max_length=64, description="the build's commit")
    policy_file: Path | None = Field(
        default=None, description="the policy used while none has been PUT to Redis"
    )
    data_plane_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s?#@]+$",
        description="the data plane the operator page's explainer asks (docs/operator_page.md)",
    )
    refit_check_interval_s: float = Field(
        default=30.0, ge=0.0, le=86_400.0, description="latency feedback checks (0 = off)"
    )
    server: ServerSettings = Field(default_factory=ServerSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    publish: PublisherOptions = Field(default_factory=PublisherOptions)
    build: BuildOptions = Field(default_factory=BuildOptions)
