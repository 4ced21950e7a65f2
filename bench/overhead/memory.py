"""Section 4: data-plane memory. RSS after a warm-up and again after 100,000 requests through
the overhead set-up (nginx backend, 12-pair table, tracing on); growth must stay within 10%."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.common.backend import run_nginx
from bench.common.machine import Cores, Pinning
from bench.common.processes import fd_count, rss_bytes
from bench.common.targets import GEARBOX_PAIRS, REQUEST_HEADERS, RunContext, gearbox_process
from bench.common.targets import request_body as make_body
from bench.overhead.section import CHAT_PATH
from bench.overhead.wrk import lua_script, run_wrk

WARMUP_REQUESTS = 5_000
CONNECTIONS = 32


@dataclass(frozen=True, slots=True)
class MemoryResult:
    requests: int  # measured requests after the warm-up
    warmup_requests: int
    rss_start_bytes: int  # right after start-up, before any request
    rss_before_bytes: int  # after the warm-up
    rss_after_bytes: int
    fds_before: int
    fds_after: int
    errors: int

    @property
    def growth_ratio(self) -> float:
        return self.rss_after_bytes / self.rss_before_bytes - 1.0


def _drive(
    url: str, script: str, n: int, rate_guess: float, cpus: Cores, workdir: Path
) -> tuple[int, int, float]:
    """Run wrk in slices until `n` requests are answered; (requests, errors, last rate)."""
    done = errors = 0
    rate = rate_guess
    while done < n:
        seconds = max(1.0, min(30.0, (n - done) / max(rate, 1.0)))
        r = run_wrk(url, script, CONNECTIONS, seconds, cpus, workdir)
        done, errors, rate = done + r.requests, errors + r.errors, r.requests_per_s
    return done, errors, rate


def run_memory(pinning: Pinning, workdir: Path, n_requests: int = 100_000) -> MemoryResult:
    script = lua_script(make_body("auto", False), REQUEST_HEADERS, CHAT_PATH)
    with run_nginx(workdir / "nginx", GEARBOX_PAIRS, pinning.aux) as backend:
        ctx = RunContext(backend, pinning, workdir / "gearbox", stream=False)
        with gearbox_process(ctx) as pid:
            url = f"http://127.0.0.1:{ctx.workdir.joinpath('gearbox.port').read_text()}"
            start = rss_bytes(pid)
            warm = min(WARMUP_REQUESTS, max(1, n_requests // 10))
            _, warm_errors, rate = _drive(url, script, warm, 500.0, pinning.aux, workdir)
            before, fds_before = rss_bytes(pid), fd_count(pid)
            done, errors, _ = _drive(url, script, n_requests, rate, pinning.aux, workdir)
            return MemoryResult(
                requests=done,
                warmup_requests=warm,
                rss_start_bytes=start,
                rss_before_bytes=before,
                rss_after_bytes=rss_bytes(pid),
                fds_before=fds_before,
                fds_after=fd_count(pid),
                errors=errors + warm_errors,
            )
