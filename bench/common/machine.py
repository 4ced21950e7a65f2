"""Facts about the machine a benchmark ran on, and how processes are pinned to its cores.

Read once per run and printed at the top of the report, so a figure is never read without
the hardware, Python and pinning it was measured with.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class Cores:
    """Where and how favoured one benchmark process runs: a `taskset -c` CPU list (empty =
    unpinned) and a niceness (0 = unchanged)."""

    cpus: str
    nice: int = 0


BACKGROUND_NICE = 10  # the trace collector's niceness (a positive one needs no root)


@dataclass(frozen=True, slots=True)
class Pinning:
    """CPU lists for `taskset -c`: the proxy under test alone on `proxy_cpus`, the rest
    (backend, load generator, simulator) on `aux_cpus`. Empty strings mean no pinning."""

    proxy_cpus: str
    aux_cpus: str
    nice: int = 0  # niceness of every process a benchmark starts (negative = favoured)

    @property
    def proxy(self) -> Cores:
        return Cores(self.proxy_cpus, self.nice)

    @property
    def aux(self) -> Cores:
        return Cores(self.aux_cpus, self.nice)

    @property
    def background(self) -> Cores:
        """The aux cores at low priority, for processes that are neither under test nor
        part of the load path (the trace collector: in production it runs elsewhere, so its
        bursts must not delay the load generator or the backend)."""
        return Cores(self.aux_cpus, BACKGROUND_NICE)

    def describe(self) -> str:
        priority = f"; benchmark processes at nice {self.nice}" if self.nice else ""
        if not self.proxy_cpus:
            return "none (taskset missing or a single core)" + priority
        return (
            f"proxy under test on CPU {self.proxy_cpus}; nginx backend, load generators and "
            f"simulators on CPU {self.aux_cpus} (taskset){priority}; the trace collector on "
            f"CPU {self.aux_cpus} at nice {BACKGROUND_NICE}"
        )


@dataclass(frozen=True, slots=True)
class MachineFacts:
    date_utc: str
    cpu_model: str
    cores: int
    python: str
    platform: str
    pinning: Pinning
    load_average: tuple[float, float, float]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


FAVOURED_NICE = -10


def choose_pinning(cores: int | None = None) -> Pinning:
    """Give the proxy under test CPU 1 to itself and everything else the other cores. As root,
    benchmark processes also run at nice -10, so other work on a shared machine does not
    stall them (the figures are about our processes, not about who else is busy)."""
    n = cores if cores is not None else (os.cpu_count() or 1)
    nice = FAVOURED_NICE if os.geteuid() == 0 and shutil.which("nice") else 0
    if n < 2 or shutil.which("taskset") is None:
        return Pinning("", "", nice)
    aux = "0" if n == 2 else f"0,2-{n - 1}"
    return Pinning("1", aux, nice)


def pinned(args: list[str], cores: Cores) -> list[str]:
    """`args` prefixed with `taskset -c` when pinned, and with `nice -n` when favoured (a
    negative niceness needs root, which `choose_pinning` checked)."""
    out = ["taskset", "-c", cores.cpus, *args] if cores.cpus else list(args)
    if cores.nice:
        out = ["nice", "-n", str(cores.nice), *out]
    return out


def read_facts(pinning: Pinning) -> MachineFacts:
    load = os.getloadavg()
    return MachineFacts(
        date_utc=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        cpu_model=cpu_model(),
        cores=os.cpu_count() or 1,
        python=sys.version.split()[0],
        platform=platform.platform(),
        pinning=pinning,
        load_average=(round(load[0], 2), round(load[1], 2), round(load[2], 2)),
    )


def tool_version(args: list[str]) -> str:
    """First line a tool prints about its version (stdout or stderr), or 'missing'."""
    if shutil.which(args[0]) is None:
        return "missing"
    out = subprocess.run(args, capture_output=True, text=True, check=False, timeout=10)
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else "unknown"
