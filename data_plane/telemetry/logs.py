"""JSON structured logs: one formatter, configured once by `__main__`.

Only an allow-listed set of `extra=` fields is written, so prompts, outputs, keys and raw headers
cannot leak into logs by accident.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

# The structured fields a log record may carry (docs/style.md, section 9).
ALLOWED_FIELDS: tuple[str, ...] = (
    "request_id",
    "model_alias",
    "pair",
    "endpoint",
    "attempt",
    "outcome",
    "table_version",
    "reason",
    "instance",
    "status",
    "duration_s",
)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, allow-listed fields, traceback."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in ALLOWED_FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                data[name] = value
        if record.exc_info:
            data["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str, ensure_ascii=False)


def configure_logging(level: str, stream: TextIO | None = None) -> None:
    """Route the root logger to one JSON handler at `level` (replaces existing handlers)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # aiohttp's access log would write raw paths and client addresses per request.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
