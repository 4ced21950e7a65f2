"""JSON Schema export of the wire contracts (files under contracts/schemas/)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from contracts.latency_feedback import LatencyFeedback
from contracts.live_state import DataPlaneState
from contracts.policy import Policy
from contracts.profile_report import ProfileReport
from contracts.routing_table import RoutingTable

SCHEMA_DIR = Path(__file__).parent / "schemas"
EXPORTED: dict[str, type[BaseModel]] = {
    "profile_report.schema.json": ProfileReport,
    "routing_table.schema.json": RoutingTable,
    "policy.schema.json": Policy,
    "data_plane_state.schema.json": DataPlaneState,
    "latency_feedback.schema.json": LatencyFeedback,
}


def render_schemas() -> dict[str, str]:
    """File name -> schema text, deterministic."""
    return {
        name: json.dumps(model.model_json_schema(), indent=2, sort_keys=True) + "\n"
        for name, model in EXPORTED.items()
    }


def export_schemas(directory: Path = SCHEMA_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_schemas().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
