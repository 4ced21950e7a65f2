"""Fixtures for the infra checks: promtool (installed by infra/scripts/ensure-system-deps.sh)."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="session")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool not found: install Debian's `prometheus` package "
            "(bash infra/scripts/ensure-system-deps.sh)"
        )
    return path
