"""Settings of one data-plane process: env prefix GEARBOX_DP_, loaded once in `__main__`.

One group per component (`settings.breaker` is the breaker board's `BreakerConfig`, ...),
handed to it whole.

**One name per knob: its path** (`contracts.knobs`; docs/data_plane.md, "Run it"). A knob's name is
its path joined with `_`: `progress.factor` is `progress_factor`, set by the variable
`GEARBOX_DP_PROGRESS_FACTOR`, the flag `--progress-factor` and the key
`DataPlaneSettings(progress_factor=...)`. A new knob gets no other name: add a field to its
group (or a new group here) with `Field(description=...)`, which is its `--help` line and its
row in the generated docs table; nothing else to register. Only a knob a standard defines
reads the standard's variable instead (`Standard`, OpenTelemetry's in `tracing`). Renaming a
knob (or a field or group on its path) adds its old name to `RENAMED` (`renamed`): the old
name keeps working for one release and is logged with the new one.

Bad values fail at startup with the knob named, and so does a `GEARBOX_DP_` variable that
names no knob (with the closest name, or the successor of a renamed one); nothing here reads
the environment after construction, and no other module reads `os.environ`.
"""

from __future__ import annotations

import os
import secrets
import socket
from types import MappingProxyType
from typing import ClassVar, Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from contracts.knobs import KnobSettings, Renamed
from data_plane.settings.admission import AdmissionSettings, FlowSettings
from data_plane.settings.renamed import RENAMED
from data_plane.settings.serving import (
    BreakerConfig,
    EngineKeySettings,
    ExtprocSettings,
    ProgressConfig,
    ProxyConfig,
    RetryBudgetSettings,
    ServerSettings,
    UpstreamSettings,
)
from data_plane.settings.sync import (
    AnnouncementSettings,
    DiscoverySettings,
    FeedbackSettings,
    InFlightShareSettings,
    LiveStateSettings,
    RedisSettings,
    ScrapeSettings,
    TableSettings,
    parse_dns_servers,
)
from data_plane.settings.tracing import OtelSettings

__all__ = [
    "RENAMED",
    "AdmissionSettings",
    "AnnouncementSettings",
    "BreakerConfig",
    "DataPlaneSettings",
    "DiscoverySettings",
    "EngineKeySettings",
    "ExtprocSettings",
    "FeedbackSettings",
    "FlowSettings",
    "InFlightShareSettings",
    "LiveStateSettings",
    "OtelSettings",
    "ProgressConfig",
    "ProxyConfig",
    "RedisSettings",
    "RetryBudgetSettings",
    "ScrapeSettings",
    "ServerSettings",
    "TableSettings",
    "UpstreamSettings",
    "parse_dns_servers",
]

EventLoop = Literal["uvloop", "asyncio"]


def default_instance_id() -> str:
    """hostname-pid-random: unique per process, readable in logs and on the operator page."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


class DataPlaneSettings(KnobSettings):
    """Everything a data plane is configured with (units in the names; seconds unless `_ms`)."""

    model_config = SettingsConfigDict(
        env_prefix="GEARBOX_DP_", extra="forbid", frozen=True, validate_default=True
    )
    renamed_knobs: ClassVar[MappingProxyType[str, Renamed]] = RENAMED

    instance_id: str = Field(
        default_factory=lambda: default_instance_id(),
        min_length=1,
        max_length=200,
        description="name of this replica in the live state, breaker announcements and "
        "in-flight sharing; `hostname-pid-random`, unique per process, unless set "
        '("Replica identity")',
    )
    log_level: LogLevel = Field(
        default="INFO", description="`DEBUG`, `INFO`, `WARNING` or `ERROR`; JSON lines on stderr"
    )
    git_sha: str = Field(
        default="unknown", max_length=64, description="the build's commit, in `gearbox_build_info`"
    )
    event_loop: EventLoop = Field(
        default="uvloop",
        description="`uvloop` (C event loop, less CPU per request) or `asyncio`",
    )
    gc_young_threshold: int = Field(
        default=20_000,
        ge=0,
        description="allocations between young-generation collections (0 = Python's 700)",
    )
    server: ServerSettings = Field(default_factory=ServerSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    table: TableSettings = Field(default_factory=TableSettings)
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    proxy: ProxyConfig = Field(default_factory=ProxyConfig)
    progress: ProgressConfig = Field(default_factory=ProgressConfig)
    retry_budget: RetryBudgetSettings = Field(default_factory=RetryBudgetSettings)
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    engine_keys: EngineKeySettings = Field(default_factory=EngineKeySettings)
    scrape: ScrapeSettings = Field(default_factory=ScrapeSettings)
    live_state: LiveStateSettings = Field(default_factory=LiveStateSettings)
    otel: OtelSettings = Field(default_factory=OtelSettings)
    extproc: ExtprocSettings = Field(default_factory=ExtprocSettings)
    discovery: DiscoverySettings = Field(default_factory=DiscoverySettings)
    announcements: AnnouncementSettings = Field(default_factory=AnnouncementSettings)
    feedback: FeedbackSettings = Field(default_factory=FeedbackSettings)
    in_flight_share: InFlightShareSettings = Field(default_factory=InFlightShareSettings)
    admission: AdmissionSettings = Field(default_factory=AdmissionSettings)
    flow: FlowSettings = Field(default_factory=FlowSettings)
