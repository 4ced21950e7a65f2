"""Engine facts: what the endpoint serves (`/v1/models`), its version (`/version`, `/metrics`)
and its queue, KV-cache and preemption counters (vLLM `/metrics`, polled during the run).

Adapter around the client: the preflight turns an unreachable endpoint or an unknown model into
ONE `EndpointError`; the metrics watcher never fails the run (facts are optional).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from contracts.profile_report import EngineFacts, Memory
from contracts.tokenizer_ref import TokenizerRef
from profiler.engine.client import EngineClient
from profiler.engine.connect_words import connect_reason, v1_hint
from profiler.engine.tokenizer_file import find_tokenizer
from profiler.errors import EndpointError

logger = logging.getLogger(__name__)

_KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # new name, old name
_PREEMPTIONS = "vllm:num_preemptions_total"
_WAITING = "vllm:num_requests_waiting"
_RUNNING = "vllm:num_requests_running"


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """One scrape, summed over the served model's series; None = not exported."""

    kv_cache_usage_ratio: float | None = None
    preemptions_total: float | None = None
    requests_waiting: float | None = None
    requests_running: float | None = None


def parse_metrics(text: str, model: str | None = None) -> MetricsSnapshot:
    """The vLLM series we use from Prometheus text; series of another `model_name` are
    skipped. Raises ValueError on text that is not Prometheus exposition format."""
    found: dict[str, list[float]] = {}
    try:
        samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    except ValueError as err:
        raise ValueError(f"not Prometheus exposition text: {err}") from err
    for sample in samples:
        served = sample.labels.get("model_name")
        if model is None or served is None or served == model:
            found.setdefault(sample.name, []).append(float(sample.value))
    usage = [v for name in _KV_USAGE for v in found.get(name, [])]
    return MetricsSnapshot(
        kv_cache_usage_ratio=min(max(usage), 1.0) if usage else None,
        preemptions_total=_sum(found.get(_PREEMPTIONS)),
        requests_waiting=_sum(found.get(_WAITING)),
        requests_running=_sum(found.get(_RUNNING)),
    )


def _sum(values: list[float] | None) -> float | None:
    return sum(values) if values else None


def _max(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


@dataclass(slots=True)
class FactsTracker:
    """Scrapes seen during a run; facts are maxima (queue, KV use) or deltas (preemptions)."""

    snapshots: list[MetricsSnapshot]

    def engine_facts(self) -> EngineFacts:
        preempt = [s.preemptions_total for s in self.snapshots if s.preemptions_total is not None]
        waiting = _max(s.requests_waiting for s in self.snapshots)
        running = _max(s.requests_running for s in self.snapshots)
        return EngineFacts(
            preemptions_total=round(preempt[-1] - preempt[0]) if preempt else None,
            max_requests_waiting=None if waiting is None else round(waiting),
            max_requests_running=None if running is None else round(running),
        )

    def memory(self) -> Memory:
        return Memory(kv_cache_usage_ratio_max=_max(s.kv_cache_usage_ratio for s in self.snapshots))


async def watch_metrics(client: EngineClient, tracker: FactsTracker, interval_s: float) -> None:
    """Scrape `/metrics` every `interval_s` until cancelled. An endpoint without usable
    metrics is logged once and left alone: engine facts are optional in a report."""
    while True:
        try:
            status, body = await client.fetch("/metrics", timeout_s=max(interval_s, 2.0))
            if status != 200:
                logger.warning("no engine facts: %s/metrics answered %s", client.base_url, status)
                return
            tracker.snapshots.append(parse_metrics(body.decode(errors="replace"), client.model))
        except ValueError:
            logger.warning("no engine facts: %s/metrics is not Prometheus text", client.base_url)
            return
        except (aiohttp.ClientError, TimeoutError) as err:
            logger.debug("metrics scrape failed: %s", err)
        await asyncio.sleep(interval_s)


@dataclass(frozen=True, slots=True)
class EndpointInfo:
    """What the preflight learned about one endpoint."""

    url: str
    context_length: int | None
    engine_version: str | None
    tokenizer: TokenizerRef | None = None  # the checkpoint's tokenizer file, read here


async def preflight(client: EngineClient, timeout_s: float) -> EndpointInfo:
    """Check that the endpoint answers and serves `client.model`; read its context length and
    engine version, and the served checkpoint's tokenizer file where this machine can read it
    (`root`). Raises one `EndpointError` that says what is wrong and where."""
    url = client.base_url
    try:
        status, body = await client.fetch("/v1/models", timeout_s)
    except aiohttp.ClientConnectionError as err:
        raise EndpointError(f"cannot reach {url}: {connect_reason(err)}") from err
    except TimeoutError as err:
        raise EndpointError(f"{url} did not answer /v1/models within {timeout_s:g}s") from err
    except aiohttp.ClientError as err:
        raise EndpointError(f"cannot talk to {url}: {err}") from err
    if status != 200:
        raise EndpointError(
            f"{url}/v1/models answered HTTP {status}; is it an OpenAI server?"
            + v1_hint(url, "--endpoint")
        )
    models = _model_cards(body)
    if models is None:
        raise EndpointError(f"{url}/v1/models is not an OpenAI model list")
    card = next((m for m in models if m.get("id") == client.model), None)
    if card is None:
        served = ", ".join(sorted(str(m.get("id")) for m in models)) or "nothing"
        raise EndpointError(f"{url} does not serve model {client.model!r}; it serves: {served}")
    length = card.get("max_model_len")
    root = card.get("root")
    return EndpointInfo(
        url=url,
        context_length=length if isinstance(length, int) and length > 0 else None,
        engine_version=await _engine_version(client, timeout_s),
        tokenizer=await find_tokenizer(url, root if isinstance(root, str) else None),
    )


def _model_cards(body: bytes) -> list[dict[str, Any]] | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    cards = data.get("data") if isinstance(data, dict) else None
    if not isinstance(cards, list):
        return None
    return [c for c in cards if isinstance(c, dict)]


async def _engine_version(client: EngineClient, timeout_s: float) -> str | None:
    """vLLM's `/version` ({"version": ...}), else a `version` label in `/metrics`."""
    for path in ("/version", "/metrics"):
        try:
            status, body = await client.fetch(path, timeout_s)
        except (aiohttp.ClientError, TimeoutError):
            continue
        if status == 200:
            found = version_from(path, body.decode(errors="replace"))
            if found:
                return found
    return None


def version_from(path: str, text: str) -> str | None:
    """The engine version in a `/version` JSON body or a `/metrics` page, if it names one."""
    if path == "/version":
        try:
            data = json.loads(text)
        except ValueError:
            return None
        version = data.get("version") if isinstance(data, dict) else None
        return str(version)[:100] if isinstance(version, str) and version else None
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError:
        return None
    for family in families:
        for sample in family.samples:
            if sample.labels.get("version") and sample.name.startswith("vllm"):
                return sample.labels["version"][:100]
    return None
