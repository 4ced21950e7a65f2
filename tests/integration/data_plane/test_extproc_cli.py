"""`python -m data_plane extproc` as a real process: the table from a snapshot file, a real
gRPC client sending ProcessingRequests, probes and metrics on the HTTP side."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import aiohttp
import grpc
import pytest

from data_plane.gateway import protos as ext_proc
from tests.component.data_plane.fakes import two_pair_table
from tests.support.extproc_client import ExternalProcessorStub
from tests.support.redis_server import free_port
from tests.support.waiting import until_ready

pytestmark = pytest.mark.integration


async def test_extproc_command_routes_from_a_snapshot(tmp_path: Path) -> None:
    snapshot = tmp_path / "table.json"
    table = two_pair_table(version=9)
    snapshot.write_text(table.model_dump_json(), encoding="utf-8")
    http_port, grpc_port = free_port(), free_port()
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "data_plane", "extproc", "--server-host", "127.0.0.1"),
        *("--server-port", str(http_port), "--extproc-port", str(grpc_port), "--redis-url", ""),
        *("--table-snapshot-path", str(snapshot), "--extproc-pair-header", "x-pool"),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with aiohttp.ClientSession() as session:
            await until_ready(session, f"http://127.0.0.1:{http_port}", 9, what="extproc ready")
            pair = table.entries[0]
            body = json.dumps(
                {"model": pair.pair, "messages": [{"role": "user", "content": "hi"}]}
            ).encode()
            headers = ext_proc.HeaderMap(
                headers=[
                    ext_proc.HeaderValue(key=":path", raw_value=b"/v1/chat/completions"),
                    ext_proc.HeaderValue(key=":method", raw_value=b"POST"),
                ]
            )
            async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                call = ExternalProcessorStub(channel).Process()
                await call.write(
                    ext_proc.ProcessingRequest(
                        request_headers=ext_proc.HttpHeaders(headers=headers)
                    )
                )
                first = await call.read()  # buffered (the default): headers answered at once
                await call.write(
                    ext_proc.ProcessingRequest(
                        request_body=ext_proc.HttpBody(body=body, end_of_stream=True)
                    )
                )
                second = await call.read()
                await call.done_writing()
            assert first.WhichOneof("response") == "request_headers"
            common = second.request_body.response
            set_headers = {
                o.header.key: o.header.raw_value.decode()
                for o in common.header_mutation.set_headers
            }
            assert set_headers["x-pool"] == pair.pair
            assert json.loads(common.body_mutation.body)["model"] == pair.served_model_name
            async with session.get(f"http://127.0.0.1:{http_port}/metrics") as resp:
                text = await resp.text()
            assert f'gearbox_routing_decisions_total{{pair="{pair.pair}"' in text
    finally:
        proc.terminate()
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    messages = [json.loads(x)["message"] for x in stderr.decode().splitlines() if x[:1] == "{"]
    assert any("routing table v9 from snapshot" in m for m in messages)
    assert any("gateway mode up" in m for m in messages)
