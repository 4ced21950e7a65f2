"""Both planes on a Redis that wants a password, and on one that speaks only TLS (`rediss://`
with the CA in the URL): tables flow end to end; a wrong password, plain TCP to the TLS port
or an unverifiable certificate keep them out; no log line shows the password."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from simulator import Fleet, SimFleetConfig, run_fleet
from tests.reliability.admin import AdminClient
from tests.reliability.conftest import ADMIN_TOKEN, StartControlPlane, StartDataPlane
from tests.reliability.processes import Child, PersistentRedis, make_tls_files
from tests.reliability.stack import (
    CHEAP,
    PRICEY,
    chat_body,
    dp_settings,
    fleet_reports,
    metric,
    served_name,
    sim_pair,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

PASSWORD = "redis-pass-for-the-tls-test-91c2"


async def publish_and_serve(
    redis_url: str,
    prefix: str,
    fleet: Fleet,
    tmp_path: Path,
    start_control_plane: StartControlPlane,
    start_data_plane: StartDataPlane,
) -> None:
    """Profiles in through the admin API, a table out, a data plane that serves it."""
    urls = {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
    async with aiohttp.ClientSession() as session:
        admin = AdminClient(session, await start_control_plane(redis_url, prefix), ADMIN_TOKEN)
        assert (await admin.call("GET", "/readyz", auth=False))[0] == 200
        for report in fleet_reports(urls):
            await admin.push(report)
        status, _, body = await admin.publish()
        assert status == 201, body
        plane = await start_data_plane(dp_settings(redis_url, prefix, tmp_path / "good.json"))
        await eventually(lambda: plane.version == body["version"], timeout_s=10, what="loaded")
        async with session.post(plane.url + "/v1/chat/completions", json=chat_body()) as resp:
            assert resp.status == 200, await resp.text()


async def refused(
    redis_url: str,
    prefix: str,
    tmp_path: Path,
    start_control_plane: StartControlPlane,
    start_data_plane: StartDataPlane,
) -> None:
    """With these credentials neither plane gets in: not ready, no table, failures counted."""
    async with aiohttp.ClientSession() as session:
        admin = AdminClient(session, await start_control_plane(redis_url, prefix), ADMIN_TOKEN)
        status, _, body = await admin.call("GET", "/readyz", auth=False)
        assert (status, body["redis"]) == (503, False)
        plane = await start_data_plane(dp_settings(redis_url, prefix, tmp_path / "bad.json"))
        await eventually(
            lambda: (
                metric(
                    plane.app,
                    "gearbox_routing_table_load_failures_total",
                    reason="redis_unavailable",
                )
                >= 1
            ),
            what="the data plane could not read Redis",
        )
        assert plane.version is None


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    config = SimFleetConfig(pairs=[sim_pair(CHEAP), sim_pair(PRICEY)])
    async with run_fleet(config, answers={}) as running:
        yield running


async def test_password_protected_redis_for_both_planes(
    tmp_path: Path,
    children: list[Child],
    fleet: Fleet,
    start_control_plane: StartControlPlane,
    start_data_plane: StartDataPlane,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    redis = PersistentRedis(tmp_path, password=PASSWORD)
    children.append(redis)
    await redis.start()
    await publish_and_serve(redis.url, "pw", fleet, tmp_path, start_control_plane, start_data_plane)
    wrong = redis.url.replace(PASSWORD, "not-the-password")
    await refused(wrong, "pw", tmp_path, start_control_plane, start_data_plane)
    no_password = redis.url.replace(f":{PASSWORD}@", "")
    await refused(no_password, "pw", tmp_path, start_control_plane, start_data_plane)
    assert PASSWORD not in caplog.text


async def test_tls_redis_for_both_planes(
    tmp_path: Path,
    children: list[Child],
    fleet: Fleet,
    start_control_plane: StartControlPlane,
    start_data_plane: StartDataPlane,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    tls = await make_tls_files(tmp_path / "tls")
    redis = PersistentRedis(tmp_path, password=PASSWORD, tls=tls)
    children.append(redis)
    await redis.start()
    assert redis.url.startswith("rediss://")
    await publish_and_serve(
        redis.url, "tls", fleet, tmp_path, start_control_plane, start_data_plane
    )
    plain = f"redis://:{PASSWORD}@127.0.0.1:{redis.port}/0"  # TCP without TLS
    await refused(plain, "tls", tmp_path, start_control_plane, start_data_plane)
    unverified = redis.url.split("?", 1)[0]  # TLS, but our CA is not trusted by default
    await refused(unverified, "tls", tmp_path, start_control_plane, start_data_plane)
    assert PASSWORD not in caplog.text
