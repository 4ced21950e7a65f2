"""What the profiler writes, the real control plane takes: profiled pairs are pushed to its
admin API (real redis-server), and a routing table is built and published from them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from contracts.redis_keys import RedisKeys
from contracts.routing_table import RoutingTable
from control_plane.app import AppDeps, create_app
from control_plane.settings import ControlPlaneSettings, RedisSettings, ServerSettings
from profiler.errors import PushError
from profiler.load.workload import build_sweep
from profiler.reports.push import push_report
from profiler.run.profiling import Runtime, profile_pair
from simulator.fleet import run_fleet
from tests.integration.profiler.conftest import closed_port, make_plan, sim_fleet, sim_pair
from tests.support.loopback import served
from tests.support.redis_server import RedisProcess

pytestmark = pytest.mark.integration

TOKEN = "profiler-admin-token-0123456789"


@contextlib.asynccontextmanager
async def control_plane(redis_url: str, keys: RedisKeys) -> AsyncIterator[str]:
    settings = ControlPlaneSettings(
        redis=RedisSettings(url=redis_url, key_prefix=keys.prefix),
        server=ServerSettings(admin_token=SecretStr(TOKEN)),
    )
    async with served(create_app(settings, AppDeps())) as url:
        yield url


async def test_pushed_reports_become_a_published_table(
    runtime: Runtime, redis_server: RedisProcess, redis_keys: RedisKeys, tmp_path: Path
) -> None:
    fast = sim_pair("sim-int4", quantization="int4-w4a16", tpot_base_s=0.005)
    sweep = build_sweep([1, 2, 4], [32, 128], [8], requests_per_level=4)
    async with run_fleet(sim_fleet(sim_pair("sim-bf16"), fast)) as sims:
        reports = [
            await profile_pair(
                make_plan(sims.url(n), n, None, quantization=q, sweep=sweep), runtime
            )
            for q, n in (("bf16", "sim-bf16"), ("int4-w4a16", "sim-int4"))
        ]
    async with control_plane(redis_server.url, redis_keys) as url:
        for report in reports:
            await push_report(runtime.session, url, TOKEN, report)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with runtime.session.post(f"{url}/v1/tables", headers=auth) as resp:
            assert resp.status == 201, await resp.text()
        async with runtime.session.get(f"{url}/v1/tables/current") as resp:
            table = RoutingTable.model_validate(await resp.json())
        partial = reports[0].model_copy(
            update={"provenance": reports[0].provenance.model_copy(update={"partial": True})}
        )
        with pytest.raises(PushError, match=r"HTTP 422: .*partial"):
            await push_report(runtime.session, url, TOKEN, partial)
        with pytest.raises(PushError, match="HTTP 401"):
            await push_report(runtime.session, url, "not-the-token", reports[0])
    listed = {e.pair for e in table.entries} | {p.pair for p in table.pruned}
    assert listed == {"gemma-3-270m@bf16", "gemma-3-270m@int4-w4a16"}
    assert table.version >= 1
    for entry in table.entries:
        report = next(r for r in reports if r.pair == entry.pair)
        assert entry.context_length == report.context_length
        assert entry.served_model_name == report.served_model_name


async def test_unreachable_control_plane_is_one_push_error(runtime: Runtime) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    async with run_fleet(sim_fleet(sim_pair("sim-bf16"))) as sims:
        report = await profile_pair(make_plan(sims.url("sim-bf16"), "sim-bf16", None), runtime)
    with pytest.raises(PushError, match=f"push to {url}/v1/profiles failed"):
        await push_report(runtime.session, url, TOKEN, report)
