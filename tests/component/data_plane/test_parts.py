"""The small parts on their own: settings and CLI, JSON logs, quality checks, usage, scraping,
load tracking and the live-state document."""

from __future__ import annotations

import asyncio
import io
import json
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from pydantic import ValidationError

from contracts.knobs import knob_name
from data_plane.__main__ import build_parser, load_settings, main, new_event_loop
from data_plane.decision.compile import compile_table
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.serving.quality import Degeneracy, check_answer, is_runaway_repetition
from data_plane.serving.usage import (
    WHOLE_BODY_BYTES,
    Usage,
    _last_usage,
    cost_usd,
    find_usage,
    read_usage,
)
from data_plane.settings import DataPlaneSettings, OtelSettings
from data_plane.sync.engine_scrape import parse_queue_depth
from data_plane.sync.live_state import build_state
from data_plane.table_store import TableStore
from data_plane.telemetry.logs import JsonFormatter, configure_logging
from data_plane.telemetry.metrics import DataPlaneMetrics
from data_plane.telemetry.traffic import TrafficStats
from tests.component.data_plane.fakes import chat_json, sse_chunks, two_pair_table

# --- settings and CLI -------------------------------------------------------------------------


def test_settings_read_env_and_split_api_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEARBOX_DP_SERVER_API_KEYS", "first-key-1, second-key-2")
    monkeypatch.setenv("GEARBOX_DP_SERVER_PORT", "9123")
    s = DataPlaneSettings()
    assert [k.get_secret_value() for k in s.server.api_keys] == ["first-key-1", "second-key-2"]
    assert s.server.port == 9123
    assert "first-key-1" not in repr(s)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("server_port", "-1"),
        ("server_api_keys", "short"),
        ("redis_key_prefix", "has space"),
        ("otel_exporter", "jaeger"),
        ("proxy_max_attempts", "0"),
        ("upstream_client", "curl"),
        ("event_loop", "trio"),
        ("gc_young_threshold", "-1"),
        ("otel_sampler", "sometimes"),
        ("otel_sampler_arg", "1.5"),
        ("otel_otlp_headers", "no-equals-sign"),
        ("otel_otlp_compression", "zstd"),
    ],
)
def test_bad_settings_name_the_field(field: str, value: str) -> None:
    with pytest.raises(ValidationError) as err:
        DataPlaneSettings.model_validate({field: value})
    assert knob_name(DataPlaneSettings, tuple(err.value.errors()[0]["loc"])) == field


def test_settings_reject_inconsistent_values() -> None:
    with pytest.raises(ValidationError, match="otel_endpoint"):
        DataPlaneSettings(otel=OtelSettings(exporter="otlp"))
    with pytest.raises(ValidationError, match="breaker_max_cooldown_s"):
        DataPlaneSettings.model_validate({"breaker_cooldown_s": 10, "breaker_max_cooldown_s": 5})


def test_cli_flags_override_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEARBOX_DP_SERVER_PORT", "1234")
    monkeypatch.setenv("GEARBOX_DP_INSTANCE_ID", "from-env")
    args = ["serve", "--server-port", "9999", "--scrape-interval-s", "2.5"]
    s = load_settings(build_parser().parse_args(args))
    assert (s.server.port, s.scrape.interval_s, s.instance_id) == (9999, 2.5, "from-env")


def test_opentelemetry_variables_are_settings_under_their_own_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    defaults = DataPlaneSettings().otel
    assert (defaults.sampler, defaults.sampler_arg) == (
        "parentbased_always_on",
        1.0,
    )
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%20b, X-Tenant=t1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "2500")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,team=ml%2Fops")
    monkeypatch.setenv("GEARBOX_DP_OTEL_EXPORTER", "otlp")
    s = DataPlaneSettings().otel
    assert (s.sampler, s.sampler_arg) == ("parentbased_traceidratio", 0.1)
    assert s.otlp_traces_url == "http://collector:4318/v1/traces"
    assert s.otlp_headers == (("api-key", "a b"), ("X-Tenant", "t1"))
    assert (s.otlp_timeout_ms, s.otlp_compression) == (2500.0, "gzip")
    assert s.resource_attributes == (("deployment.environment", "prod"), ("team", "ml/ops"))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4318/v1/t")
    assert DataPlaneSettings().otel.otlp_traces_url == "http://traces:4318/v1/t"
    monkeypatch.setenv("GEARBOX_DP_OTEL_ENDPOINT", "http://ours:4318/v1/traces")
    assert DataPlaneSettings().otel.otlp_traces_url == "http://ours:4318/v1/traces"
    args = build_parser().parse_args(["serve", "--otel-sampler", "always_off"])
    assert load_settings(args).otel.sampler == "always_off"  # a flag wins over the env


