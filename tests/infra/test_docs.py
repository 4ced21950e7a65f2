"""docs/operations.md and docs/runbooks.md point only at files and objects that exist."""

from __future__ import annotations

import re

import pytest

from tests.infra.manifests import REPO_ROOT, by_kind

DOCS = ["docs/operations.md", "docs/runbooks.md"]
_PATH = re.compile(r"`((?:infra|docs)/[A-Za-z0-9_./-]+?)`")


@pytest.mark.parametrize("doc", DOCS)
def test_repository_paths_in_docs_exist(doc: str) -> None:
    text = (REPO_ROOT / doc).read_text()
    paths = {p.rstrip("/") for p in _PATH.findall(text) if "*" not in p and "<" not in p}
    assert paths, f"{doc} names no repository path"
    missing = sorted(p for p in paths if not (REPO_ROOT / p).exists())
    assert missing == []


def test_runbook_commands_use_deployments_that_exist() -> None:
    text = (REPO_ROOT / "docs/runbooks.md").read_text()
    used = set(re.findall(r"deploy/(gearbox-[a-z-]+)", text))
    assert used, "runbooks name no deployment"
    assert used <= {d["metadata"]["name"] for d in by_kind("Deployment")}
