"""`python -m profiler import-lm-eval` on what the real lm-evaluation-harness wrote.

lm-eval 0.4.13 (`local-completions`, `tokenizer_backend=None`, tasks read from JSON files on
disk, HF_HUB_OFFLINE and HF_DATASETS_OFFLINE set: no hub) asks the simulator the profiler's own
math and reasoning items; the profiler measures the same pair; the import puts lm-eval's
per-item outcomes into the profiler's report. docs/profiler.md, "Importing lm-eval and GuideLLM
results".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from contracts.profile_report import ProfileReport
from contracts.routing_table import RoutingTable
from tests.integration.profiler.served_pair import REPO, profile, profiler, simulated_pair

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

LM_EVAL = Path(sys.executable).parent / "lm_eval"
# `gsm8k_...` gets its category (math) from the defaults; `gearbox_reasoning` needs --category.
TASKS = {"gsm8k_local": "math", "gearbox_reasoning": "reasoning"}


@dataclass(frozen=True)
class Run:
    out: Path  # lm-eval's --output_path
    base: Path  # the profiler's report of the same pair
    work: Path


def _task(folder: Path, name: str, category: str) -> None:
    """A task over the profiler's eval items of `category` (the simulator knows them)."""
    items = folder / f"{name}.jsonl"
    with items.open("w", encoding="utf-8") as f:
        for line in (REPO / "profiler" / "evalsets" / f"{category}.jsonl").read_text().splitlines():
            item = json.loads(line)
            f.write(json.dumps({"prompt": item["prompt"], "answer": str(item["expected"])}) + "\n")
    (folder / f"{name}.yaml").write_text(
        f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {items}\ntest_split: test\noutput_type: generate_until\n"
        'doc_to_text: "{{prompt}}"\ndoc_to_target: "{{answer}}"\n'
        'generation_kwargs:\n  until: ["\\n"]\n  max_gen_toks: 16\n'
        "metric_list:\n  - metric: exact_match\n    aggregation: mean\n"
        "    higher_is_better: true\n",
        encoding="utf-8",
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    work = tmp_path_factory.mktemp("lm-eval")
    tasks = work / "tasks"
    tasks.mkdir()
    for name, category in TASKS.items():
        _task(tasks, name, category)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HOME": str(work / "hf")}  # fmt: skip
    with simulated_pair(work, {"math": 0.7, "reasoning": 0.5}) as url:
        done = subprocess.run(
            [str(LM_EVAL), "--model", "local-completions", "--model_args",
             f"model=sim-a,base_url={url}/v1/completions,tokenizer_backend=None,"
             "tokenized_requests=False,num_concurrent=2",
             "--tasks", ",".join(TASKS), "--include_path", str(tasks), "--log_samples",
             "--output_path", str(work / "out")],
            cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        base = profile(url, work / "base.json")
    return Run(work / "out", base, work)


def _import(run: Run, *extra: str, out: str = "merged.json") -> subprocess.CompletedProcess[str]:
    return profiler(
        "import-lm-eval", str(run.out), "--into", str(run.base), "--out", str(run.work / out),
        *extra,
    )  # fmt: skip


def _lm_eval_results(run: Run) -> dict[str, float]:
    (results,) = run.out.glob("*/results_*.json")
    scores = json.loads(results.read_text())["results"]
    return {task: scores[task]["exact_match,none"] for task in TASKS}


def _samples(run: Run, task: str) -> list[dict[str, object]]:
    (path,) = run.out.glob(f"*/samples_{task}_*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_imported_accuracy_is_lm_evals_own_per_item(run: Run) -> None:
    done = _import(run, "--category", "gearbox_reasoning=reasoning")
    assert done.returncode == 0, done.stderr
    merged = ProfileReport.model_validate_json((run.work / "merged.json").read_text())
    base = ProfileReport.model_validate_json(run.base.read_text())
    scores = _lm_eval_results(run)
    by_category = {a.category: a for a in merged.accuracy}
    assert set(by_category) == {"math", "reasoning"}
    for task, category in TASKS.items():
        got = by_category[category]
        assert got.accuracy == pytest.approx(scores[task])  # lm-eval's own aggregate
        samples = sorted(_samples(run, task), key=lambda s: int(str(s["doc_id"])))
        assert got.items == tuple(f"{task}/{s['doc_id']}" for s in samples)
        assert got.outcomes == "".join("1" if s["exact_match"] else "0" for s in samples)
    assert 0 < by_category["math"].right_count < by_category["math"].n  # both outcomes seen
    assert merged.latency == base.latency
    assert merged.provenance.eval_set_id == "lm-eval:gearbox_reasoning,gsm8k_local"
    assert merged.provenance.eval_set_sha256 != base.provenance.eval_set_sha256
    latency, accuracy = merged.provenance.sources
    assert (latency.part, latency.tool) == ("latency", "gearbox-profiler")
    assert (accuracy.part, accuracy.tool, accuracy.tool_version) == (
        "accuracy",
        "lm-eval",
        "0.4.13",
    )
    assert accuracy.model == "sim-a"
    assert sorted(f.name.split("_2")[0] for f in accuracy.files) == [
        "samples_gearbox_reasoning", "samples_gsm8k_local"
    ]  # fmt: skip
    prompts = {p.text: p.category for p in merged.eval_prompts}
    assert prompts["12 + 7 ="] == "math"
    assert len(prompts) == by_category["math"].n + by_category["reasoning"].n


def test_the_control_plane_builds_a_table_from_the_merged_report(run: Run) -> None:
    """Bounds, the family cap and the classifier's prompts take the imported part as is."""
    assert _import(run, "--category", "gearbox_reasoning=reasoning").returncode == 0
    table_path = run.work / "table.json"
    done = subprocess.run(
        [sys.executable, "-m", "control_plane", "build", str(run.work / "merged.json"),
         "-o", str(table_path)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    table = RoutingTable.model_validate_json(table_path.read_text())
    assert [e.pair for e in table.entries] == ["gemma-3-270m@bf16"]


def test_a_task_without_a_category_is_named(run: Run) -> None:
    done = _import(run, out="no-category.json")
    assert done.returncode == 2
    assert "task 'gearbox_reasoning' has no category: add --category gearbox_reasoning=" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr
    assert not (run.work / "no-category.json").exists()


def test_a_missing_metric_is_named(run: Run) -> None:
    done = _import(run, "--category", "gearbox_reasoning=reasoning", "--metric", "acc")
    assert done.returncode == 2
    assert "no per-item metric 'acc'; it logs exact_match" in done.stderr


def test_samples_of_two_models_are_refused(run: Run) -> None:
    """The same output copied as if another model had written it."""
    (model_dir,) = run.out.iterdir()
    other = run.work / "other-model"
    shutil.copytree(model_dir, other, dirs_exist_ok=True)
    (results,) = other.glob("results_*.json")
    document = json.loads(results.read_text())
    document["model_name"] = "other-model"
    results.write_text(json.dumps(document))
    done = profiler(
        "import-lm-eval", str(run.out), str(other), "--into", str(run.base),
        "--out", str(run.work / "mixed.json"), "--category", "gearbox_reasoning=reasoning",
    )  # fmt: skip
    assert done.returncode == 2
    assert "the samples are from several models" in done.stderr
    assert "other-model" in done.stderr
