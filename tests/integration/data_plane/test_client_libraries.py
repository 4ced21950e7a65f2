"""The official openai client against the data plane and simulated engines (issue 13): an
error Gearbox answers after it already tried the engines is not retried by the client, and
`models.retrieve` works."""

from __future__ import annotations

import openai
import pytest

from simulator import FaultConfig, Fleet
from tests.integration.data_plane.conftest import FP16, INT4, MakePlane, Plane, fleet_table
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration


async def serving(make_plane: MakePlane, fleet: Fleet, **settings: object) -> Plane:
    plane = await make_plane(**settings)
    version = await plane.publisher.publish(fleet_table(fleet))
    await eventually(lambda: plane.version == version, what="table loaded")
    return plane


def sdk(plane: Plane) -> openai.AsyncOpenAI:
    """The client as applications use it: default retries (2) and backoff."""
    return openai.AsyncOpenAI(base_url=str(plane.client.make_url("/v1")), api_key="unused")


def client_calls(plane: Plane, outcome: str) -> float:
    return plane.metric("gearbox_requests_total", route="chat_completions", outcome=outcome)


async def test_sdk_does_not_retry_a_502_after_gearbox_retried(
    make_plane: MakePlane, fleet: Fleet
) -> None:
    plane = await serving(make_plane, fleet)
    for pair in (FP16, INT4):
        fleet.set_faults(pair, FaultConfig(error_rate=1.0, error_status=503))
    async with sdk(plane) as client:
        with pytest.raises(openai.InternalServerError) as err:
            await client.chat.completions.with_raw_response.create(
                model="auto", messages=[{"role": "user", "content": "Hello."}], max_tokens=4
            )
    assert err.value.status_code == 502
    assert err.value.response.headers["x-should-retry"] == "false"
    # One client call; Gearbox tried each engine once: two engine calls in all, not six.
    assert client_calls(plane, "upstream_error") == 1
    engine_calls = fleet.stats(FP16).received + fleet.stats(INT4).received
    assert engine_calls == 2


async def test_sdk_does_not_retry_a_503_after_gearbox_retried(
    make_plane: MakePlane, fleet: Fleet
) -> None:
    plane = await serving(make_plane, fleet)
    for pair in (FP16, INT4):
        fleet.set_faults(pair, FaultConfig(refuse_connections=True))
    async with sdk(plane) as client:
        with pytest.raises(openai.InternalServerError) as err:
            await client.chat.completions.create(
                model="auto", messages=[{"role": "user", "content": "Hello."}], max_tokens=4
            )
    assert err.value.status_code == 503
    headers = err.value.response.headers
    assert headers["x-should-retry"] == "false"
    assert int(headers["Retry-After"]) >= 1  # when the breakers let a probe through
    assert client_calls(plane, "unavailable") == 1


async def test_sdk_retrieves_one_model(make_plane: MakePlane, fleet: Fleet) -> None:
    plane = await serving(make_plane, fleet)
    async with sdk(plane) as client:
        model = await client.models.retrieve("fam@int4")
        assert model.id == "fam@int4"
        assert model.owned_by == "gearbox"
        assert model.model_extra == {"max_model_len": 8192}
        with pytest.raises(openai.NotFoundError) as err:
            await client.models.retrieve("fam@int8")
        assert err.value.code == "model_not_found"
