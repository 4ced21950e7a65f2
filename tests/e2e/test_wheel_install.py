"""The wheel as a new user gets it: built from the source tree, installed with a plain
`pip install gearbox-*.whl` into a fresh venv (no `--system-site-packages`, no `--no-deps`, no
repair step after it), then each console script run from outside the source tree. pip skips
byte-compiling (`--no-compile`): the commands write the bytecode of what they import, as a
user's do (`Installed.env`); every other file is the same.

What is honest and what is fast: pip resolves every dependency against the package index, as a
user's pip does, so a dependency missing from pyproject.toml fails here; only pip's own HTTP
cache (~/.cache/pip) is reused, which saves downloads and hides nothing. Building the wheel
and installing it took about a minute on the 2-core dev machine with a warm cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from contracts.profile_report import ProfileReport
from contracts.routing_table import RoutingTable
from tests.support.redis_server import free_port

pytestmark = pytest.mark.timeout(600)  # the module's first test waits for the install

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("contracts", "control_plane", "data_plane", "profiler", "simulator", "demo")
SCRIPTS = ("gearbox-data-plane", "gearbox-control-plane", "gearbox-profiler")


@dataclass(frozen=True)
class Installed:
    venv: Path
    site: Path
    work: Path  # the cwd of every command: outside the source tree

    def env(self) -> dict[str, str]:
        """What a user's shell has: the venv on PATH, and bytecode written where Python writes
        it. A machine that sets PYTHONDONTWRITEBYTECODE (the dev machine does) made each of
        these commands compile every dependency it imports from source again: 2 to 2.5 CPU-s
        more per command (`gearbox-control-plane build` 4.1 against 1.8)."""
        env = _clean_env()
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PATH"] = f"{self.venv / 'bin'}:{env.get('PATH', '')}"
        return env

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            args, cwd=self.work, env=self.env(), capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            args, cwd=self.work, env=self.env(), stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip


def _source_files() -> list[Path]:
    """What a clean checkout holds: tracked and untracked-but-not-ignored files."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    return [Path(p) for p in listed.split("\0") if p and (REPO / p).is_file()]


def _clean_env() -> dict[str, str]:
    """This environment without PYTHONPATH: a source tree on it (with a stray
    gearbox.egg-info) makes pip think gearbox is already installed, and skip it."""
    return {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}


def _pip(python: Path, *args: str) -> None:
    done = subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", *args],
        env=_clean_env(), capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _scratch() -> str | None:
    """Where the wheel, its source copy and the venv live: in memory (tmpfs) where it may run
    programs (Docker mounts /dev/shm noexec), else the temp folder. On the 2-core dev machine's
    disk (ext4 mounted with online `discard`) deleting them (12,190 files, 432 MB) took 29 s of
    wall time for 1.5 CPU-s: the module's 27-51 s teardown in `make test`, 135 s at nice 10
    beside six busy loops. On /dev/shm: 0.3 s. pip's download cache stays on disk."""
    shm = "/dev/shm"
    if not os.path.isdir(shm) or not os.access(shm, os.W_OK):
        return None
    return None if os.statvfs(shm).f_flag & os.ST_NOEXEC else shm


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    # Not pytest's tmp_path: other pytest sessions of the same user prune its older folders,
    # and this one lives for minutes.
    with tempfile.TemporaryDirectory(prefix="gearbox-wheel-", dir=_scratch()) as tmp:
        yield _install(Path(tmp))


