"""The proxies compared in the overhead section, each started pinned to the proxy core.

A target is a context manager that yields the base URL to load; `direct` is nginx itself.
Every proxy gets a fresh process per streaming mode, so one run cannot warm up the next.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.common import litellm_proxy
from bench.common.backend import Backend
from bench.common.machine import Pinning, pinned
from bench.common.processes import free_port, running
from bench.common.tables import synthetic_table

GEARBOX_PAIRS = 12


@dataclass(frozen=True, slots=True)
class RunContext:
    backend: Backend
    pinning: Pinning
    workdir: Path
    stream: bool


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A started target: the base URL to load and the pid whose CPU time is its cost (None
    for nginx itself)."""

    url: str
    pid: int | None


Starter = Callable[[RunContext], contextlib.AbstractContextManager[Endpoint]]


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    label: str  # how the report names it
    model: str  # the body's `model` field
    start: Starter
    expects_route_header: bool = False


@contextlib.contextmanager
def _direct(ctx: RunContext) -> Iterator[Endpoint]:
    yield Endpoint(ctx.backend.url(0, stream=ctx.stream), None)


def _minimal_on(loop: str) -> Starter:
    @contextlib.contextmanager
    def start(ctx: RunContext) -> Iterator[Endpoint]:
        port = free_port()
        upstream = ctx.backend.url(0, stream=ctx.stream)
        args = [sys.executable, "-m", "bench.common.minimal_proxy", "--port", str(port)]
        args += ["--upstream", upstream, "--loop", loop]
        log = ctx.workdir / f"minimal-{loop}.log"
        with running(pinned(args, ctx.pinning.proxy), log, port=port) as proc:
            yield Endpoint(f"http://127.0.0.1:{port}", proc.pid)

    return start


def gearbox_snapshot(ctx: RunContext, n_pairs: int = GEARBOX_PAIRS) -> Path:
    """A routing table of `n_pairs` pairs, pair i served by backend port i (JSON or SSE)."""
    urls = [[ctx.backend.url(i, stream=ctx.stream)] for i in range(n_pairs)]
    path = ctx.workdir / f"table-{'sse' if ctx.stream else 'json'}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(synthetic_table(n_pairs, urls).model_dump_json())
    return path


def gearbox_environment(
    port: int, snapshot: Path, otlp_url: str | None, redis_url: str = ""
) -> dict[str, str]:
    """Static mode by default (no Redis at all; the table from the snapshot file), breakers
    and metrics on (they always are), tracing exported over OTLP/HTTP when `otlp_url` is set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEARBOX_DP_")}
    env.update(
        {
            "GEARBOX_DP_SERVER_HOST": "127.0.0.1",
            "GEARBOX_DP_SERVER_PORT": str(port),
            "GEARBOX_DP_REDIS_URL": redis_url,
            "GEARBOX_DP_TABLE_SNAPSHOT_PATH": str(snapshot),
            "GEARBOX_DP_LOG_LEVEL": "WARNING",
            "GEARBOX_DP_UPSTREAM_CONNECTOR_LIMIT": "4096",
        }
    )
    if otlp_url:
        env.update({"GEARBOX_DP_OTEL_EXPORTER": "otlp", "GEARBOX_DP_OTEL_ENDPOINT": otlp_url})
    return env


@contextlib.contextmanager
def gearbox_process(
    ctx: RunContext,
    env_extra: dict[str, str] | None = None,
    module: str = "data_plane",
    variant: str | None = None,
) -> Iterator[int]:
    """The data plane pinned to the proxy core, with its OTLP sink on the aux cores; yields
    the data plane's pid. `variant`: a `bench.common.dp_variant` A/B variant instead."""
    sink_port, port = free_port(), free_port()
    sink = [sys.executable, "-m", "bench.common.otlp_sink", "--port", str(sink_port)]
    sink_url = f"http://127.0.0.1:{sink_port}/v1/traces"
    env = gearbox_environment(port, gearbox_snapshot(ctx), sink_url)
    env.update(env_extra or {})
    command = [sys.executable, "-m", module, "serve"]
    if variant is not None:
        command = [sys.executable, "-m", "bench.common.dp_variant", variant, "--otlp-url", sink_url]
        command.append("serve")
    args = pinned(command, ctx.pinning.proxy)
    with (
        running(pinned(sink, ctx.pinning.background), ctx.workdir / "otlp.log", port=sink_port),
        running(args, ctx.workdir / "gearbox.log", env=env, port=port) as proc,
    ):
        ctx.workdir.joinpath("gearbox.port").write_text(str(port))
        ctx.workdir.joinpath("otlp.port").write_text(str(sink_port))
        yield proc.pid


@contextlib.contextmanager
def _gearbox(ctx: RunContext) -> Iterator[Endpoint]:
    with gearbox_process(ctx) as pid:
        yield Endpoint(f"http://127.0.0.1:{ctx.workdir.joinpath('gearbox.port').read_text()}", pid)


@contextlib.contextmanager
def _gearbox_asyncio(ctx: RunContext) -> Iterator[Endpoint]:
    with gearbox_process(ctx, {"GEARBOX_DP_EVENT_LOOP": "asyncio"}) as pid:
        yield Endpoint(f"http://127.0.0.1:{ctx.workdir.joinpath('gearbox.port').read_text()}", pid)


def gearbox_ab(env: dict[str, str] | None = None, variant: str | None = None) -> Starter:
    """Gearbox with one hand-written piece replaced by the library it stands in for."""

    @contextlib.contextmanager
    def start(ctx: RunContext) -> Iterator[Endpoint]:
        with gearbox_process(ctx, env, variant=variant) as pid:
            port = ctx.workdir.joinpath("gearbox.port").read_text()
            yield Endpoint(f"http://127.0.0.1:{port}", pid)

    return start


