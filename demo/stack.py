"""The Gearbox processes of a demo run: a private redis-server, the control plane, the data plane.

Each is the plane's own CLI (`python -m control_plane serve`, `python -m data_plane serve`) on a
free loopback port, configured through its documented environment variables.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from demo.processes import Child, StartupError, start_child, wait_http_ok
from demo.redis_launcher import free_port, redis_server_argv, wait_until_listening

KEY_PREFIX = "demo"
STARTUP_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Stack:
    """Where the running planes listen, and the admin token of this run's control plane."""

    redis_url: str
    control_plane_url: str
    data_plane_url: str
    admin_token: str

    @property
    def operator_page_url(self) -> str:
        return f"{self.control_plane_url}/ui"


async def start_redis(children: ExitStack, logs: Path) -> str:
    """A redis-server of the system on a free port, no persistence; returns its URL."""
    workdir = Path(children.enter_context(tempfile.TemporaryDirectory(prefix="gearbox-demo-")))
    port = free_port()
    try:
        argv = redis_server_argv(port, workdir)
    except RuntimeError as err:
        raise StartupError(str(err)) from err
    child = start_child("redis-server", argv, logs / "redis.log")
    children.callback(child.stop)
    try:
        await asyncio.to_thread(wait_until_listening, port, child.process)
    except RuntimeError as err:
        raise StartupError(child.failure()) from err
    return f"redis://127.0.0.1:{port}/0"


async def start_control_plane(children: ExitStack, redis_url: str, logs: Path) -> tuple[str, str]:
    """`python -m control_plane serve`; returns (base URL, admin token)."""
    port, token = free_port(), secrets.token_urlsafe(24)
    env = {
        "GEARBOX_CP_REDIS_URL": redis_url,
        "GEARBOX_CP_REDIS_KEY_PREFIX": KEY_PREFIX,
        "GEARBOX_CP_SERVER_ADMIN_TOKEN": token,
        "GEARBOX_CP_SERVER_HOST": "127.0.0.1",
        "GEARBOX_CP_SERVER_PORT": str(port),
        # Every engine of the demo is capacity: a pair dominated at equal load still serves
        # when its dominator is busy (docs/control_plane.md, "Dominance and pruning").
        "GEARBOX_CP_BUILD_PRUNE": "false",
    }
    argv = [sys.executable, "-m", "control_plane", "serve"]
    child = start_child("control plane", argv, logs / "control-plane.log", env)
    children.callback(child.stop)
    url = f"http://127.0.0.1:{port}"
    await wait_http_ok(f"{url}/readyz", child, STARTUP_TIMEOUT_S)
    return url, token


async def start_data_plane(
    children: ExitStack, redis_url: str, logs: Path, canary_per_minute: float | None = None
) -> tuple[str, Child]:
    """`python -m data_plane serve`, scraping engine queue depth each second; waits for /readyz.
    Real engines sharing the machine's cores need no setting of their own: a starved engine is
    slow, not stalled, as long as it sends bytes (docs/reliability.md, "What a breaker
    counts"). Canary items at `canary_per_minute` per pair (None: the default)."""
    port = free_port()
    env = {
        "GEARBOX_DP_REDIS_URL": redis_url,
        "GEARBOX_DP_REDIS_KEY_PREFIX": KEY_PREFIX,
        "GEARBOX_DP_SERVER_HOST": "127.0.0.1",
        "GEARBOX_DP_SERVER_PORT": str(port),
        "GEARBOX_DP_SCRAPE_INTERVAL_S": "1",
        "GEARBOX_DP_TABLE_POLL_INTERVAL_S": "1",
        "GEARBOX_DP_LIVE_STATE_INTERVAL_S": "2",
        "GEARBOX_DP_INSTANCE_ID": "demo-dp-0",
    }
    if canary_per_minute is not None:
        env["GEARBOX_DP_FEEDBACK_CANARY_ITEMS_PER_MINUTE"] = f"{canary_per_minute:g}"
    argv = [sys.executable, "-m", "data_plane", "serve"]
    child = start_child("data plane", argv, logs / "data-plane.log", env)
    children.callback(child.stop)
    url = f"http://127.0.0.1:{port}"
    await wait_http_ok(f"{url}/readyz", child, STARTUP_TIMEOUT_S)
    return url, child


async def publish_table(control_plane_url: str, token: str) -> dict[str, Any]:
    """POST /v1/tables (rebuild from the pushed profiles, publish); returns the current table."""
    headers = {"Authorization": f"Bearer {token}"}
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
        async with session.post(f"{control_plane_url}/v1/tables") as response:
            body = await response.json()
            if response.status not in (200, 201):
                raise StartupError(f"publishing the table failed ({response.status}): {body}")
        async with session.get(f"{control_plane_url}/v1/tables/current") as response:
            response.raise_for_status()
            table: dict[str, Any] = await response.json()
    return table


async def put_floors(control_plane_url: str, token: str, floors: dict[str, float]) -> None:
    """PUT /v1/policy: the effective policy with these per-category floors (`min_accuracy`)."""
    headers = {"Authorization": f"Bearer {token}"}
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
        async with session.get(f"{control_plane_url}/v1/policy") as response:
            response.raise_for_status()
            policy: dict[str, Any] = await response.json()
        for category, floor in floors.items():
            policy["categories"].setdefault(category, {})["min_accuracy"] = floor
        async with session.put(f"{control_plane_url}/v1/policy", json=policy) as response:
            if response.status != 200:
                body = await response.text()
                raise StartupError(f"storing the policy failed ({response.status}): {body}")


async def fetch_json(url: str, token: str) -> Any:
    """GET an admin-API document."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10), headers=headers) as s,
        s.get(url) as response,
    ):
        response.raise_for_status()
        return await response.json()


async def fetch_text(url: str) -> str:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
        session.get(url) as response,
    ):
        response.raise_for_status()
        return await response.text()