def _install(root: Path) -> Installed:
    src = root / "src"  # a copy: an in-tree build would reuse a stale build/ folder
    for rel in _source_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel)
    _pip(Path(sys.executable), "wheel", "--quiet", "--no-deps", "--wheel-dir", str(root), str(src))
    (wheel,) = root.glob("gearbox-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    # --no-compile: pip used 31 s of CPU (114 s wall) byte-compiling every dependency, 16 s
    # (66 s) without, beside other suites; the commands below compile only what they import.
    _pip(venv / "bin" / "python", "install", "--quiet", "--no-compile", str(wheel))
    (site,) = (venv / "lib").glob("python3.*/site-packages")
    assert (site / "gearbox-0.1.0.dist-info").is_dir(), "pip did not install the wheel"
    work = root / "work"
    work.mkdir()
    return Installed(venv, site, work)


@pytest.fixture(scope="module")
def table(installed: Installed) -> Path:
    out = installed.work / "table.json"
    profiles = [str(p) for p in sorted((REPO / "examples/profiles").glob("*.json"))]
    done = installed.run(
        "gearbox-control-plane", "build", *profiles,
        "--policy", str(REPO / "examples/policy.yaml"), "-o", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _ready(url: str, proc: subprocess.Popen[str], timeout_s: float = 60) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else "exited"
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as resp:
                answer: dict[str, object] = json.loads(resp.read())
                return answer
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.2)
    raise AssertionError(f"{url}/readyz never answered 200")


@pytest.fixture
def stopping() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        proc.terminate()
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def test_every_data_file_of_the_packages_is_in_the_wheel(installed: Installed) -> None:
    """Eval sets, operator page files, schemas, labelled prompts, category model, descriptors."""
    data = [
        p for p in _source_files()
        if p.parts[0] in PACKAGES and p.suffix != ".py" and "__pycache__" not in p.parts
    ]  # fmt: skip
    assert {p.parts[0] for p in data} >= {"contracts", "control_plane", "data_plane", "profiler"}
    missing = [str(p) for p in data if not (installed.site / p).is_file()]
    assert missing == []


def test_no_file_is_installed_by_two_distributions(installed: Installed) -> None:
    """What broke before: one package's files written over another's (xds-protos over
    opentelemetry-proto); pip itself says nothing when that happens."""
    owners: dict[str, list[str]] = {}
    for record in installed.site.glob("*.dist-info/RECORD"):
        for line in record.read_text().splitlines():
            path = line.rsplit(",", 2)[0]
            if path and "__pycache__" not in path and ".dist-info/" not in path:
                owners.setdefault(path, []).append(record.parent.name)
    assert {p: o for p, o in owners.items() if len(o) > 1} == {}
    done = installed.run(str(installed.venv / "bin" / "pip"), "check")
    assert done.returncode == 0, done.stdout


def test_the_span_encoder_and_gateway_messages_import(installed: Installed) -> None:
    code = (
        "import data_plane.telemetry.otlp, data_plane.gateway.protos as p;"
        "print(p.service_methods())"
    )
    done = installed.run(str(installed.venv / "bin" / "python"), "-c", code)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "['Process']"


def test_shipped_ext_proc_descriptors_are_those_of_the_pinned_xds_protos() -> None:
    """docs/gateway.md, "Protocol version, and no Envoy here": the copy is checked against the
    wheel it was taken from (fetched with `pip download`, never installed)."""
    done = subprocess.run(
        [sys.executable, str(REPO / "infra/scripts/extproc_descriptors.py"), "--check"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_control_plane_builds_a_table_from_the_example_profiles(table: Path) -> None:
    built = RoutingTable.model_validate_json(table.read_text())
    assert len(built.entries) >= 2


def test_data_plane_serves_the_table_and_is_ready(
    installed: Installed, table: Path, stopping: list[subprocess.Popen[str]]
) -> None:
    port = free_port()
    proc = installed.start(
        "gearbox-data-plane", "serve", "--server-host", "127.0.0.1", "--server-port", str(port),
        "--redis-url", "", "--table-snapshot-path", str(table),
    )  # fmt: skip
    stopping.append(proc)
    answer = _ready(f"http://127.0.0.1:{port}", proc)
    assert answer["ready"] is True


def test_gateway_mode_starts_and_is_ready(
    installed: Installed, table: Path, stopping: list[subprocess.Popen[str]]
) -> None:
    port, grpc_port = free_port(), free_port()
    proc = installed.start(
        "gearbox-data-plane", "extproc", "--server-host", "127.0.0.1", "--server-port", str(port),
        "--extproc-port", str(grpc_port), "--redis-url", "", "--table-snapshot-path", str(table),
    )  # fmt: skip
    stopping.append(proc)
    answer = _ready(f"http://127.0.0.1:{port}", proc)
    assert answer["ready"] is True


def test_profiler_profiles_one_simulated_pair(
    installed: Installed, stopping: list[subprocess.Popen[str]]
) -> None:
    """The simulator's answer keys and the profiler's eval sets are both the installed ones."""
    evalsets = installed.site / "profiler" / "evalsets"
    fleet = installed.work / "fleet.json"
    pair = {"name": "sim-a", "family": "gemma-3-270m", "quantization": "bf16",
            "ttft_base_s": 0.01, "tpot_base_s": 0.002}  # fmt: skip
    keys = [str(p) for p in sorted(evalsets.glob("*.jsonl"))]
    fleet.write_text(json.dumps({"pairs": [pair], "answer_keys": keys}))
    ports = installed.work / "ports.json"
    sim = installed.start(
        str(installed.venv / "bin" / "python"), "-m", "simulator", "serve",
        "--fleet", str(fleet), "--ports-file", str(ports),
    )  # fmt: skip
    stopping.append(sim)
    deadline = time.monotonic() + 30
    while not ports.exists() and time.monotonic() < deadline:
        assert sim.poll() is None, sim.stderr.read() if sim.stderr else "exited"
        time.sleep(0.1)
    url = json.loads(ports.read_text())["sim-a"]
    out = installed.work / "sim-a.json"
    done = installed.run(
        "gearbox-profiler", "run", "--endpoint", url, "--model", "sim-a",
        "--family", "gemma-3-270m", "--quantization", "bf16", "--hourly-usd", "1",
        "--concurrency", "1", "--input-tokens", "32", "--output-tokens", "4",
        "--requests-per-level", "4", "--warmup", "0", "--quiet", "--out", str(out),
        timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = ProfileReport.model_validate_json(out.read_text())
    assert report.provenance.partial is False
    assert len(report.accuracy) == 5
    assert report.latency[0].requests == 4
