"""The knobs of admission: who a request is (its tenant, a label for metrics and fairness, not
an identity check) and whether a request the fleet cannot serve in budget because of its load
is refused (`admission`); and the queue it waits in first (`flow`) (docs/data_plane.md,
"Tenants, priorities and admission", "Flow control")."""

from __future__ import annotations

import re

from pydantic import Field, SecretStr, field_validator

from contracts.knobs import Group

_HEADER_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")


class AdmissionSettings(Group):
    """Tenant header and label count, the key of the API-key hash, whether X-Priority is
    trusted, and shedding on or off."""

    tenant_header: str = Field(
        default="x-gearbox-tenant",
        description="header naming a request's tenant (`x-llm-d-inference-fairness-id` is read "
        "after it); not read for an API key that is not a trusted gateway's",
    )
    tenant_top_n: int = Field(
        default=20,
        ge=1,
        le=1000,
        description="tenants with their own metric label at a time; the rest share `other`",
    )
    tenant_key_salt: SecretStr | None = Field(
        default=None,
        description="key of the HMAC that turns a client's bearer key into its tenant (`key-` "
        "+ 12 hex digits); set one value on every replica, so labels agree; environment only",
    )
    priority_header_trusted: bool = Field(
        default=False,
        description="`X-Priority` (and, in the HTTP data plane, llm-d's objective header) is set "
        "by a trusted gateway that drops the client's copy: it may raise a request's class; "
        "`false`: it may only lower it",
    )
    shed: bool = Field(
        default=True,
        description="shed (429) sheddable requests that only the current load keeps from their "
        "budget",
    )

    @field_validator("tenant_header")
    @classmethod
    def _header_name(cls, value: str) -> str:
        name = value.strip().lower()
        if not _HEADER_NAME.match(name):
            raise ValueError("must be a header name: letters, digits and '-', at most 64")
        return name


class FlowSettings(Group):
    """The HTTP door's flow-control queue: on or off (needs `admission.shed`), and its bounds."""

    queue: bool = Field(
        default=True,
        description="in the HTTP door, hold a request every pair is full for in this replica's "
        "queue while its budget allows, instead of a 429 at once",
    )
    queue_max: int = Field(
        default=1024,
        ge=1,
        le=1_000_000,
        description="requests waiting in the queue, in all; past it a 429 (`queue_full`)",
    )
    queue_per_tenant: int = Field(
        default=128,
        ge=1,
        le=1_000_000,
        description="requests of one tenant waiting; past it a 429 (`tenant_limit`)",
    )
    max_wait_s: float = Field(
        default=30.0,
        gt=0.0,
        le=3600.0,
        description="the longest wait of a request without a latency budget",
    )