@pytest.mark.parametrize("kind", ["uvloop", "asyncio"])
def test_the_event_loop_is_a_setting(kind: str) -> None:
    assert DataPlaneSettings().event_loop == "uvloop"
    s = load_settings(build_parser().parse_args(["serve", "--event-loop", kind]))
    loop = new_event_loop(s.event_loop)
    try:
        assert type(loop).__module__.split(".")[0] == kind

        async def answer() -> int:
            await asyncio.sleep(0)
            return 42

        assert loop.run_until_complete(answer()) == 42
    finally:
        loop.close()
    with pytest.raises(ValidationError, match="event_loop"):
        DataPlaneSettings.model_validate({"event_loop": "trio"})


def test_cli_has_no_api_key_flag() -> None:
    for flag in ("--api-keys", "--server-api-keys"):  # nor under the name before issue 31
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", flag, "abcdefgh"])
    with pytest.raises(SystemExit):  # nor one for the /metrics token
        build_parser().parse_args(["serve", "--metrics-token", "abcdefgh"])
    # The keys file is a path, not a secret: a flag.
    args = build_parser().parse_args(["serve", "--server-api-keys-file", "/etc/keys.json"])
    assert args.server_api_keys_file == "/etc/keys.json"


def test_cli_reports_bad_values_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--server-port", "many"]) == 2
    assert "invalid setting server_port" in capsys.readouterr().err


# --- logs -------------------------------------------------------------------------------------


def test_json_logs_carry_only_allowed_fields() -> None:
    record = logging.LogRecord(
        "data_plane.serving.proxy", logging.WARNING, __file__, 1, "fell back %s", ("x",), None
    )
    record.__dict__.update(
        {"pair": "fam@fp16", "request_id": "r1", "prompt": "secret prompt", "authorization": "k"}
    )
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "fell back x"
    assert line["pair"] == "fam@fp16"
    assert line["request_id"] == "r1"
    assert line["level"] == "WARNING"
    assert "prompt" not in line
    assert "authorization" not in line


def test_configure_logging_writes_json_lines() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        configure_logging("INFO", stream)
        logging.getLogger("data_plane.test").info("table v%s", 3, extra={"table_version": 3})
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
    line = json.loads(stream.getvalue().strip().splitlines()[-1])
    assert line["message"] == "table v3"
    assert line["table_version"] == 3


# --- quality guard checks ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "wants_json", "expected"),
    [
        ("Paris.", False, None),
        ("", False, Degeneracy.EMPTY),
        ("   \n", False, Degeneracy.EMPTY),
        ("la " * 200, False, Degeneracy.REPETITION),
        ("not json", True, Degeneracy.INVALID_JSON),
        ('{"city": "Paris"}', True, None),
        ("not json", False, None),
    ],
)
def test_check_answer(content: str, wants_json: bool, expected: Degeneracy | None) -> None:
    assert check_answer(chat_json(content), wants_json) == expected


def test_check_answer_leaves_odd_bodies_alone() -> None:
    assert check_answer(b"not json", False) is None
    assert check_answer(b'{"choices": []}', False) is None
    tool_call = {"choices": [{"message": {"content": None, "tool_calls": [{"id": "1"}]}}]}
    assert check_answer(json.dumps(tool_call).encode(), False) is None
    completion = {"choices": [{"text": ""}]}
    assert check_answer(json.dumps(completion).encode(), False) is Degeneracy.EMPTY


