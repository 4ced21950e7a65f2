"""Bodies the admin API sends and the small ones it receives (the wire contracts it also speaks
come from `contracts`). The OpenAPI document is generated from these models."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.category_model import ClassifierTraining
from contracts.routing_table import PrunedPair


class _Body(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ErrorDetail(_Body):
    message: str
    type: str
    param: str | None
    code: str


class ErrorEnvelope(_Body):
    error: ErrorDetail


class ProfileSummary(_Body):
    pair: str
    valid: bool = Field(description="false when the stored report no longer validates")
    report_sha256: str | None = None
    hardware: str | None = None
    finished_at: datetime | None = None
    partial: bool | None = None
    problem: str | None = None


class ProfileList(_Body):
    profiles: list[ProfileSummary]


class ProfileStored(_Body):
    pair: str
    created: bool = Field(description="true when the pair was new, false when replaced")
    report_sha256: str


class PublishResponse(_Body):
    outcome: Literal["published", "unchanged"]
    version: int
    previous_version: int | None
    content_sha256: str
    entries: int
    pruned: list[PrunedPair]
    warnings: list[str]


class TableVersionSummary(_Body):
    """One kept routing-table version (`GET /v1/tables` and the operator page's history)."""

    version: int
    content_sha256: str | None
    created_at: str | None
    entries: int
    current: bool


class TableHistory(_Body):
    current: int | None
    versions: list[TableVersionSummary] = Field(description="kept versions, newest first")


class RollbackRequest(_Body):
    version: int = Field(ge=1, le=2**53, description="a kept table version")


class RollbackResponse(_Body):
    version: int
    previous_version: int | None
    content_sha256: str


class Health(_Body):
    status: Literal["ok"]


class Readiness(_Body):
    status: Literal["ready", "not_ready"]
    redis: bool


class ClassifierReport(_Body):
    """The current table's category classifier (docs/classifier.md)."""

    table_version: int
    shipped: bool = Field(description="false: the table carries none; data planes use theirs")
    model_sha256: str | None = None
    categories: list[str] = Field(default_factory=list)
    terms: int = 0
    training: ClassifierTraining | None = Field(
        default=None, description="sources, examples, cross-validated accuracy and confusion"
    )
    recall: dict[str, float | None] = Field(
        default_factory=dict, description="per category: cross-validated share predicted right"
    )
