"""Engines behind `vllm serve --api-key` (issue 13 item 11): a loopback engine that answers
401 without its key, like vLLM, served through both upstream clients."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer

from tests.component.data_plane.fakes import chat_json, make_table, pair_entry
from tests.integration.data_plane.conftest import MakePlane
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

ENGINE_KEY = "engine-key-7c1d0e"
CLIENT_KEY = "client-key-4b2a9f"


async def guarded_engine(aiohttp_server: AiohttpServer, seen: list[str | None]) -> str:
    """A vLLM-like engine: /v1/* needs `Authorization: Bearer ENGINE_KEY`, else 401."""

    async def chat(request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization")
        seen.append(auth)
        if auth != f"Bearer {ENGINE_KEY}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return web.Response(body=chat_json("guarded"), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    server = await aiohttp_server(app)
    return str(server.make_url("")).rstrip("/")


@pytest.mark.parametrize("client", ["http1", "aiohttp"])
async def test_engine_key_opens_a_guarded_engine(
    make_plane: MakePlane, aiohttp_server: AiohttpServer, tmp_path: Path, client: str
) -> None:
    seen: list[str | None] = []
    url = await guarded_engine(aiohttp_server, seen)
    keys = tmp_path / "engine-keys.json"
    keys.write_text(json.dumps({"fam@fp16": ENGINE_KEY}))
    plane = await make_plane(upstream_client=client, engine_api_keys_file=keys, api_keys=CLIENT_KEY)
    version = await plane.publisher.publish(make_table([pair_entry("fam", "fp16", urls=[url])]))
    await eventually(lambda: plane.version == version, what="table loaded")
    body = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    resp = await plane.client.post(
        "/v1/chat/completions",
        data=json.dumps(body),
        headers={"Authorization": f"Bearer {CLIENT_KEY}"},
    )
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["choices"][0]["message"]["content"] == "guarded"
    assert seen == [f"Bearer {ENGINE_KEY}"]  # the engine's key, not the client's


async def test_without_the_key_the_engines_401_passes_through(
    make_plane: MakePlane, aiohttp_server: AiohttpServer
) -> None:
    seen: list[str | None] = []
    url = await guarded_engine(aiohttp_server, seen)
    plane = await make_plane(api_keys=CLIENT_KEY)
    version = await plane.publisher.publish(make_table([pair_entry("fam", "fp16", urls=[url])]))
    await eventually(lambda: plane.version == version, what="table loaded")
    body = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    resp = await plane.client.post(
        "/v1/chat/completions",
        data=json.dumps(body),
        headers={"Authorization": f"Bearer {CLIENT_KEY}"},
    )
    assert resp.status == 401
    assert seen == [None]  # the client's key was not forwarded