@pytest.mark.parametrize(
    "body",
    [
        chat_json("Paris."),
        chat_json(""),
        chat_json("la " * 200),
        chat_json("not json"),
        b'{"choices": []}',
        b'{"usage": {"prompt_tokens": 3}, "choices": [{"text": ""}]}',
        b'{"usage": {"prompt_tokens": 3}, "x": {"usage": {}}, "choices": [{"text": ""}]}',
        b"not json",
        b'{"usage": 1',
    ],
)
def test_an_answer_decoded_once_is_judged_and_counted_as_if_decoded_twice(body: bytes) -> None:
    """The attempt decodes a small answer whole to read its usage (`read_usage`) and the
    guard judges that decoded value (issue 33): the same usage as `find_usage`, the same
    verdict as decoding the body afresh, and no decoded value where the body was not
    decoded whole (then the guard decodes it itself)."""
    usage, doc = read_usage(body)
    assert usage == find_usage(body)
    single = body.count(b'"usage"') == 1 and body.startswith(b"{") and body.endswith(b"}")
    assert (doc is not None) == single
    for wants_json in (False, True):
        assert check_answer(body, wants_json, doc) == check_answer(body, wants_json)


def test_natural_text_is_not_repetition() -> None:
    text = " ".join(
        f"Sentence {i} talks about item {i * 7 % 13} and its colour." for i in range(40)
    )
    assert not is_runaway_repetition(text)
    assert is_runaway_repetition(text + " and again" * 120)


# --- usage ------------------------------------------------------------------------------------


def test_usage_from_a_body_and_from_a_stream_tail() -> None:
    assert find_usage(chat_json(prompt_tokens=11, completion_tokens=4)) == Usage(11, 4)
    tail = b"".join(sse_chunks(["a", "b", "c"]))
    assert find_usage(tail) == Usage(5, 3)
    no_usage = b"".join(sse_chunks(["a"], usage=False))
    assert find_usage(no_usage) is None
    assert find_usage(b'{"usage": null, "x": {"usage": {"prompt_tokens": 2}}}') == Usage(2, 0)
    assert find_usage(b'{"usage": {"prompt_tokens": true}}') is None


def test_usage_whole_body_shortcut_agrees_with_the_tail_search() -> None:
    """A small body with one "usage" key is decoded whole; every other case, and every value
    the shortcut cannot read as a usage, is left to the tail search."""
    nested = b'{"choices": [{"x": {"usage": {"prompt_tokens": 3, "completion_tokens": 1}}}]}'
    huge_int = b'{"usage": {"prompt_tokens": 18446744073709551617, "completion_tokens": 1}}'
    padded = b'{"pad": "' + b"x" * WHOLE_BODY_BYTES + b'", "usage": {"prompt_tokens": 7}}'
    cases = [
        chat_json(prompt_tokens=11, completion_tokens=4),
        nested,
        huge_int,
        padded,
        b'{"usage": {"prompt_tokens": 1, "completion_tokens": 2}, "usage": null}',
        b'{"usage": {"prompt_tokens": NaN}}',
        b'{"usage": {"prompt_tokens": 2, "completion_tokens": 2}',  # truncated
        b'[{"usage": {"prompt_tokens": 2}}]',
    ]
    for body in cases:
        assert find_usage(body) == _last_usage(body), body[:60]
    assert find_usage(nested) == Usage(3, 1)
    assert find_usage(huge_int) == Usage(2**64 + 1, 1)
    assert find_usage(padded) == Usage(7, 0)


# A property, not a timing: a loaded machine must not fail it by slowness.
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(
        st.sampled_from(["usage", "id", "choices", "x"]),
        st.one_of(
            st.none(),
            st.integers(-5, 2**70),
            st.dictionaries(
                st.sampled_from(["prompt_tokens", "completion_tokens", "usage"]),
                st.one_of(st.integers(-3, 2**70), st.booleans(), st.none(), st.text(max_size=3)),
            ),
        ),
    )
)
def test_usage_is_the_tail_searchs_whatever_the_body(doc: dict[str, object]) -> None:
    body = json.dumps(doc).encode()
    assert find_usage(body) == _last_usage(body)


def test_cost_uses_per_token_prices() -> None:
    table = compile_table(two_pair_table())
    fp16 = next(p for p in table.pairs if p.pair == "fam@fp16")
    assert cost_usd(fp16, Usage(1_000_000, 0)) == pytest.approx(4.0)
    assert cost_usd(fp16, Usage(0, 1_000_000)) == pytest.approx(8.0)


# --- scraping, load, live state ---------------------------------------------------------------

