"""The in-process harness of the feedback, hostile and admission sections: one family of
simulated engines (`fam@<quant>`) in the routing table their profile gives, and a data plane
from `create_app` on loopback HTTP in the same event loop as the clients.

`family_entry`, `family_table` and `int4_fp16_table` are PURE; `data_plane` and
`static_data_plane` serve.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from bench.common.processes import free_port
from contracts.routing_table import RoutingTable, stamp_table, with_version
from data_plane.app import create_app
from data_plane.settings import (
    AdmissionSettings,
    DataPlaneSettings,
    RedisSettings,
    ScrapeSettings,
    ServerSettings,
    TableSettings,
)
from simulator import Fleet

CATEGORIES = ("chat", "extraction", "code", "math", "reasoning")
CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True, slots=True)
class Profiled:
    """What the profile says of one engine: at load L (this request included) an answer of N
    tokens takes ttft_base_s + N x (tpot_base_s + tpot_per_load_s x L); the same accuracy,
    measured on accuracy_n items, in every category."""

    ttft_base_s: float
    tpot_base_s: float
    tpot_per_load_s: float = 0.0
    ttft_per_input_token_s: float = 0.0  # prefill, added to ttft_base_s per prompt token
    max_profiled_load: int = 64
    accuracy: float = 0.9
    accuracy_n: int = 200


def family_entry(quant: str, url: str, price: float, profiled: Profiled) -> dict[str, Any]:
    """The table entry of `fam@<quant>` served at `url` (one endpoint), at `price` USD per
    million input tokens (twice that per output token)."""
    pair = f"fam@{quant}"
    return {
        "pair": pair, "family": "fam", "quantization": quant,
        "served_model_name": f"sim-{quant}",
        "endpoints": [{"id": f"{pair}#0", "url": url}],
        "context_length": 8192, "chars_per_token": 4.0,
        "input_usd_per_mtok": price, "output_usd_per_mtok": price * 2,
        "price_source": "explicit", "sustained_output_tokens_per_s": 1000.0,
        "latency": {
            "quantile": 0.95, "ttft_base_s": profiled.ttft_base_s,
            "ttft_per_input_token_s": profiled.ttft_per_input_token_s,
            "ttft_per_load_s": 0.0, "tpot_base_s": profiled.tpot_base_s,
            "tpot_per_load_s": profiled.tpot_per_load_s,
            "max_profiled_load": profiled.max_profiled_load,
        },
        "accuracy": dict.fromkeys(CATEGORIES, profiled.accuracy),
        "accuracy_n": dict.fromkeys(CATEGORIES, profiled.accuracy_n),
        "utility": dict.fromkeys(CATEGORIES, 1.0),
        "precision_rank": 0 if quant == "fp16" else 1,
        "reference_cost_usd": (512 * price + 256 * price * 2) / 1e6,
    }  # fmt: skip


def family_table(
    entries: Sequence[dict[str, Any]], policy: Any = None, baselines: Any = None
) -> RoutingTable:
    """Version 1 of a table of these entries (an empty policy and no baselines by default)."""
    data = {
        "version": 0, "created_at": datetime.now(UTC), "policy": policy or {},
        "entries": list(entries), "baselines": baselines or {}, "categories": list(CATEGORIES),
    }  # fmt: skip
    return with_version(stamp_table(data), 1)


def int4_fp16_table(fleet: Fleet, profiled: Profiled) -> RoutingTable:
    """`fam@int4` (price 1) and `fam@fp16` (price 4) on `fleet`'s `sim-int4` and `sim-fp16`,
    both as `profiled`."""
    return family_table(
        [
            family_entry("int4", fleet.url("sim-int4"), 1.0, profiled),
            family_entry("fp16", fleet.url("sim-fp16"), 4.0, profiled),
        ]
    )


@asynccontextmanager
async def data_plane(settings: DataPlaneSettings) -> AsyncIterator[web.Application]:
    """A data plane from `create_app(settings)` listening on 127.0.0.1 at settings.server.port,
    cleaned up on exit."""
    app = create_app(settings)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", settings.server.port).start()
    try:
        yield app
    finally:
        await runner.cleanup()


@asynccontextmanager
async def static_data_plane(
    table: RoutingTable,
    folder: Path,
    instance_id: str,
    admission: AdmissionSettings | None = None,
    scrape: ScrapeSettings | None = None,
) -> AsyncIterator[tuple[str, web.Application]]:
    """A fresh data plane in static mode (the table from a snapshot file in `folder`, no Redis,
    no scraping unless `scrape` says); yields its chat-completions URL and the app."""
    snapshot = folder / f"table-{time.monotonic_ns()}.json"
    snapshot.write_text(table.model_dump_json())
    port = free_port()
    groups: dict[str, Any] = {} if admission is None else {"admission": admission}
    settings = DataPlaneSettings(
        server=ServerSettings(host="127.0.0.1", port=port),
        redis=RedisSettings(url=""), table=TableSettings(snapshot_path=snapshot),
        instance_id=instance_id, log_level="WARNING",
        scrape=scrape or ScrapeSettings(interval_s=0.0), **groups,
    )  # fmt: skip
    async with data_plane(settings) as app:
        yield f"http://127.0.0.1:{port}{CHAT_PATH}", app
