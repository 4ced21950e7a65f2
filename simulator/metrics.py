"""vLLM's Prometheus metrics for one simulated engine (one CollectorRegistry per pair).

The names, labels (`engine`, `model_name`) and buckets are vLLM's, so the router's scraper and
dashboards read the simulator exactly like a real engine. This module only records numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase

LABELS = ("engine", "model_name")
M = TypeVar("M", bound=MetricWrapperBase)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)  # fmt: skip
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip


@dataclass(frozen=True, slots=True)
class EngineGauges:
    """Callbacks that read the engine's live state at scrape time."""

    running: Callable[[], float]
    waiting: Callable[[], float]
    kv_cache_usage: Callable[[], float]


@dataclass(frozen=True, slots=True)
class CacheFacts:
    """What `vllm:cache_config_info` reports (the profiler reads memory facts from it)."""

    block_size: int
    num_gpu_blocks: int
    cache_dtype: str
    gpu_memory_utilization: float = 0.9


class VllmMetrics:
    """The vLLM metric set of one engine, bound to its labels."""

    def __init__(self, model_name: str, gauges: EngineGauges, cache: CacheFacts) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = {"engine": "0", "model_name": model_name}
        self._labels = labels

        def bind(metric: M) -> M:
            return metric.labels(**labels)

        reg = self.registry
        for name, doc, read in (
            ("vllm:num_requests_running", "Requests in model execution batches.", gauges.running),
            ("vllm:num_requests_waiting", "Requests waiting to be processed.", gauges.waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
             gauges.kv_cache_usage),
        ):  # fmt: skip
            bind(Gauge(name, doc, LABELS, registry=reg)).set_function(read)
        self.preemptions = bind(
            Counter("vllm:num_preemptions", "Cumulative preemptions.", LABELS, registry=reg)
        )
        self.prompt_tokens = bind(
            Counter("vllm:prompt_tokens", "Prefill tokens processed.", LABELS, registry=reg)
        )
        self.generation_tokens = bind(
            Counter("vllm:generation_tokens", "Generation tokens.", LABELS, registry=reg)
        )
        self._success = Counter(
            "vllm:request_success",
            "Finished requests by finish reason.",
            (*LABELS, "finished_reason"),
            registry=reg,
        )
        info = {
            "engine": "0",
            "block_size": str(cache.block_size),
            "cache_dtype": cache.cache_dtype,
            "gpu_memory_utilization": str(cache.gpu_memory_utilization),
            "num_gpu_blocks": str(cache.num_gpu_blocks),
        }
        Gauge("vllm:cache_config_info", "Information of the KV cache config.", list(info),
              registry=reg).labels(**info).set(1)  # fmt: skip
        self.ttft = bind(self._histogram("vllm:time_to_first_token_seconds", TTFT_BUCKETS))
        self.itl = bind(self._histogram("vllm:inter_token_latency_seconds", ITL_BUCKETS))
        self.e2e = bind(self._histogram("vllm:e2e_request_latency_seconds", REQUEST_BUCKETS))
        self.queue = bind(self._histogram("vllm:request_queue_time_seconds", REQUEST_BUCKETS))

    def _histogram(self, name: str, buckets: tuple[float, ...]) -> Histogram:
        doc = f"Histogram of {name.removeprefix('vllm:').replace('_', ' ')}."
        return Histogram(name, doc, LABELS, buckets=buckets, registry=self.registry)

    def finished(self, reason: str) -> None:
        """Count one finished request (`stop`, `length` or `abort`)."""
        self._success.labels(**self._labels, finished_reason=reason).inc()

    def render(self) -> bytes:
        """Prometheus text exposition of this engine's metrics."""
        return generate_latest(self.registry)
