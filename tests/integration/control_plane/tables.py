"""Distinct small routing tables for publisher tests."""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.policy import Policy
from contracts.routing_table import RoutingTable
from control_plane.build.table import build_table
from tests.unit.control_plane.factories import make_report

NOW = datetime(2026, 11, 1, tzinfo=UTC)


def table(n: int = 0) -> RoutingTable:
    """Table number `n`: the hourly price differs, so every n has its own content hash."""
    return build_table([make_report("f", "fp16", hourly_usd=1.0 + n)], Policy(), NOW)
