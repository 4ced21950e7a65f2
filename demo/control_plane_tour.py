"""`make demo-cp`: the control plane end to end on a private redis-server.

Starts Redis and the admin API on loopback, pushes the example profiles and policy, publishes
a table and prints it, republishes (unchanged), publishes a p99 variant, rolls back to the first
version, prints the history, and shuts everything down. Exit code 0 when every step did what it
should.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
from pathlib import Path

import aiohttp
import yaml
from aiohttp import web
from pydantic import SecretStr

from control_plane.admin_client import AdminClient
from control_plane.app import create_app
from control_plane.render import render_table
from control_plane.settings import ControlPlaneSettings, RedisSettings, ServerSettings
from demo.redis_launcher import private_redis

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _step(title: str) -> None:
    print(f"\n== {title}", flush=True)


async def _tour(client: AdminClient) -> None:
    _step("push the example profiles (python -m control_plane push examples/profiles/*.json)")
    for path in sorted((EXAMPLES / "profiles").glob("*.json")):
        stored = await client.push_report(path.read_bytes())
        print(f"  stored {stored['pair']}")
    policy = yaml.safe_load((EXAMPLES / "policy.yaml").read_text(encoding="utf-8"))
    await client.put_policy(json.dumps(policy).encode())
    print("  stored examples/policy.yaml")

    _step("build and publish (POST /v1/tables)")
    first = await client.rebuild()
    print(f"  {first['outcome']} v{first['version']}  sha256 {first['content_sha256'][:12]}")
    print("\n" + render_table(await client.current_table()))

    _step("publish again with nothing changed")
    again = await client.rebuild()
    print(f"  {again['outcome']}: v{again['version']} stays current")

    _step("route on p99 instead of p95 (PUT /v1/policy, POST /v1/tables)")
    await client.put_policy(json.dumps({**policy, "latency_quantile": 0.99}).encode())
    second = await client.rebuild()
    print(f"  {second['outcome']} v{second['version']}  sha256 {second['content_sha256'][:12]}")

    _step(f"roll back to v{first['version']} (POST /v1/tables/rollback)")
    rolled = await client.rollback(first["version"])
    print(f"  current is v{rolled['version']} again (was v{rolled['previous_version']})")
    history = await client.history()
    for item in history["versions"]:
        mark = "->" if item["current"] else "  "
        print(f"  {mark} v{item['version']}  sha256 {item['content_sha256'][:12]}")
    if not (first["outcome"], again["outcome"], second["outcome"]) == (
        "published", "unchanged", "published"
    ) or history["current"] != first["version"]:  # fmt: skip
        raise RuntimeError("the demo did not go as expected")


async def run_demo() -> None:
    token = secrets.token_urlsafe(24)
    with private_redis() as redis_url:
        print(f"redis-server at {redis_url}")
        settings = ControlPlaneSettings(
            redis=RedisSettings(url=redis_url, key_prefix="demo"),
            server=ServerSettings(admin_token=SecretStr(token)),
        )
        runner = web.AppRunner(create_app(settings), handler_cancellation=True, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            host, port = runner.addresses[0][:2]
            print(f"control plane admin API at http://{host}:{port} (token in memory only)")
            async with aiohttp.ClientSession() as session:
                await _tour(AdminClient(session, f"http://{host}:{port}", token))
        finally:
            await runner.cleanup()
    print("\ndone: redis-server and the admin API are stopped")


def main() -> int:
    try:
        asyncio.run(run_demo())
    except (RuntimeError, OSError, aiohttp.ClientError) as err:
        print(f"demo failed: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
