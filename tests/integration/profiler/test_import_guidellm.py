"""`python -m profiler import-guidellm` on a report the real GuideLLM wrote.

GuideLLM cannot run from the dev venv: it declares torch as a hard dependency (from PyPI, the
CUDA build and its libraries, gigabytes) and its data loader imports torch. So
`data/guidellm_benchmarks.json` is a report GuideLLM 0.8.1 wrote, kept as it came, made this way:

- GuideLLM 0.8.1 and its dependencies other than torch (`pip install --no-deps guidellm==0.8.1`,
  then the rest of its `Requires-Dist` and jinja2) in a throwaway venv, run with the CPU build
  of torch 2.13 of the engines venv (`make engines`) on PYTHONPATH;
- the simulator serving one pair, `python -m simulator serve` on the fleet
  `{"pairs": [{"name": "sim-a", "family": "gemma-3-270m", "quantization": "bf16",
  "ttft_base_s": 0.005, "tpot_base_s": 0.001, "accuracy": {"math": 0.7}}]}`;
- a byte-level tokenizer made on the spot, no hub: `tokenizers.models.BPE` over
  `pre_tokenizers.ByteLevel.alphabet()` with no merges, a ByteLevel pre-tokenizer and decoder,
  saved with `transformers.PreTrainedTokenizerFast(...).save_pretrained(DIR)`;
- `HF_HUB_OFFLINE=1 python -m guidellm run --backend kind=openai_http,target=URL
  --profile kind=concurrent --override profile.streams 1,4
  --constraint kind=max_requests,count=12 --tokenizer kind=huggingface_auto,model=DIR
  --data kind=synthetic_text,prompt_tokens=64,output_tokens=16
  --output kind=json,path=guidellm_benchmarks.json --disable-progress`.

The import is checked against GuideLLM's own per-request numbers in that file, and merged into
a report the profiler writes here of the same simulated pair.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contracts.profile_report import ProfileReport
from profiler.stats import summarize
from tests.integration.profiler.served_pair import profile, profiler, simulated_pair

pytestmark = pytest.mark.integration

REPORT = Path(__file__).parent / "data" / "guidellm_benchmarks.json"


def _benchmarks() -> list[dict[str, Any]]:
    benchmarks: list[dict[str, Any]] = json.loads(REPORT.read_text())["benchmarks"]
    return benchmarks


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("guidellm")
    with simulated_pair(work, {"math": 0.7}) as url:
        return profile(url, work / "base.json")


def test_levels_are_guidellms_requests_summarized_as_the_profilers_own(
    base: Path, tmp_path: Path
) -> None:
    out = tmp_path / "merged.json"
    done = profiler("import-guidellm", str(REPORT), "--into", str(base), "--out", str(out))
    assert done.returncode == 0, done.stderr
    merged = ProfileReport.model_validate_json(out.read_text())
    assert [lv.concurrency for lv in merged.latency] == [1, 4]
    for level, bench in zip(merged.latency, _benchmarks(), strict=True):
        requests = bench["requests"]["successful"]
        assert level.requests == len(requests) == 12
        assert level.errors == len(bench["requests"]["errored"]) == 0
        # GuideLLM's own per-request TTFT and latency, summarized the profiler's way
        assert level.ttft_s == pytest.approx(
            summarize([r["time_to_first_token_ms"] / 1000 for r in requests])
        )
        assert level.e2e_s == pytest.approx(summarize([r["request_latency"] for r in requests]))
        assert level.output_tokens == 16
        assert level.tpot_s.p50 > 0
        # and its own aggregate for the same distribution
        assert level.e2e_s.mean == pytest.approx(
            bench["metrics"]["request_latency"]["successful"]["mean"]
        )


def test_the_merge_keeps_the_profilers_accuracy_and_says_where_each_part_came_from(
    base: Path, tmp_path: Path
) -> None:
    out = tmp_path / "merged.json"
    assert (
        profiler("import-guidellm", str(REPORT), "--into", str(base), "--out", str(out)).returncode
        == 0
    )
    merged = ProfileReport.model_validate_json(out.read_text())
    own = ProfileReport.model_validate_json(base.read_text())
    assert merged.accuracy == own.accuracy
    assert merged.eval_prompts == own.eval_prompts
    assert merged.provenance.eval_set_sha256 == own.provenance.eval_set_sha256
    latency, accuracy = merged.provenance.sources
    assert (latency.part, latency.tool, latency.tool_version) == ("latency", "guidellm", "0.8.1")
    assert latency.model == "sim-a"
    assert [f.name for f in latency.files] == [REPORT.name]
    assert (accuracy.part, accuracy.tool) == ("accuracy", "gearbox-profiler")


def test_a_report_for_another_model_is_refused(base: Path, tmp_path: Path) -> None:
    document = json.loads(base.read_text())
    document["served_model_name"] = "another-model"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(document))
    done = profiler(
        "import-guidellm", str(REPORT), "--into", str(other), "--out", str(tmp_path / "x.json")
    )
    assert done.returncode == 2
    assert "GuideLLM measured model 'sim-a', the report is for 'another-model'" in done.stderr
    assert "--model sim-a" in done.stderr


def test_a_file_that_is_not_a_guidellm_report_is_named(base: Path, tmp_path: Path) -> None:
    done = profiler(
        "import-guidellm", str(base), "--into", str(base), "--out", str(tmp_path / "x.json")
    )
    assert done.returncode == 2
    assert "not a GuideLLM benchmarks report" in done.stderr
