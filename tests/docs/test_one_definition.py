"""One definition per fact: a pair name is split in one place, the two body kinds have one
alias, a table-history row has one model, and comments say what is, not when it came."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.repo_text import REPO_ROOT, text_files

PRODUCT = ("contracts", "control_plane", "data_plane", "profiler", "simulator", "bench", "demo")


def _python(*tops: str) -> list[Path]:
    return [
        p
        for p in text_files()
        if p.suffix == ".py" and (not tops or p.relative_to(REPO_ROOT).parts[0] in tops)
    ]


def _hits(pattern: str, files: list[Path]) -> list[str]:
    found = re.compile(pattern)
    return [
        f"{p.relative_to(REPO_ROOT)}:{n}"
        for p in files
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if found.search(line)
    ]


def test_pair_names_are_split_by_split_pair_only() -> None:
    files = [p for p in _python(*PRODUCT) if p != REPO_ROOT / "contracts" / "names.py"]
    assert _hits(r"""\.(partition|r?split)\(\s*["']@["']""", files) == []


def test_the_body_kinds_have_one_alias() -> None:
    spelled = _hits(r"""Literal\[\s*["']chat["'],\s*["']completions["']\s*\]""", _python())
    assert [hit.split(":")[0] for hit in spelled] == ["data_plane/request/body.py"]


def test_a_table_history_row_has_one_model() -> None:
    from control_plane.api.models import TableHistory, TableVersionSummary
    from control_plane.ui.page import Overview

    rows = {
        TableHistory.model_fields["versions"].annotation,
        Overview.model_fields["history"].annotation,
    }
    assert rows == {list[TableVersionSummary]}


def test_comments_do_not_narrate_history() -> None:
    """`# Added: ...`, `(added; ...)`, `Added for quality-first`: when a field came is for the
    commit log; the comment says what it is."""
    assert _hits(r"\b[Aa]dded(?:[:;]| for )", _python(*PRODUCT)) == []
