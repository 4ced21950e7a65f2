"""`import-lm-eval`: lm-evaluation-harness per-sample logs -> the accuracy part of a report.

lm-eval run with `--log_samples --output_path OUT` writes, per model, `OUT/<model>/` holding
`results_<time>.json` (model name, lm-eval version, task configs) and one
`samples_<task>_<time>.jsonl` per task: one line per (document, filter) with the per-item
value of each of the task's metrics. Each line becomes one eval item `task/doc_id`, right when
the chosen metric is 1 and wrong when it is 0 (exact_match, acc, pass@1, ... are 0/1 per item);
a metric with other per-item values (an F1, a BLEU) cannot say right or wrong and is refused.
Tasks map to categories by `--category TASK=CATEGORY`, else by `DEFAULT_CATEGORIES`.

Reading files is here; `accuracy_part` is pure.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.category_model import MAX_PROMPT_CHARS, LabelledPrompt
from contracts.names import KNOWN_CATEGORIES
from contracts.profile_report import CategoryAccuracy, SourceFile
from profiler.errors import InputError
from profiler.stats import wilson_interval

# Well-known task names (and their `name_...` variants) -> category; `--category` wins.
DEFAULT_CATEGORIES: Mapping[str, str] = {
    **dict.fromkeys(
        ("gsm8k", "minerva_math", "hendrycks_math", "mathqa", "asdiv", "svamp", "mgsm"), "math"
    ),
    **dict.fromkeys(("humaneval", "mbpp", "ds1000"), "code"),
    **dict.fromkeys(
        (
            "mmlu",
            "arc_easy",
            "arc_challenge",
            "hellaswag",
            "winogrande",
            "bbh",
            "piqa",
            "boolq",
            "commonsense_qa",
            "gpqa",
            "logiqa",
            "openbookqa",
            "siqa",
        ),
        "reasoning",
    ),
    **dict.fromkeys(("drop", "squad", "squadv2", "coqa"), "extraction"),
    **dict.fromkeys(("ifeval",), "chat"),
}
# Tried in this order when a task logs several metrics and `--metric` is not given.
PREFERRED_METRICS = ("exact_match", "acc", "pass@1", "pass_at_1")


@dataclass(frozen=True, slots=True)
class Sample:
    """One logged line, reduced to what the import needs."""

    task: str
    doc_id: int
    filter: str
    metrics: Mapping[str, Any]
    prompt: str


@dataclass(frozen=True, slots=True)
class SamplesFile:
    path: Path
    model: str
    lm_eval_version: str | None
    samples: tuple[Sample, ...]


@dataclass(frozen=True, slots=True)
class AccuracyPart:
    accuracy: tuple[CategoryAccuracy, ...]
    prompts: tuple[LabelledPrompt, ...]
    eval_set_id: str
    eval_set_sha256: str


def category_of(task: str, overrides: Mapping[str, str]) -> str | None:
    """`overrides[task]`, else the default of the task's name or of its `name_...` family."""
    if task in overrides:
        return overrides[task]
    for name, category in DEFAULT_CATEGORIES.items():
        if task == name or task.startswith(name + "_"):
            return category
    return None


def parse_category_map(pairs: Sequence[str]) -> dict[str, str]:
    """`TASK=CATEGORY` strings -> a map; each problem named."""
    out: dict[str, str] = {}
    problems = []
    for pair in pairs:
        task, sep, category = pair.partition("=")
        if not sep or not task or category not in KNOWN_CATEGORIES:
            problems.append(
                f"--category {pair!r}: expected TASK=CATEGORY, CATEGORY one of "
                + ", ".join(KNOWN_CATEGORIES)
            )
            continue
        out[task] = category
    if problems:
        raise InputError(problems)
    return out


def _prompt(arguments: Any) -> str:
    """The text the model was asked: the first argument of the first request."""
    if isinstance(arguments, Mapping) and arguments:
        first = next(iter(arguments.values()))
        if isinstance(first, Mapping):
            text = first.get("arg_0")
            return text if isinstance(text, str) else ""
    if isinstance(arguments, list) and arguments and isinstance(arguments[0], list):
        return str(arguments[0][0]) if arguments[0] else ""
    return ""


def _sample(raw: Mapping[str, Any], task: str, where: str) -> Sample:
    names = raw.get("metrics")
    doc_id = raw.get("doc_id")
    if not isinstance(names, list) or not isinstance(doc_id, int):
        raise InputError([f"{where}: not an lm-eval sample line (no doc_id or metrics)"])
    values = {name: raw[name] for name in names if name in raw}
    prompt = _prompt(raw.get("arguments"))
    return Sample(task, doc_id, str(raw.get("filter", "none")), values, prompt)


_SAMPLES = re.compile(r"^samples_(?P<task>.+)_(?P<time>\d{4}-\d{2}-\d{2}T[\d.-]+)\.jsonl$")