@dataclass(frozen=True, slots=True)
class AB:
    """An A/B row: Gearbox as built (`gearbox`) against `target`, which differs in `piece`."""

    piece: str
    ours: str
    theirs: str
    target: str


AB_ROWS: tuple[AB, ...] = (
    AB("upstream client", "http1 (llhttp via httptools)", "aiohttp's client", "gearbox-aiohttp"),
    AB(
        "span export",
        "telemetry/otlp.py",
        "SDK BatchSpanProcessor + OTLP exporter",
        "gearbox-sdk-spans",
    ),
    AB("metric series", "telemetry/series.py", "plain prometheus_client", "gearbox-plain-metrics"),
)


def exported_spans(ctx: RunContext) -> str | None:
    """What the OTLP sink beside a Gearbox target received, in words (None: no sink)."""
    port_file = ctx.workdir / "otlp.port"
    if not port_file.exists():
        return None
    url = f"http://127.0.0.1:{port_file.read_text()}/stats"
    with urllib.request.urlopen(url, timeout=10) as resp:
        stats = json.loads(resp.read())
    return f"tracing: the OTLP sink received {stats['exports']} exports ({stats['bytes']:,} bytes)"


def _litellm(latency_routing: bool) -> Starter:
    @contextlib.contextmanager
    def start(ctx: RunContext) -> Iterator[Endpoint]:
        exe = litellm_proxy.ensure_venv()
        n = GEARBOX_PAIRS if latency_routing else 1
        urls = [ctx.backend.url(i, stream=ctx.stream) for i in range(n)]
        name = "litellm-latency" if latency_routing else "litellm-single"
        config = litellm_proxy.write_config(ctx.workdir / f"{name}.json", urls, latency_routing)
        port = free_port()
        args = pinned(litellm_proxy.command(exe, config, port), ctx.pinning.proxy)
        env = litellm_proxy.environment(dict(os.environ))
        log = ctx.workdir / f"{name}.log"
        with running(args, log, env=env, port=port, timeout_s=180) as proc:
            yield Endpoint(f"http://127.0.0.1:{port}", proc.pid)

    return start


TARGETS: tuple[Target, ...] = (
    Target("direct", "direct to nginx", "auto", _direct),
    Target("minimal", "minimal aiohttp proxy", "auto", _minimal_on("asyncio")),
    Target(
        "minimal-uvloop",
        "minimal aiohttp proxy on uvloop (reference)",
        "auto",
        _minimal_on("uvloop"),
    ),
    Target("gearbox", f"Gearbox data plane ({GEARBOX_PAIRS} pairs)", "auto", _gearbox, True),
    Target(
        "gearbox-asyncio",
        "Gearbox data plane on the asyncio loop (experiment)",
        "auto",
        _gearbox_asyncio,
        True,
    ),
    Target(
        "gearbox-aiohttp",
        "Gearbox, A/B: aiohttp's client to engines",
        "auto",
        gearbox_ab({"GEARBOX_DP_UPSTREAM_CLIENT": "aiohttp"}),
        True,
    ),
    Target(
        "gearbox-sdk-spans",
        "Gearbox, A/B: the SDK's BatchSpanProcessor + OTLP exporter",
        "auto",
        gearbox_ab(variant="sdk-spans"),
        True,
    ),
    Target(
        "gearbox-plain-metrics",
        "Gearbox, A/B: plain prometheus_client metrics",
        "auto",
        gearbox_ab(variant="plain-metrics"),
        True,
    ),
    Target("litellm", "LiteLLM proxy, one deployment", litellm_proxy.MODEL_NAME, _litellm(False)),
    Target(
        "litellm-latency",
        f"LiteLLM proxy, latency-based router ({GEARBOX_PAIRS} deployments)",
        litellm_proxy.MODEL_NAME,
        _litellm(True),
    ),
)


def request_body(model: str, stream: bool) -> bytes:
    """The chat request every target gets: a system prompt and a ~400-character user turn."""
    body = {
        "model": model,
        "stream": stream,
        "max_tokens": 128,
        "messages": [
            {"role": "system", "content": "You are a concise assistant. " * 4},
            {
                "role": "user",
                "content": "Summarise the trade-offs of serving a model at fp8 versus int4 "
                "for a chat product with a two second latency budget, in three bullet "
                "points, mentioning accuracy, throughput and cost per token. " * 2,
            },
        ],
    }
    return json.dumps(body).encode()


REQUEST_HEADERS = {"X-Latency-Budget-Ms": "20000", "X-Min-Accuracy": "0.5"}


# The near-floor scenario (bench/floors/section.py, issue 12): SLO = floor (by true accuracy)
# and budget both met; the cost is compared with an oracle that knows the true accuracies.
FLOOR_SLO_1X = 0.97
FLOOR_SLO_2X = 0.95
FLOOR_ATTAINMENT = 0.99
FLOOR_COST_VS_ORACLE = 1.25
FLOOR_SLO_WITH_HEADER = 0.98
# Its explicit-floor trace (bench/floors/edge.py, issue 24): floors 1-3 points under some
# pairs' truths, the category sent.
EDGE_PROVABLE_SLO = 0.99  # SLO attainment on the requests some pair provably serves
EDGE_UNPROVABLE_SLO = 0.70  # ... on those some pair truly meets but none provably does
EDGE_GUARANTEED_FLOOR = 0.99  # floor attainment of answers served under the guarantee
EDGE_COST_VS_PROVABLE = 1.1  # cost on provable requests vs the cheapest provable pair
EDGE_NO_HEADER_SLO = 0.95  # overall SLO attainment without X-Task-Category, at 1x and 2x
