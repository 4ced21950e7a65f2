"""Code and docs cite only the repository's own docs/, and every page and section they cite
exists (docs/style.md, section 12)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.repo_text import REPO_ROOT, flowed, headings, text_files

# Design briefs kept outside the repository; spelled in two parts so this file does not cite them.
_OUTSIDE = re.compile("(?:DESIGN|STYLE)" + r"\.md")
_PAGE = re.compile(r"\bdocs/([\w.-]+\.md)\b")
_PAGE_SECTION = re.compile(r"\bdocs/([\w.-]+\.md)`?,?\s+\"([^\"]{2,80})\"")
_STYLE_SECTION = re.compile(r"\bdocs/style\.md`?,?\s+sections?\s+(\d+b?)")


def _where(path: Path, text: str, at: int) -> str:
    return f"{path.relative_to(REPO_ROOT)}:{text.count(chr(10), 0, at) + 1}"


def test_nothing_cites_a_brief_outside_the_repository() -> None:
    found = []
    for path in text_files():
        text = path.read_text(errors="replace")
        found += [_where(path, text, m.start()) for m in _OUTSIDE.finditer(text)]
    assert found == []


def test_every_cited_page_exists() -> None:
    missing = []
    for path in text_files():
        text = path.read_text(errors="replace")
        for m in _PAGE.finditer(text):
            if not (REPO_ROOT / "docs" / m.group(1)).is_file():
                missing.append(f"{_where(path, text, m.start())}: docs/{m.group(1)}")
    assert missing == []


def test_every_cited_section_exists() -> None:
    missing = []
    for path in text_files():
        text = flowed(path.read_text(errors="replace"))
        for m in _PAGE_SECTION.finditer(text):
            page = REPO_ROOT / "docs" / m.group(1)
            if page.is_file() and not any(m.group(2) in h for h in headings(page)):
                missing.append(f"{path.relative_to(REPO_ROOT)}: docs/{m.group(1)} {m.group(2)!r}")
        for m in _STYLE_SECTION.finditer(text):
            if not any(
                h.startswith(f"{m.group(1)}. ") for h in headings(REPO_ROOT / "docs/style.md")
            ):
                missing.append(f"{path.relative_to(REPO_ROOT)}: docs/style.md section {m.group(1)}")
    assert missing == []


_REPO_PATH = re.compile(
    r"`((?:data_plane|control_plane|profiler|simulator|contracts|demo|bench|tests|infra|docs)"
    r"/[\w./-]*[\w/])"
)


def _ignored_outputs() -> set[str]:
    """Folders .gitignore names by path (written by runs, e.g. `bench/out/`)."""
    lines = (REPO_ROOT / ".gitignore").read_text().splitlines()
    return {line.rstrip("/") for line in lines if "/" in line.rstrip("/")}


def _exists(path: str) -> bool:
    """A file or folder, `module.Attribute` of a Python module, or a run's output folder."""
    module = path.rsplit(".", 1)[0].replace(".", "/") + ".py"
    return (
        (REPO_ROOT / path).exists()
        or (REPO_ROOT / module).is_file()
        or path.rstrip("/") in _ignored_outputs()
    )


def test_every_repository_path_in_the_docs_exists() -> None:
    """No stale module path (e.g. from a move) in README.md or docs/."""
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    missing = []
    for page in pages:
        text = page.read_text()
        for m in _REPO_PATH.finditer(text):
            if "*" not in m.group(1) and not _exists(m.group(1)):
                missing.append(f"{_where(page, text, m.start())}: {m.group(1)}")
    assert missing == []
