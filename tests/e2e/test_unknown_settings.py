"""Each plane's real entry point, as an operator starts it, stops at startup on a variable
with its prefix that is no setting: the exit code of any bad setting, one line per variable
naming the closest setting (or a renamed one's successor), no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROFILES = sorted((REPO / "examples" / "profiles").glob("*.json"))


def _start(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m ARGS` from this tree, with no GEARBOX_ variable but `env`. The wait ends
    when the process exits; 240 s (under pytest's 300 s) is the safety net for its imports
    on a loaded machine (39 s of wall time for 2 s of CPU beside two suites)."""
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("GEARBOX_")}
    clean |= {"PYTHONPATH": str(REPO), **env}
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO, env=clean, capture_output=True, text=True,
        timeout=240, check=False,
    )  # fmt: skip


def test_data_plane_exits_2_naming_the_renamed_slack_and_a_typo() -> None:
    done = _start(
        ["data_plane", "serve"],
        GEARBOX_DP_ENGINE_DEADLINE_SLACK_S="5",
        GEARBOX_DP_BREAKER_COOLDOWN_SECS="3",
        GEARBOX_DP_REDIS_URL="",  # static mode: without the two it would start and serve
        GEARBOX_DP_SERVER_PORT="0",
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "invalid setting GEARBOX_DP_BREAKER_COOLDOWN_SECS: no such setting; "
        "did you mean GEARBOX_DP_BREAKER_COOLDOWN_S?",
        "invalid setting GEARBOX_DP_ENGINE_DEADLINE_SLACK_S: renamed "
        "GEARBOX_DP_PROGRESS_SLACK_S: now pads only the gap between streamed tokens; "
        "engine stalls are judged per endpoint (PROGRESS_STALL_WINDOW_S)",
    ]


def test_control_plane_exits_1_like_any_bad_setting() -> None:
    done = _start(
        ["control_plane", "build", str(PROFILES[0]), "-o", "-"], GEARBOX_CP_ADMIN_TOKNE="x" * 24
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert done.stderr == (
        "error: invalid settings: GEARBOX_CP_ADMIN_TOKNE: no such setting; "
        "did you mean GEARBOX_CP_SERVER_ADMIN_TOKEN?\n"
    )


def test_profiler_exits_2_like_any_bad_setting() -> None:
    done = _start(["profiler", "compare", *map(str, PROFILES)], GEARBOX_PROF_NOPE="1")
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr == "error: GEARBOX_PROF_NOPE: no such setting, and none has a similar name\n"
