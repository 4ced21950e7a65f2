"""The repository's own text for the docs tests: its root, its files, a page's sections."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# What is never ours to check: tools' caches, environments, build output, generated results.
_SKIPPED_DIRS = frozenset(
    {".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache",
     ".pytest_cache", ".hypothesis", ".cache", "build", "out", ".benchmarks"}
)  # fmt: skip
_TEXT_SUFFIXES = frozenset({".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".html", ".js", ".cfg"})
_TEXT_NAMES = frozenset({"Makefile", "Dockerfile"})


def text_files() -> Iterator[Path]:
    """Every source, documentation and configuration file of the repository."""
    todo = [REPO_ROOT]
    while todo:
        folder = todo.pop()
        for path in sorted(folder.iterdir()):
            if path.is_dir():
                if path.name not in _SKIPPED_DIRS and not path.name.endswith(".egg-info"):
                    todo.append(path)
            elif path.suffix in _TEXT_SUFFIXES or path.name in _TEXT_NAMES:
                yield path


def headings(page: Path) -> list[str]:
    return [
        line.lstrip("#").strip() for line in page.read_text().splitlines() if line.startswith("#")
    ]


def section(page: Path, title: str) -> str:
    """The text under the `## title` heading of `page`, up to the next heading of that level."""
    text = page.read_text()
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.DOTALL | re.MULTILINE)
    if found is None:
        raise AssertionError(f"{page.name} has no '## {title}' section")
    return found.group(1)


def flowed(text: str) -> str:
    """`text` with line breaks (and the comment marks of wrapped comments) read as spaces, so a
    citation wrapped over two lines reads as one."""
    return re.sub(r"[ \t]*\n[ \t]*(?:#[ \t]*)?", " ", text)
