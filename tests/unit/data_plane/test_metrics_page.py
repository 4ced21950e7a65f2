"""An engine page read as a stream (`data_plane/sync/metrics_page.py`): whatever the chunking,
the wanted lines come out whole and in page order, unwanted ones never; a page past its byte
limit, too many wanted lines or one absurd wanted line are refusals."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest

from data_plane.progress.engine_probe import token_counters
from data_plane.sync.engine_scrape import queue_depth
from data_plane.sync.metrics_page import (
    MAX_LINE_BYTES,
    MAX_SERIES_LINES,
    PageRefusedError,
    SeriesLines,
    read_series,
)

WANTED = ("vllm:num_requests_waiting", "vllm:num_requests_running")
PAGE = (
    b"# HELP vllm:num_requests_running Requests in model execution batches.\n"
    b"# TYPE vllm:num_requests_running gauge\n"
    b'vllm:num_requests_running{engine="0",model_name="m"} 2.0\n'
    b'vllm:num_requests_running_by_lora{engine="0"} 9.0\n'
    b'vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 4.0\n'
    b'xvllm:num_requests_waiting{model_name="m"} 100.0\n'
    b'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0\n'
    b'vllm:num_requests_waiting{engine="0",model_name="other"} 7.0'  # no final newline
)
EXPECTED = [
    'vllm:num_requests_running{engine="0",model_name="m"} 2.0',
    'vllm:num_requests_running_by_lora{engine="0"} 9.0',
    'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0',
    'vllm:num_requests_waiting{engine="0",model_name="other"} 7.0',
]


def _lines(page: bytes, size: int) -> list[str]:
    wanted = SeriesLines(tuple(p.encode() for p in WANTED))
    for at in range(0, len(page), size):
        wanted.feed(page[at : at + size])
    return wanted.end()


@pytest.mark.parametrize("size", [1, 2, 3, 7, 25, 26, 27, 64, 1000, len(PAGE)])
def test_the_wanted_lines_come_whole_whatever_the_chunks(size: int) -> None:
    assert _lines(PAGE, size) == EXPECTED


def test_the_kept_lines_parse_to_the_served_models_numbers() -> None:
    lines = _lines(PAGE, 5)
    assert queue_depth(lines, "m") == 5.0  # the _by_lora series is another name
    assert queue_depth(lines, "other") == 7.0
    counters = _lines(b"vllm:prompt_tokens_total 3\nvllm:generation_tokens_total 4\n", 3)
    assert counters == []  # not wanted here; the probe asks for its own names


def test_the_probes_names_keep_its_counters() -> None:
    page = (
        b'vllm:prompt_tokens_total{model_name="m"} 30.0\n'
        b'vllm:prompt_tokens_created{model_name="m"} 1.7e9\n'
        b'vllm:generation_tokens_total{model_name="m"} 12.0\n'
    )
    wanted = SeriesLines((b"vllm:prompt_tokens_total", b"vllm:generation_tokens_total"))
    wanted.feed(page)
    counters = token_counters(wanted.end(), "m")
    assert counters == (30.0, 12.0)


def test_too_many_wanted_lines_are_a_refusal() -> None:
    line = b'vllm:num_requests_running{engine="%d"} 1\n'
    page = b"".join(line % i for i in range(MAX_SERIES_LINES + 1))
    wanted = SeriesLines(tuple(p.encode() for p in WANTED))
    with pytest.raises(PageRefusedError) as refused:
        wanted.feed(page)
    assert refused.value.reason == "too_many_series"


def test_a_wanted_line_past_its_bound_is_a_refusal_an_unwanted_one_is_skipped() -> None:
    wanted = SeriesLines(tuple(p.encode() for p in WANTED))
    wanted.feed(b"# HELP " + b"x" * (4 * MAX_LINE_BYTES))  # skipped as it comes, never held
    wanted.feed(b'\nvllm:num_requests_running{a="')
    for _ in range(MAX_LINE_BYTES // 1024 - 1):
        wanted.feed(b"y" * 1024)  # still within the bound: held
    with pytest.raises(PageRefusedError) as refused:
        wanted.feed(b"y" * 1024)
    assert refused.value.reason == "too_large"


async def _chunks(page: bytes, size: int) -> AsyncGenerator[bytes, None]:
    for at in range(0, len(page), size):
        yield page[at : at + size]


async def test_read_series_refuses_a_page_past_its_limit() -> None:
    assert await read_series(_chunks(PAGE, 10), WANTED, len(PAGE)) == EXPECTED
    with pytest.raises(PageRefusedError) as refused:
        await read_series(_chunks(PAGE, 10), WANTED, len(PAGE) - 1)
    assert refused.value.reason == "too_large"
