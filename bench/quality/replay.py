"""Open-loop replay of a trace through the data plane (a separate, pinned process).

Requests leave at their trace time divided by the load factor, whatever the server does;
latency runs from the scheduled time. Each answer is written as one JSON line: status,
latency, the pair that served it (`X-Route-Pair`), the answer text and the usage.
`python -m bench.quality.replay --trace T.jsonl --models M.json --url URL --load 2 --out O.jsonl`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector

REQUEST_TIMEOUT_S = 60.0


def request_parts(req: dict[str, Any], model: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Body and headers of one trace request; the same for every policy but `model`."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": req["prompt"]}],
        "max_tokens": req["max_tokens"],
        "temperature": 0,
        "ignore_eos": True,  # vLLM extension: decode exactly max_tokens tokens
    }
    headers = {
        "X-Latency-Budget-Ms": str(req["budget_ms"]),
        "X-Min-Accuracy": f"{req['min_accuracy']:.2f}",
        "X-Task-Category": req["category"],
    }
    for name in req.get("omit_headers", ()):  # e.g. a client that sends no category
        headers.pop(name, None)
    return body, headers


async def _one(
    session: ClientSession, url: str, req: dict[str, Any], model: str, scheduled: float
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    body, headers = request_parts(req, model)
    out: dict[str, Any] = {"id": req["id"], "status": 0, "pair": None, "text": "", "error": None}
    try:
        async with session.post(url, json=body, headers=headers) as resp:
            data = await resp.read()
            out["status"] = resp.status
            out["pair"] = resp.headers.get("X-Route-Pair")
            out["reason"] = resp.headers.get("X-Route-Reason")
            if resp.status == 200:
                parsed = json.loads(data)
                out["text"] = parsed["choices"][0]["message"]["content"] or ""
                out["usage"] = parsed.get("usage") or {}
            else:
                out["error"] = data[:300].decode(errors="replace")
    except (ClientError, TimeoutError, ValueError, KeyError) as err:
        out["error"] = f"{type(err).__name__}: {err}"
    out["latency_s"] = loop.time() - scheduled
    return out


async def watch_lag(stop: asyncio.Event, lags_s: list[float], tick_s: float = 0.01) -> None:
    """How late this process's event loop wakes up: a stall of the machine (or of this
    client) shows here, so a budget missed for that reason can be told apart."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        before = loop.time()
        await asyncio.sleep(tick_s)
        lags_s.append(loop.time() - before - tick_s)


async def replay(
    url: str, trace: list[dict[str, Any]], models: list[str], load: float, lags_s: list[float]
) -> list[dict[str, Any]]:
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch_lag(stop, lags_s))
    try:
        return await _replay(url, trace, models, load)
    finally:
        stop.set()
        await watcher


async def _replay(
    url: str, trace: list[dict[str, Any]], models: list[str], load: float
) -> list[dict[str, Any]]:
    loop = asyncio.get_running_loop()
    connector = TCPConnector(limit=4096, limit_per_host=4096)
    timeout = ClientTimeout(total=REQUEST_TIMEOUT_S, sock_connect=5.0)
    async with ClientSession(connector=connector, timeout=timeout) as session:
        start = loop.time() + 0.2
        tasks = []
        for req, model in zip(trace, models, strict=True):
            scheduled = start + req["at_s"] / load
            delay = scheduled - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(session, url, req, model, scheduled)))
        return list(await asyncio.gather(*tasks))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.replay", description=__doc__)
    parser.add_argument("--trace", type=Path, required=True)
    parser.add_argument("--models", type=Path, required=True, help="JSON list, one per request")
    parser.add_argument("--url", required=True, help="chat completions URL")
    parser.add_argument("--load", type=float, default=1.0, help="multiple of the nominal rate")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    trace = [json.loads(line) for line in args.trace.read_text().splitlines() if line]
    models = json.loads(args.models.read_text())
    lags: list[float] = []
    results = asyncio.run(replay(args.url, trace, models, args.load, lags))
    args.out.write_text("".join(json.dumps(r) + "\n" for r in results))
    client = {
        "max_lag_ms": max(lags, default=0.0) * 1000,
        "lags_over_100ms": sum(x > 0.1 for x in lags),
    }
    args.out.with_suffix(".client.json").write_text(json.dumps(client))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