VLLM_METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.4
"""


def test_queue_depth_is_waiting_plus_running() -> None:
    assert parse_queue_depth(VLLM_METRICS) == 5.0
    assert parse_queue_depth(VLLM_METRICS, "m") == 5.0
    assert parse_queue_depth("# nothing here\nother_metric 1\n") is None


TWO_MODELS = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="0",model_name="other"} 7.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting{engine="0",model_name="other"} 11.0
vllm:num_requests_waiting{engine="1"} 1.0
"""


def test_queue_depth_counts_only_the_served_model() -> None:
    assert parse_queue_depth(TWO_MODELS, "m") == 6.0  # 3 + 2 + the unlabelled series
    assert parse_queue_depth(TWO_MODELS, "other") == 19.0
    assert parse_queue_depth(TWO_MODELS, "absent") == 1.0
    assert parse_queue_depth(TWO_MODELS) == 24.0


def test_default_settings_scrape_engines() -> None:
    assert DataPlaneSettings().scrape.interval_s > 0


def test_load_tracks_in_flight_and_queue() -> None:
    tracker = LoadTracker()
    tracker.acquire("a")
    tracker.acquire("a")
    tracker.set_queue_depth("a", 4)  # the engine's 4 include our 2: 2 from elsewhere
    assert tracker.load["a"] == 4
    tracker.release("a")
    assert tracker.load["a"] == 3
    tracker.acquire("a")  # sent after the scrape: not in its count
    assert tracker.load["a"] == 4
    tracker.forget(set())
    assert tracker.load["a"] == 2
    assert tracker.in_flight_all() == {"a": 2}


def test_the_in_flight_gauge_is_read_from_the_tracker_at_scrape_time() -> None:
    metrics = DataPlaneMetrics("v", "s")
    tracker = LoadTracker()
    metrics.watch_in_flight(tracker.in_flight_all)
    tracker.acquire("e0")
    tracker.acquire("e0")
    tracker.acquire("e1")
    tracker.release("e1")
    text = generate_latest(metrics.registry)
    assert b'gearbox_in_flight_requests{endpoint="e0"} 2.0' in text
    assert b'gearbox_in_flight_requests{endpoint="e1"} 0.0' in text
    tracker.release("e0")
    assert b'gearbox_in_flight_requests{endpoint="e0"} 1.0' in generate_latest(metrics.registry)


def test_own_requests_are_not_counted_twice() -> None:
    tracker = LoadTracker()
    for _ in range(3):
        tracker.acquire("a")
    tracker.set_queue_depth("a", 3, own=3)  # the engine runs exactly our three
    assert tracker.load["a"] == 3
    tracker.set_queue_depth("a", 2, own=3)  # a scrape that lags: never below our own count
    assert tracker.load["a"] == 3
    tracker.set_queue_depth("a", 5, own=1)  # only one of ours had arrived
    assert tracker.load["a"] == 7


def test_store_swaps_and_tells_listeners() -> None:
    store = TableStore()
    told: list[int] = []
    store.on_swap(lambda t: told.append(t.version))
    first = compile_table(two_pair_table(version=3))
    assert store.swap(first, 10.0) is None
    assert store.swap(compile_table(two_pair_table(version=4))) is first
    assert (store.version, told) == (4, [3, 4])


def test_live_state_lists_every_endpoint() -> None:
    store = TableStore()
    store.swap(compile_table(two_pair_table(["http://a1", "http://a2"], ["http://b"])))
    tracker = LoadTracker()
    tracker.acquire("fam@int4#0")
    traffic = TrafficStats()
    traffic.served("fam@int4", fallback=False)
    traffic.served("fam@fp16", fallback=True)
    state = build_state(
        "dp-1", store, tracker, lambda e: "open" if e == "fam@fp16#1" else "closed", traffic, 0.0
    )
    assert state.table_version == 1
    assert [(e.endpoint_id, e.breaker, e.in_flight) for e in state.endpoints] == [
        ("fam@int4#0", "closed", 1),
        ("fam@fp16#0", "closed", 0),
        ("fam@fp16#1", "open", 0),
    ]
    assert state.requests_by_pair == {"fam@int4": 1, "fam@fp16": 1}
    assert state.fallbacks_total == 1
    assert "http" not in state.model_dump_json()
