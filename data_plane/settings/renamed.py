"""The data plane's retired knob names, each with its successor (`contracts.knobs.Renamed`).

A name retired only because a knob's name became its path (issue 31: `GEARBOX_DP_PORT` ->
`GEARBOX_DP_SERVER_PORT`) still sets the knob, as variable, flag and key, for one release;
`python -m data_plane` logs the new name for each one set. A name whose meaning changed stops
the process at startup naming its successor and what changed (docs/data_plane.md,
"Run it"). Drop the still-read entries in the release after next.
"""

from __future__ import annotations

from types import MappingProxyType

from contracts.knobs import Renamed

# old name -> new name, for names that only moved to the knob's path.
_MOVED = {
    "host": "server_host",
    "port": "server_port",
    "api_keys": "server_api_keys",
    "api_keys_file": "server_api_keys_file",
    "metrics_token": "server_metrics_token",
    "max_body_bytes": "server_max_body_bytes",
    "shutdown_timeout_s": "server_shutdown_timeout_s",
    "keepalive_timeout_s": "server_keepalive_timeout_s",
    "body_read_timeout_s": "server_body_read_timeout_s",
    "lingering_time_s": "server_lingering_time_s",
    "snapshot_path": "table_snapshot_path",
    "connector_limit": "upstream_connector_limit",
    "connector_limit_per_host": "upstream_connector_limit_per_host",
    "connect_timeout_s": "upstream_connect_timeout_s",
    "read_timeout_s": "upstream_read_timeout_s",
    "max_attempts": "proxy_max_attempts",
    "default_request_timeout_s": "proxy_default_timeout_s",
    "deadline_grace_s": "proxy_grace_s",
    "engine_deadline_factor": "progress_factor",
    "engine_stall_window_s": "progress_stall_window_s",
    "engine_stall_open_windows": "progress_open_windows",
    "engine_probe_timeout_s": "progress_probe_timeout_s",
    "engine_still_windows": "progress_still_windows",
    "engine_gap_slack_s": "progress_slack_s",
    "engine_pace_max_ratio": "progress_max_pace_ratio",
    "engine_gap_floor_s": "progress_gap_floor_s",
    "breaker_cooldown_max_s": "breaker_max_cooldown_s",
    "engine_api_key": "engine_keys_api_key",
    "engine_api_keys_file": "engine_keys_api_keys_file",
    # Flags and keys only: these knobs' variables are OpenTelemetry's, unchanged.
    "otel_traces_sampler": "otel_sampler",
    "otel_traces_sampler_arg": "otel_sampler_arg",
    "otel_exporter_otlp_traces_endpoint": "otel_otlp_traces_endpoint",
    "otel_exporter_otlp_endpoint": "otel_otlp_endpoint",
    "otel_exporter_otlp_traces_headers": "otel_otlp_headers",
    "otel_exporter_otlp_traces_timeout": "otel_otlp_timeout_ms",
    "otel_exporter_otlp_traces_compression": "otel_otlp_compression",
    "endpoint_discovery_interval_s": "discovery_interval_s",
    "endpoint_dns_servers": "discovery_dns_servers",
    "endpoint_dns_timeout_s": "discovery_dns_timeout_s",
    "endpoint_max_addresses_per_name": "discovery_max_addresses_per_name",
    "breaker_announcements": "announcements_enabled",
    "breaker_announce_max_ttl_s": "announcements_max_ttl_s",
    "latency_probe_interval_s": "feedback_probe_interval_s",
    "accuracy_probe_interval_s": "feedback_accuracy_probe_interval_s",
    "tenant_header": "admission_tenant_header",
    "tenant_top_n": "admission_tenant_top_n",
    "tenant_key_salt": "admission_tenant_key_salt",
    "priority_header_trusted": "admission_priority_header_trusted",
}

GAP_CHANGE = (
    "now pads only the gap between streamed tokens; engine stalls are judged per endpoint "
    "(PROGRESS_STALL_WINDOW_S)"
)

RENAMED: MappingProxyType[str, Renamed] = MappingProxyType(
    {
        "engine_deadline_slack_s": Renamed("progress_slack_s", GAP_CHANGE),
        **{old: Renamed(new) for old, new in _MOVED.items()},
    }
)
