"""A parsed body -> the `RequestFacts` routing reads (the classifier runs here).

PURE. One definition shared by the HTTP data plane and the ext_proc gateway mode.
"""

from __future__ import annotations

from data_plane.domain import RequestFacts
from data_plane.request.body import ParsedBody
from data_plane.request.classifier import classify


def facts_of(parsed: ParsedBody) -> RequestFacts:
    category, complexity = classify(parsed.classify_text)
    return RequestFacts(
        alias=parsed.alias,
        category=category,
        complexity=complexity,
        input_chars=parsed.input_chars,
        max_output_tokens=parsed.max_output_tokens,
        stream=parsed.stream,
        wants_json=parsed.wants_json,
    )
