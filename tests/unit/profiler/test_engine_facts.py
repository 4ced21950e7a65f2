"""engine_facts: vLLM /metrics parsing, facts over a run, engine version detection."""

from __future__ import annotations

import pytest

from profiler.engine.engine_facts import FactsTracker, MetricsSnapshot, parse_metrics, version_from

VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="gemma-bf16"} 3.0
vllm:num_requests_running{engine="0",model_name="other"} 40.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="gemma-bf16"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="gemma-bf16"} 0.25
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="gemma-bf16"} 2.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="gemma-bf16"} 0.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="gemma-bf16"} 7.0
"""


def test_parse_vllm_metrics_for_the_served_model() -> None:
    snap = parse_metrics(VLLM_METRICS, "gemma-bf16")
    assert snap == MetricsSnapshot(
        kv_cache_usage_ratio=0.25, preemptions_total=2.0, requests_waiting=1.0, requests_running=3.0
    )
    # without a model filter the other model's series count too
    assert parse_metrics(VLLM_METRICS).requests_running == 43.0


def test_parse_older_vllm_cache_name_and_missing_series() -> None:
    text = "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.5\n"
    snap = parse_metrics(text, "m")
    assert snap.kv_cache_usage_ratio == 0.5
    assert snap.preemptions_total is None
    assert snap.requests_running is None
    assert parse_metrics("", "m") == MetricsSnapshot()


def test_malformed_metrics_raise_value_error() -> None:
    with pytest.raises(ValueError, match="not Prometheus exposition text"):
        parse_metrics("this is { not prometheus\n", "m")


def test_tracker_reports_maxima_and_preemption_delta() -> None:
    tracker = FactsTracker(
        [
            MetricsSnapshot(0.1, 5.0, 0.0, 1.0),
            MetricsSnapshot(0.7, 9.0, 6.0, 8.0),
            MetricsSnapshot(0.3, 12.0, 2.0, 4.0),
        ]
    )
    facts = tracker.engine_facts()
    assert facts.preemptions_total == 7
    assert facts.max_requests_waiting == 6
    assert facts.max_requests_running == 8
    assert tracker.memory().kv_cache_usage_ratio_max == 0.7


def test_tracker_without_scrapes_has_no_facts() -> None:
    tracker = FactsTracker([])
    assert tracker.engine_facts().preemptions_total is None
    assert tracker.engine_facts().max_requests_running is None
    assert tracker.memory().kv_cache_usage_ratio_max is None


def test_engine_version_from_version_endpoint_or_metrics_label() -> None:
    assert version_from("/version", '{"version": "0.32.0"}') == "0.32.0"
    assert version_from("/version", '{"v": 1}') is None
    assert version_from("/version", "<html>") is None
    info = '# TYPE vllm:build_info gauge\nvllm:build_info{version="0.31.1"} 1.0\n'
    assert version_from("/metrics", info) == "0.31.1"
    assert version_from("/metrics", VLLM_METRICS) is None
    assert version_from("/metrics", "{{{") is None
