"""The data plane's answers as pydantic models: the source of the response schemas in the
served OpenAPI document (`data_plane.serving.openapi`). Engine answers pass through, so their
models name only the fields OpenAI clients rely on and allow the rest."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorDetail(_Closed):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorEnvelope(_Closed):
    """Every error the data plane answers with (OpenAI's envelope)."""

    error: ErrorDetail


class Usage(_Open):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


class ChatMessage(_Open):
    role: str | None = None
    content: str | None = None


class ChatChoice(_Open):
    index: int
    message: ChatMessage
    finish_reason: str | None = None


class ChatCompletion(_Open):
    """The engine's chat answer, passed through (only `model` differs from the request)."""

    id: str
    object: Literal["chat.completion"]
    created: int | None = None
    model: str | None = None
    choices: list[ChatChoice]
    usage: Usage | None = None


class TextChoice(_Open):
    index: int
    text: str
    finish_reason: str | None = None


class Completion(_Open):
    """The engine's completion answer, passed through."""

    id: str
    object: Literal["text_completion"]
    created: int | None = None
    model: str | None = None
    choices: list[TextChoice]
    usage: Usage | None = None


class RouteExplanation(_Open):
    """`POST /v1/route`: the decision and why (see `data_plane.decision.explain`)."""

    routed: bool
    table_version: int
    summary: str
    reason: str | None = None
    rejected: list[dict[str, str]] | None = None


class ModelObject(_Closed):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    max_model_len: int = Field(ge=1, description="the largest context this id may route to")


class ModelList(_Closed):
    object: Literal["list"]
    data: list[ModelObject]


class Readiness(_Closed):
    ready: bool
    table_version: int | None
    instance_id: str = ""  # this replica's name among the others
    # What an operator should know, e.g. another process using this replica's instance id
    # (docs/data_plane.md, "Replica identity"); readiness does not depend on it.
    warnings: list[str] = []


class Health(_Closed):
    status: Literal["ok"]


class OpenApiDocument(_Open):
    openapi: str


RESPONSE_MODELS: tuple[type[BaseModel], ...] = (
    ErrorEnvelope,
    ChatCompletion,
    Completion,
    RouteExplanation,
    ModelObject,
    ModelList,
    Readiness,
    Health,
    OpenApiDocument,
)
