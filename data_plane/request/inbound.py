"""One client request, read once: its routing facts, its budget and the body to forward.

PURE. The handler builds an `InboundRequest` with `read_request` and passes that one object
along: nothing downstream decodes the body or reads the budget headers again, and the body
sent to an engine is made from the client's bytes once per served model name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from data_plane.domain import Budget, CompiledTable, RequestFacts
from data_plane.request.body import BodyKind, ParsedBody, parse_request_body, rewrite_model
from data_plane.request.budget import parse_budget
from data_plane.request.category import request_facts
from data_plane.request.prompt_tokens import PromptCount


class InboundRequest:
    """The routing facts and budget of one request, and the client's body behind them."""

    __slots__ = ("_bodies", "_raw", "budget", "facts", "parsed")

    def __init__(self, parsed: ParsedBody, facts: RequestFacts, budget: Budget, raw: bytes) -> None:
        self.parsed = parsed
        self.facts = facts
        self.budget = budget
        self._raw = raw
        self._bodies: dict[str, bytes] = {}

    def body_for(self, served_model_name: str) -> bytes:
        """The client's body with only `model` rewritten to `served_model_name` (memoised:
        retries on the same pair send the same bytes without a second rewrite)."""
        body = self._bodies.get(served_model_name)
        if body is None:
            rewritten = rewrite_model(self._raw, served_model_name, validated=True)
            body = self._bodies[served_model_name] = rewritten
        return body

    def within(self, budget: Budget) -> InboundRequest:
        """The same request judged on `budget` instead (a queued request's remainder,
        `asked.Full.left_after`); the rewritten bodies are shared."""
        other = InboundRequest(self.parsed, self.facts, budget, self._raw)
        other._bodies = self._bodies
        return other


def read_request(
    raw: bytes,
    kind: BodyKind | Literal["either"],
    headers: Mapping[str, str],
    table: CompiledTable,
    counted: PromptCount | None = None,
) -> InboundRequest:
    """Parse the body (InvalidRequest naming the field), then the budget headers
    (InvalidBudget naming the header), then the routing facts under the served `table`: its
    category classifier (or X-Task-Category, a 400 unless the table knows it) and any doubt,
    and the prompt's size (`counted`: its tokens by the alias's tokenizer, where counted)."""
    parsed = parse_request_body(raw, kind)
    budget = parse_budget(headers)
    return InboundRequest(parsed, request_facts(parsed, table, budget, counted), budget, raw)
