"""Each plane's settings table in its docs page is the one generated from the knobs'
descriptions in code, and every knob has a description (its `--help` line and its row)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from contracts.knob_table import knob_table
from contracts.knobs import knobs
from control_plane.cli import _parser as control_plane_parser
from control_plane.settings import ControlPlaneSettings
from data_plane.__main__ import build_parser
from data_plane.settings import DataPlaneSettings
from tests.docs.settings_tables import TABLES, between_markers

_PAGES = sorted(TABLES)


@pytest.mark.parametrize("page", _PAGES, ids=[p.name for p in _PAGES])
def test_the_docs_table_is_the_generated_one(page: Path) -> None:
    written = between_markers(page.read_text(encoding="utf-8"))
    assert written == knob_table(TABLES[page]), (
        f"{page.name}: run `python -m tests.docs.settings_tables` and commit the result"
    )


@pytest.mark.parametrize("page", _PAGES, ids=[p.name for p in _PAGES])
def test_every_knob_of_every_plane_has_a_description(page: Path) -> None:
    assert [k.flat for k in knobs(TABLES[page]) if not k.description] == []


@pytest.mark.parametrize("command", ["serve", "extproc"])
def test_help_prints_each_flag_with_its_description(command: str) -> None:
    parser = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices[command]
    helps = {a.dest: a.help for a in parser._actions if a.help != argparse.SUPPRESS}
    flagged = [spec for spec in knobs(DataPlaneSettings) if spec.flat in helps]
    assert len(flagged) == len(knobs(DataPlaneSettings)) - 4  # secrets have no flag
    for spec in flagged:
        assert helps[spec.flat] == spec.description


def test_the_control_planes_knob_flags_print_their_descriptions() -> None:
    show = next(
        a for a in control_plane_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices["show"]
    helps = {a.dest: a.help for a in show._actions if a.help != argparse.SUPPRESS}
    about = {spec.flat: spec.description for spec in knobs(ControlPlaneSettings)}
    flagged = {dest: text for dest, text in helps.items() if dest in about}
    assert flagged == {name: about[name] for name in ("redis_url", "redis_key_prefix")}
