"""inprocess: batch timing through the OfflineEngine port (fake engine, fake clock), the
report it yields, Ctrl-C, the checkpoint's tokenizer with what its chat template adds, and the
clear error when vLLM is not installed."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from contracts.profile_report import Hardware, Memory, ProfileReport
from contracts.prompt_text import prompt_parts
from contracts.tokenizer_ref import TemplateTokens, TokenizerRef
from profiler.engine.client import RequestFailedError
from profiler.errors import EngineMissingError
from profiler.load.runner import Calibration, LevelRecorder
from profiler.load.workload import LoadLevel, build_sweep
from profiler.run.inprocess import (
    EngineIdentity,
    Generation,
    import_engine_modules,
    measure_level,
    profile_inprocess,
)
from profiler.run.profiling import PairPlan
from profiler.run.progress import SilentProgress
from tests.support import tiny_tokenizer

PREFILL_S = 0.05
DECODE_S = 0.01


GEMMA = TemplateTokens(fixed=5, per_message=4, tools_fixed=0, tools_scale=0)


class FakeEngine:
    """Prefill takes 50 ms and each further token 10 ms per batch, on a fake clock; counts a
    prompt with the tokenizer file `tokenizer`, adding `template` to a chat body and a BOS to
    a completions prompt (None: refuses to count)."""

    def __init__(
        self,
        answers: dict[str, str],
        interrupt_on_call: int | None = None,
        tokenizer: Path | None = None,
        template: TemplateTokens | None = GEMMA,
    ) -> None:
        self.now = 0.0
        self.answers = answers
        self.interrupt_on_call = interrupt_on_call
        self.calls = 0
        self.batches: list[int] = []
        self.tokenizer, self.template = tokenizer, template
        self.counted = 0

    def clock(self) -> float:
        return self.now

    def generate(self, requests: Sequence[tuple[str, int]], ignore_eos: bool) -> list[Generation]:
        self.calls += 1
        if self.calls == self.interrupt_on_call:
            raise KeyboardInterrupt
        self.batches.append(len(requests))
        longest = max((n for _, n in requests), default=1)
        self.now += PREFILL_S + DECODE_S * (longest - 1)
        return [
            Generation(self.answers.get(p, " nope"), max(1, len(p) // 5), n) for p, n in requests
        ]

    def chat(self, requests: Sequence[tuple[list[dict[str, str]], int]]) -> list[Generation]:
        return [Generation(" chat", 3, 1) for _ in requests]

    def memory(self) -> Memory:
        return Memory(peak_bytes=123_456)

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        self.counted += 1
        if self.tokenizer is None or self.template is None:
            raise RequestFailedError("the engine refused it: no chat template")
        parts = prompt_parts(body)
        text = tiny_tokenizer.count(self.tokenizer, parts.text)
        if parts.messages is None:
            return text + 1  # the tokenizer's BOS
        tools = tiny_tokenizer.count(self.tokenizer, parts.tools) if parts.tools else None
        return self.template.tokens(text, parts.messages, tools)


def test_batch_timing_gives_ttft_and_tpot() -> None:
    engine = FakeEngine({})
    recorder = LevelRecorder(LoadLevel(4, 64, 11, requests=8, warmup=4))
    calibration = Calibration()
    measure_level(engine, 0, recorder, calibration, clock=engine.clock)
    assert engine.batches == [4, 4, 4, 4, 4, 4]  # (1-token + full) x 3 batches of 4
    assert len(recorder.timings) == 8  # the first batch was warm-up
    sample = recorder.sample()
    assert sample is not None
    assert sample.ttft_s.p50 == pytest.approx(PREFILL_S)
    assert sample.tpot_s.p50 == pytest.approx(DECODE_S)
    assert sample.e2e_s.p50 == pytest.approx(PREFILL_S + 10 * DECODE_S)
    assert calibration.chars_per_token == pytest.approx(5.0, rel=0.05)


def _plan(tmp_path: Path) -> PairPlan:
    evalset = tmp_path / "set.jsonl"
    rows = [
        {"prompt": "2 + 2 =", "expected": 4, "category": "math", "scorer": "numeric"},
        {"prompt": "3 + 3 =", "expected": 6, "category": "math", "scorer": "numeric"},
        {"messages": [{"role": "user", "content": "hi"}], "expected": "chat",
         "category": "chat", "scorer": "contains"},
    ]  # fmt: skip
    evalset.write_text("\n".join(json.dumps(r) for r in rows))
    return PairPlan(
        family="gemma-3-270m",
        quantization="bf16",
        served_model_name="gemma",
        endpoints=("http://127.0.0.1:8000",),
        hardware=Hardware(name="cpu", hourly_usd=0.1),
        prices=None,
        sweep=build_sweep([1, 2], [32], [8], 4, 0),
        evalsets=(evalset,),
        out=tmp_path / "report.json",
    )


def test_profile_inprocess_writes_a_valid_report(tmp_path: Path) -> None:
    engine = FakeEngine({"2 + 2 =": " 4"})
    plan = _plan(tmp_path)
    identity = EngineIdentity(version="0.32.0+cpu", context_length=2048)
    report = profile_inprocess(plan, engine, identity, SilentProgress())
    assert ProfileReport.model_validate_json((tmp_path / "report.json").read_text()) == report
    accuracy = {a.category: (a.accuracy, a.n) for a in report.accuracy}
    assert accuracy == {"chat": (1.0, 1), "math": (0.5, 2)}
    assert [s.concurrency for s in report.latency] == [1, 2]
    assert report.provenance.engine_version == "0.32.0+cpu"
    assert report.context_length == 2048
    assert report.memory.peak_bytes == 123_456
    assert report.provenance.partial is False


def test_the_checkpoint_s_tokenizer_is_recorded_with_what_its_template_adds(
    tmp_path: Path,
) -> None:
    """The `model` option names a checkpoint directory holding a tokenizer.json: the report
    records the file, and what the chat template and a completions prompt add, measured from
    the engine's own counts as the HTTP mode measures them (`template_tokens`). A checkpoint
    without the file (a hub id) records none and counts nothing; an engine that counts no
    prompt records the file alone."""
    path = tiny_tokenizer.train(tmp_path / "ckpt" / "tokenizer.json")
    plan = _plan(tmp_path)
    engine = FakeEngine({}, tokenizer=path)
    identity = EngineIdentity("0.32.0", 2048, str(path.parent))
    report = profile_inprocess(plan, engine, identity, SilentProgress())
    assert report.tokenizer is not None
    assert report.tokenizer.id == str(path.resolve())
    assert report.tokenizer.sha256 == tiny_tokenizer.sha256(path)
    assert report.tokenizer.template == GEMMA
    assert report.tokenizer.special_tokens == 1
    hub = profile_inprocess(
        plan,
        FakeEngine({}),
        EngineIdentity("0.32.0", 2048, "google/gemma-3-270m"),
        SilentProgress(),
    )
    assert hub.tokenizer is None
    refusing = FakeEngine({}, tokenizer=path, template=None)
    alone = profile_inprocess(plan, refusing, identity, SilentProgress())
    assert refusing.counted > 0
    assert alone.tokenizer == TokenizerRef(id=str(path.resolve()), sha256=report.tokenizer.sha256)


def test_ctrl_c_in_process_writes_a_partial_report(tmp_path: Path) -> None:
    engine = FakeEngine({"2 + 2 =": " 4"}, interrupt_on_call=11)  # in the second level
    plan = _plan(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        profile_inprocess(plan, engine, EngineIdentity("0.32.0", 2048), SilentProgress())
    report = ProfileReport.model_validate_json((tmp_path / "report.json").read_text())
    assert report.provenance.partial is True
    assert [(s.concurrency, s.requests) for s in report.latency] == [(1, 4)]


def test_missing_vllm_names_the_engines_extra() -> None:
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(EngineMissingError, match=r"gearbox\[engines\]"):
            import_engine_modules()
    else:  # an engines venv: both modules load
        vllm, torch = import_engine_modules()
        assert vllm.__name__ == "vllm"
        assert torch.__name__ == "torch"
