"""A real DNS server for tests: Debian's dnsmasq on a free loopback port, answering only the
records it is given (no upstream, no hosts file). `serve` restarts it with new records."""

from __future__ import annotations

import contextlib
import getpass
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.redis_server import free_port

SrvRecord = tuple[str, str, int]  # (owner name, target host, port)
ARecord = tuple[str, str]  # (name, IPv4 address)


@dataclass
class Dnsmasq:
    port: int
    workdir: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def server(self) -> str:
        return f"127.0.0.1:{self.port}"

    def serve(self, srv: Sequence[SrvRecord] = (), a: Sequence[ARecord] = ()) -> None:
        """(Re)start answering exactly these records for the `.test` domain."""
        self.stop()
        lines = [
            f"port={self.port}",
            "listen-address=127.0.0.1",
            "bind-interfaces",
            "no-resolv",
            "no-hosts",
            "no-poll",
            "local=/test/",
            *(f"srv-host={name},{target},{port}" for name, target, port in srv),
            *(f"host-record={name},{address}" for name, address in a),
        ]
        conf = self.workdir / "dnsmasq.conf"
        conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
        binary = shutil.which("dnsmasq") or "/usr/sbin/dnsmasq"
        if not Path(binary).exists():
            raise RuntimeError(
                "dnsmasq is not installed; `make test` installs it "
                "(infra/scripts/ensure-system-deps.sh)"
            )
        self.process = subprocess.Popen(
            [binary, "-k", "-C", str(conf), "--pid-file=", f"--user={getpass.getuser()}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self._wait_ready()

    def _wait_ready(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        assert self.process is not None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                raise RuntimeError(f"dnsmasq exited with {self.process.returncode}: {err}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.2),
            ):
                return
            time.sleep(0.05)
        raise RuntimeError(f"dnsmasq did not listen on port {self.port} within {timeout_s}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()
        self.process = None


@contextlib.contextmanager
def running_dnsmasq(workdir: Path) -> Iterator[Dnsmasq]:
    server = Dnsmasq(free_port(), workdir)
    try:
        yield server
    finally:
        server.stop()
