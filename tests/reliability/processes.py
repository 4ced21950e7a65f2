"""Real child processes the fault tests start, crash and restart without blocking the loop:
simulated engines (`python -m simulator serve`), a data plane (`python -m data_plane serve`)
and a redis-server that persists (AOF), so a restart keeps what was written.

Every process is started with asyncio (the test's event loop keeps serving load meanwhile) and
stopped by the fixture that made it; `kill()` is SIGKILL, a crash with no cleanup.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import aiohttp

from demo.redis_launcher import RedisTls, free_port, redis_server_argv
from simulator import FaultConfig, SimFleetConfig, SimPairConfig

START_TIMEOUT_S = 30.0


class ChildFailedError(RuntimeError):
    """A child exited early or never became ready; the message carries its log tail."""


def log_tail(path: Path, n_bytes: int = 4000) -> str:
    try:
        return path.read_bytes()[-n_bytes:].decode(errors="replace")
    except OSError:
        return ""


async def port_open(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


class Child:
    """One child process with its log file; restartable with the same arguments."""

    def __init__(self, name: str, args: Sequence[str], log: Path, env: Mapping[str, str]) -> None:
        self.name = name
        self.args = list(args)
        self.log = log
        self.env = {**os.environ, **env}
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"{self.name} is not running")
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def spawn(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                *self.args, stdout=out, stderr=asyncio.subprocess.STDOUT, env=self.env
            )

    async def wait_port(self, port: int, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not await port_open(port):
            if self.proc is None or self.proc.returncode is not None:
                raise ChildFailedError(f"{self.name} exited:\n{log_tail(self.log)}")
            if time.monotonic() > deadline:
                raise ChildFailedError(f"{self.name} not listening:\n{log_tail(self.log)}")
            await asyncio.sleep(0.05)

    async def kill(self) -> None:
        """SIGKILL: the process dies at once, open connections are reset."""
        await self._signal(signal.SIGKILL)

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        await self._signal(signal.SIGTERM)

    async def _signal(self, sig: signal.Signals) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            await asyncio.wait_for(proc.wait(), timeout=15)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


class SimProcess(Child):
    """`python -m simulator serve` for `pairs`, each on a fixed port so a restart keeps it."""

    def __init__(self, pairs: Sequence[SimPairConfig], workdir: Path, tag: str = "sim") -> None:
        fixed = [p if p.port else p.model_copy(update={"port": free_port()}) for p in pairs]
        self.ports = {p.name: p.port for p in fixed}
        fleet = workdir / f"{tag}-fleet.json"
        fleet.write_text(SimFleetConfig(pairs=fixed).model_dump_json(), encoding="utf-8")
        args = [sys.executable, "-m", "simulator", "serve", "--fleet", str(fleet)]
        super().__init__(tag, args, workdir / f"{tag}.log", {})

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    async def start(self) -> None:
        await self.spawn()
        for port in self.ports.values():
            await self.wait_port(port)

    async def set_faults(self, name: str, faults: FaultConfig) -> None:
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{self.url(name)}/sim/faults", data=faults.model_dump_json()) as resp,
        ):
            assert resp.status == 200, await resp.text()

    async def stats(self, name: str) -> dict[str, int]:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{self.url(name)}/sim/stats") as resp,
        ):
            data: dict[str, int] = await resp.json()
            return data


class DataPlaneProcess(Child):
    """`python -m data_plane serve` on a fixed loopback port; flags from `settings`."""

    def __init__(
        self, settings: Mapping[str, str], workdir: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.port = free_port()
        args = [sys.executable, "-m", "data_plane", "serve", "--server-host", "127.0.0.1"]
        args += ["--server-port", str(self.port)]
        # Canary items are on by default; these tests count engine traffic without them.
        for name, value in {"feedback_canary_items_per_minute": "0", **settings}.items():
            args += ["--" + name.replace("_", "-"), value]
        super().__init__("data-plane", args, workdir / "data-plane.log", env or {})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        await self.spawn()
        await self.wait_port(self.port)

    def log_lines(self) -> list[dict[str, object]]:
        """The JSON log lines written so far."""
        lines = self.log.read_text(encoding="utf-8", errors="replace").splitlines()
        return [json.loads(x) for x in lines if x.startswith("{")]


class PersistentRedis(Child):
    """redis-server with AOF (fsync always) on a fixed loopback port: stop/start keeps data,
    as a production Redis does; `tests.support.running_redis` forgets everything instead.
    With `tls`, it listens for TLS only (`--tls-port`, plain port off)."""

    def __init__(
        self, workdir: Path, password: str | None = None, tls: RedisTls | None = None
    ) -> None:
        self.port = free_port()
        self.password = password
        self.tls = tls
        data = workdir / "redis-data"
        data.mkdir(parents=True, exist_ok=True)
        try:
            args = redis_server_argv(self.port, data, password=password, persist=True, tls=tls)
        except RuntimeError as err:
            raise ChildFailedError(str(err)) from err
        super().__init__("redis", args, workdir / "redis.log", {})

    @property
    def url(self) -> str:
        """redis:// (or rediss:// verifying the server against the test CA) with the password."""
        auth = f":{self.password}@" if self.password else ""
        if self.tls is None:
            return f"redis://{auth}127.0.0.1:{self.port}/0"
        query = f"ssl_ca_certs={self.tls.ca_cert}&ssl_cert_reqs=required"
        return f"rediss://{auth}127.0.0.1:{self.port}/0?{query}"

    async def start(self) -> None:
        await self.spawn()
        await self.wait_port(self.port)


def _openssl_steps(workdir: Path) -> list[list[str]]:
    """openssl arguments for a P-256 CA, a key + CSR for 127.0.0.1, and its signed cert."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n", encoding="utf-8")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca = ["-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1"]
    return [
        ["req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1"],
        ["req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"],
        ["x509", "-req", "-in", "server.csr", *ca, "-out", "server.crt", "-extfile", "san.cnf"],
    ]


async def make_tls_files(workdir: Path) -> RedisTls:
    """A throwaway CA and a server certificate for IP 127.0.0.1, with the openssl CLI."""
    steps = _openssl_steps(workdir)
    steps[0] += ["-subj", "/CN=gearbox-test-ca"]
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ChildFailedError("the openssl CLI is needed to make test certificates")
    for step in steps:
        proc = await asyncio.create_subprocess_exec(
            openssl,
            *step,
            cwd=workdir,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            raise ChildFailedError(f"openssl {step[0]} failed: {out.decode(errors='replace')}")
    return RedisTls(workdir / "ca.crt", workdir / "server.crt", workdir / "server.key")
