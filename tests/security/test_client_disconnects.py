"""A client that goes away halfway through sending its body is a cancelled request: not an
internal error, not an ERROR log line with a traceback."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from tests.reliability.conftest import StartDataPlane
from tests.reliability.stack import CHEAP, PRICEY, dp_settings, fleet_table, metric
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration


async def test_client_gone_mid_body_is_counted_as_cancelled_not_internal_error(
    tmp_path: Path, start_data_plane: StartDataPlane, caplog: pytest.LogCaptureFixture
) -> None:
    snapshot = tmp_path / "table.json"
    urls = {q: ["http://127.0.0.1:9"] for q in (CHEAP, PRICEY)}  # never reached
    snapshot.write_text(fleet_table(urls).model_dump_json(), encoding="utf-8")
    plane = await start_data_plane(dp_settings("", "gone", snapshot))
    host, port = plane.url.split("://", 1)[1].split(":")
    caplog.set_level(logging.WARNING)
    for _ in range(3):
        _reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n"
            b'Content-Length: 5000\r\n\r\n{"model": "auto", "messages": ['
        )
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.close()  # gone before the body is complete
        await writer.wait_closed()

    def counted(outcome: str) -> float:
        return metric(
            plane.app, "gearbox_requests_total", route="chat_completions", outcome=outcome
        )

    await eventually(
        lambda: counted("cancelled") + counted("internal_error") >= 3,
        what="the three requests were accounted",
    )
    assert counted("internal_error") == 0
    assert counted("cancelled") == 3
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
