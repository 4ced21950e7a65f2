"""The knobs of tracing: ours (`GEARBOX_DP_OTEL_*`) and those OpenTelemetry standardizes
(docs/data_plane.md, "Observability"), read from OpenTelemetry's variables (`Standard`, without
the `GEARBOX_DP_` prefix); their flags and keys are their paths (`--otel-sampler`)."""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import unquote

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode

from contracts.knobs import Group, Standard

OtelExporter = Literal["none", "console", "otlp"]
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
KeyValues = Annotated[tuple[tuple[str, str], ...], NoDecode]


class OtelSettings(Group):
    """Where spans go, how many are kept (head sampling: parentbased_always_on), and what
    every span carries."""

    exporter: OtelExporter = Field(
        default="none",
        description="`none`, `console` or `otlp` (HTTP; an endpoint is required: `OTEL_ENDPOINT` "
        "or OpenTelemetry's variables)",
    )
    endpoint: str | None = Field(
        default=None,
        description="the URL spans are posted to; wins over OpenTelemetry's endpoint variables",
    )
    service_name: str = Field(
        default="gearbox-data-plane", description="`service.name` of every span"
    )
    sampler: Annotated[TraceSampler, Standard("OTEL_TRACES_SAMPLER")] = Field(
        default="parentbased_always_on",
        description="head sampling: `always_on`, `always_off`, `traceidratio`, "
        "`parentbased_always_on`, `parentbased_always_off`, `parentbased_traceidratio`",
    )
    sampler_arg: Annotated[float, Standard("OTEL_TRACES_SAMPLER_ARG")] = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="the ratio of the `traceidratio` samplers (0 to 1)",
    )
    otlp_traces_endpoint: Annotated[str | None, Standard("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")] = (
        Field(
            default=None,
            description="the full URL spans are posted to (`OTEL_ENDPOINT` wins)",
        )
    )
    otlp_endpoint: Annotated[str | None, Standard("OTEL_EXPORTER_OTLP_ENDPOINT")] = Field(
        default=None,
        description="a base URL: spans go to `<base>/v1/traces` (`OTEL_ENDPOINT` and the "
        "traces endpoint win)",
    )
    otlp_headers: Annotated[
        KeyValues,
        Standard("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"),
    ] = Field(
        default=(),
        description="`name=value,...` on every export, values URL-encoded",
    )
    otlp_timeout_ms: Annotated[
        float,
        Standard("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"),
    ] = Field(
        default=10_000.0,
        gt=0.0,
        le=600_000.0,
        description="milliseconds per export, retries included",
    )
    otlp_compression: Annotated[
        OtlpCompression,
        Standard("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION"),
    ] = Field(default="none", description="`none` or `gzip`")
    resource_attributes: Annotated[KeyValues, Standard("OTEL_RESOURCE_ATTRIBUTES")] = Field(
        default=(),
        description="`key=value,...` resource attributes of every span (`service.name` "
        "is `OTEL_SERVICE_NAME`)",
    )

    @field_validator("otlp_headers", "resource_attributes", mode="before")
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

    @model_validator(mode="after")
    def _otlp_has_a_url(self) -> OtelSettings:
        if self.exporter == "otlp" and not self.otlp_traces_url:
            raise ValueError(
                "otel_endpoint (or OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT) is required when "
                "otel_exporter is 'otlp'"
            )
        return self

    @property
    def otlp_traces_url(self) -> str | None:
        """Where spans are posted: otel_endpoint, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
        else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces."""
        if self.endpoint or self.otlp_traces_endpoint:
            return self.endpoint or self.otlp_traces_endpoint
        base = self.otlp_endpoint
        return base.rstrip("/") + "/v1/traces" if base else None
