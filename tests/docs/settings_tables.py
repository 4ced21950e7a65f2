"""The settings tables of the docs, generated from the knobs' descriptions in code
(`contracts.knob_table`): each page holds its plane's table between two markers.
`python -m tests.docs.settings_tables` rewrites them; `test_settings_tables.py` keeps them equal.
"""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings

from contracts.knob_table import knob_table
from control_plane.settings import ControlPlaneSettings
from data_plane.settings import DataPlaneSettings
from profiler.settings import ProfilerSettings
from tests.docs.repo_text import REPO_ROOT

BEGIN = "<!-- settings table: generated from the code by `python -m tests.docs.settings_tables` -->"
END = "<!-- end of the generated settings table -->"
TABLES: dict[Path, type[BaseSettings]] = {
    REPO_ROOT / "docs/data_plane.md": DataPlaneSettings,
    REPO_ROOT / "docs/control_plane.md": ControlPlaneSettings,
    REPO_ROOT / "docs/profiler.md": ProfilerSettings,
}


def between_markers(text: str) -> str:
    """What the page holds between the markers (raises if they are not there once each)."""
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise ValueError("the page needs one settings-table marker pair")
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def rewrite(page: Path, settings_cls: type[BaseSettings]) -> None:
    text = page.read_text(encoding="utf-8")
    between_markers(text)
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    page.write_text(f"{head}{BEGIN}\n{knob_table(settings_cls)}{END}{tail}", encoding="utf-8")


if __name__ == "__main__":
    for page, cls in TABLES.items():
        rewrite(page, cls)
