"""bench/overhead/hotspots.py: py-spy's collapsed stacks summed into the request's parts and
shown in microseconds per request."""

from __future__ import annotations

import pytest

from bench.overhead.hotspots import PARTS, Hotspots, per_request_lines, summarize

MAIN = "main (data_plane/__main__.py:121)"
GATEWAY = "make_gateway.<locals>.gateway (data_plane/serving/middleware.py:117)"
DECIDE = "DecisionStep.decide (data_plane/decision_step.py:198)"
ROUTE = "choose_route (data_plane/decision/choose.py:66)"
SINK = "AiohttpSink.send (data_plane/serving/handlers.py:51)"
LOOP = "run_app (aiohttp/web.py:444)"


def stack(*frames: str, n: int) -> str:
    return ";".join((MAIN, LOOP, *frames)) + f" {n}"


def test_parts_are_inclusive_shares_of_the_main_threads_samples() -> None:
    lines = [
        stack(GATEWAY, DECIDE, ROUTE, n=30),  # inside choose_route, so inside decide too
        stack(GATEWAY, DECIDE, n=10),
        stack(GATEWAY, SINK, n=20),  # any AiohttpSink method counts as the answer
        stack(n=40),  # the loop itself: in no part
        "thread2;busy (data_plane/telemetry/otlp.py:1) 500",  # another thread: not counted
    ]
    found = dict(summarize(lines).parts)
    assert [label for label, _ in summarize(lines).parts] == [label for label, _ in PARTS]
    assert found["Gearbox's handler (middleware.gateway)"] == pytest.approx(0.6)
    assert found["  decision step (DecisionStep.decide)"] == pytest.approx(0.4)
    assert found["    choose_route"] == pytest.approx(0.3)
    assert found["  answer to the client (AiohttpSink methods)"] == pytest.approx(0.2)
    assert found["  walk (Proxy.serve)"] == 0.0


def test_a_frame_counts_once_per_sample_however_deep_it_recurses() -> None:
    found = dict(summarize([stack(GATEWAY, DECIDE, DECIDE, n=5), stack(n=5)]).parts)
    assert found["  decision step (DecisionStep.decide)"] == pytest.approx(0.5)


def test_per_request_lines_turn_shares_into_microseconds() -> None:
    h = Hotspots(
        samples=100,
        by_module=(),
        self_time=(("run_app (aiohttp/web.py:444)", 0.25),),
        inclusive=(),
        parts=(("  decision step (DecisionStep.decide)", 0.2),),
        cpu_us_per_request=500.0,
        requests_per_s=1000.0,
    )
    text = "\n".join(per_request_lines(h))
    assert "500 us of CPU per request at 1,000 req/s" in text
    assert "decision step (DecisionStep.decide) | 100.0 | 20.0% |" in text
    assert "| `run_app (aiohttp/web.py:444)` | 125.0 | 25.0% |" in text