def samples_paths(paths: Sequence[Path]) -> list[Path]:
    """Files as given; a folder gives every `samples_*.jsonl` in it and one level below."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted([*path.glob("samples_*.jsonl"), *path.glob("*/samples_*.jsonl")])
        else:
            found.append(path)
    if not found:
        raise InputError([f"no lm-eval samples_*.jsonl in {', '.join(map(str, paths))}"])
    return found


def read_samples_file(path: Path) -> SamplesFile:
    """One samples file and the model and version from its `results_<time>.json` sibling."""
    match = _SAMPLES.match(path.name)
    if match is None:
        raise InputError([f"{path}: not an lm-eval samples file (samples_<task>_<time>.jsonl)"])
    results = path.with_name(f"results_{match['time']}.json")
    try:
        meta = json.loads(results.read_text(encoding="utf-8"))
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise InputError(
            [
                f"{err.filename}: cannot read ({err.strerror}); lm-eval writes "
                "results_<time>.json beside each samples file"
            ]
        ) from err
    except json.JSONDecodeError as err:
        raise InputError([f"{results}: not JSON ({err.msg})"]) from err
    samples = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError([f"{path}:{number}: not JSON ({err.msg})"]) from err
            samples.append(_sample(raw, match["task"], f"{path}:{number}"))
    model = meta.get("model_name") or (meta.get("config") or {}).get("model_args", {}).get("model")
    if not isinstance(model, str) or not model:
        raise InputError([f"{results}: names no model (model_name)"])
    return SamplesFile(path, model, meta.get("lm_eval_version"), tuple(samples))


def _metric(samples: Sequence[Sample], wanted: str | None, task: str) -> str:
    present = set.intersection(*(set(s.metrics) for s in samples))
    if wanted is not None:
        if wanted not in present:
            raise InputError(
                [
                    f"{task}: no per-item metric {wanted!r}; it logs "
                    + ", ".join(sorted(present) or ["none"])
                ]
            )
        return wanted
    for name in PREFERRED_METRICS:
        if name in present:
            return name
    if len(present) == 1:
        return next(iter(present))
    raise InputError(
        [
            f"{task}: choose the right/wrong metric with --metric; it logs "
            + ", ".join(sorted(present) or ["none"])
        ]
    )


def _filter(samples: Sequence[Sample], wanted: str | None, task: str) -> list[Sample]:
    filters = sorted({s.filter for s in samples})
    if wanted is None and len(filters) > 1:
        raise InputError(
            [f"{task}: logs several filters ({', '.join(filters)}); choose one with --filter"]
        )
    chosen = wanted or filters[0]
    kept = [s for s in samples if s.filter == chosen]
    if not kept:
        raise InputError([f"{task}: no samples with filter {chosen!r} ({', '.join(filters)})"])
    return kept


def _outcome(value: Any, task: str, doc_id: int, metric: str) -> str:
    if isinstance(value, bool) or value in (0, 1):
        return "1" if value else "0"
    raise InputError(
        [
            f"{task} doc {doc_id}: {metric} = {value!r} is not right (1) or wrong "
            "(0); choose a 0/1 metric with --metric"
        ]
    )


def accuracy_part(
    files: Sequence[SamplesFile],
    categories: Mapping[str, str],
    metric: str | None = None,
    filter_name: str | None = None,
) -> AccuracyPart:
    """Per category: items `task/doc_id`, outcomes, counts and the Wilson interval."""
    by_task: dict[str, list[Sample]] = {}
    for f in files:
        for s in f.samples:
            by_task.setdefault(s.task, []).append(s)
    unmapped = sorted(t for t in by_task if category_of(t, categories) is None)
    if unmapped:
        raise InputError(
            [f"task {t!r} has no category: add --category {t}=CATEGORY" for t in unmapped]
        )
    items: dict[str, list[tuple[str, str]]] = {}
    prompts: list[LabelledPrompt] = []
    for task, samples in sorted(by_task.items()):
        category = category_of(task, categories) or ""
        kept = _filter(samples, filter_name, task)
        name = _metric(kept, metric, task)
        for s in sorted(kept, key=lambda s: s.doc_id):
            outcome = _outcome(s.metrics[name], task, s.doc_id, name)
            items.setdefault(category, []).append((f"{task}/{s.doc_id}", outcome))
            if s.prompt.strip():
                prompts.append(LabelledPrompt(text=s.prompt[:MAX_PROMPT_CHARS], category=category))
    accuracy = tuple(_category(c, entries) for c, entries in sorted(items.items()))
    ids = "\n".join(sorted(i for entries in items.values() for i, _ in entries))
    tasks = ",".join(sorted(by_task))
    return AccuracyPart(
        accuracy, tuple(prompts), f"lm-eval:{tasks}"[:200], hashlib.sha256(ids.encode()).hexdigest()
    )


def _category(category: str, entries: Sequence[tuple[str, str]]) -> CategoryAccuracy:
    ids = tuple(i for i, _ in entries)
    if len(set(ids)) != len(ids):
        raise InputError([f"{category}: an item is logged twice (the same task read twice?)"])
    outcomes = "".join(o for _, o in entries)
    right, n = outcomes.count("1"), len(outcomes)
    low, high = wilson_interval(right, n)
    return CategoryAccuracy(
        category=category,
        accuracy=right / n,
        n=n,
        ci_low=low,
        ci_high=high,
        right=right,
        items=ids,
        outcomes=outcomes,
    )


def one_model(files: Sequence[SamplesFile]) -> tuple[str, str | None]:
    """The model all files evaluated, and the lm-eval version; mixed models are an error."""
    models = sorted({f.model for f in files})
    if len(models) > 1:
        raise InputError(
            [
                "the samples are from several models: "
                + "; ".join(f"{f.path.name}: {f.model}" for f in files)
            ]
        )
    versions = sorted({f.lm_eval_version for f in files if f.lm_eval_version})
    return models[0], ",".join(versions) or None


def source_file(path: Path) -> SourceFile:
    return SourceFile(name=path.name, sha256=hashlib.sha256(path.read_bytes()).hexdigest())
