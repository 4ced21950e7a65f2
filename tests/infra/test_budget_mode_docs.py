"""README's request contract says what best-effort does, naming each reason it answers with."""

from __future__ import annotations

from data_plane.domain import RouteReason
from tests.infra.manifests import REPO_ROOT


def test_readme_names_every_best_effort_reason() -> None:
    text = (REPO_ROOT / "README.md").read_text()
    relaxed = [r.value for r in RouteReason if r.value.startswith("best_effort")]
    assert relaxed
    for reason in relaxed:
        assert f"X-Route-Reason: {reason}" in text, reason
    assert "keep the floor, relax latency)" not in text  # the old, incomplete wording
    assert "below the floor" in text
