"""In-process mode: the profiler runs the engine itself through `vllm.LLM` (no server).

vLLM and torch come from the `engines` extra and are imported lazily, only here. Timing is
per batch: a batch of `concurrency` prompts is run once with max_tokens=1 (its duration is the
TTFT of every request in it) and once with the level's output length (the e2e); TPOT follows
as (e2e - TTFT) / (tokens - 1), through the same `stats` code the HTTP mode uses. Where the
checkpoint directory holds a `tokenizer.json`, the report records it with what the chat
template and the completions prompt add, measured as the HTTP mode measures them
(`engine.template_tokens`), from the engine's own token counts (`OfflineEngine.prompt_tokens`).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import ModuleType
from typing import Any, Protocol

from contracts.code_tests import CodeTestRunner, score_answer_blocking
from contracts.profile_report import EngineFacts, Memory, ProfileReport
from contracts.tokenizer_ref import TokenizerRef
from profiler.engine.client import RequestFailedError
from profiler.engine.engine_facts import EndpointInfo, FactsTracker
from profiler.engine.template_tokens import with_template
from profiler.engine.tokenizer_file import read_tokenizer_ref, tokenizer_path
from profiler.errors import EngineMissingError
from profiler.evals.accuracy import EvalItem, EvalResult
from profiler.load.runner import Advance, Calibration, LevelRecorder
from profiler.load.workload import make_prompt, request_seed
from profiler.run.profiling import (
    PairPlan,
    RunState,
    finish_report,
    load_eval_sets,
    run_facts,
    write_partial,
)
from profiler.run.progress import Progress
from profiler.stats import TimedStream, extract_timing

logger = logging.getLogger(__name__)

ENGINES_HINT = "install the `engines` extra: pip install 'gearbox[engines]' (see infra/engines/)"


@dataclass(frozen=True, slots=True)
class Generation:
    text: str
    prompt_tokens: int
    completion_tokens: int


class OfflineEngine(Protocol):
    """The port the in-process measurement needs; `VllmEngine` is the real adapter."""

    def generate(self, requests: Sequence[tuple[str, int]], ignore_eos: bool) -> list[Generation]:
        """Greedy completions of (prompt, max_tokens) pairs, in order."""
        ...

    def chat(self, requests: Sequence[tuple[list[dict[str, str]], int]]) -> list[Generation]:
        """Greedy chat answers of (messages, max_tokens) pairs, in order."""
        ...

    def memory(self) -> Memory: ...

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        """The prompt tokens the engine counts for one chat body (`messages`, `tools`) or
        completions body (`prompt`), as a server's `usage.prompt_tokens`; raises
        RequestFailedError when the engine refuses it."""
        ...


def import_engine_modules() -> tuple[ModuleType, ModuleType]:
    """(vllm, torch), or EngineMissingError naming the `engines` extra."""
    try:
        return importlib.import_module("vllm"), importlib.import_module("torch")
    except ImportError as err:
        raise EngineMissingError(
            f"the inprocess mode needs vLLM and torch ({err.name} is missing); {ENGINES_HINT}"
        ) from err


class VllmEngine:
    """`vllm.LLM` behind the OfflineEngine port; memory is read through torch on CUDA."""

    def __init__(self, vllm: ModuleType, torch: ModuleType, llm: Any) -> None:
        self._vllm = vllm
        self._torch = torch
        self._llm = llm
        self._peak_used_bytes = 0

    @property
    def version(self) -> str:
        return str(getattr(self._vllm, "__version__", "")) or "unknown-vllm"

    @property
    def context_length(self) -> int | None:
        config = getattr(getattr(self._llm, "llm_engine", None), "model_config", None)
        length = getattr(config, "max_model_len", None)
        return length if isinstance(length, int) else None

    def _params(self, max_tokens: int, ignore_eos: bool) -> Any:
        return self._vllm.SamplingParams(
            temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos
        )

    def generate(self, requests: Sequence[tuple[str, int]], ignore_eos: bool) -> list[Generation]:
        params = [self._params(n, ignore_eos) for _, n in requests]
        outputs = self._llm.generate([p for p, _ in requests], params, use_tqdm=False)
        self._sample_memory()
        return [_generation(o) for o in outputs]

    def chat(self, requests: Sequence[tuple[list[dict[str, str]], int]]) -> list[Generation]:
        if not requests:
            return []
        conversations = [messages for messages, _ in requests]
        params = [self._params(n, False) for _, n in requests]
        try:
            outputs = self._llm.chat(conversations, params, use_tqdm=False)
        except ValueError as err:  # e.g. a base model without a chat template
            # like the HTTP mode, a request the engine refuses is a wrong answer, not a crash
            logger.warning("chat eval items failed (%s); they count as wrong", err)
            return [Generation("", 0, 0) for _ in requests]
        self._sample_memory()
        return [_generation(o) for o in outputs]

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        # vLLM renders and tokenizes offline as its server does: chat without special
        # tokens (the template holds them), a completions prompt with them
        params = self._params(1, False)
        try:
            if "messages" in body:
                conversation = [body["messages"]]
                tools = body.get("tools")
                outputs = self._llm.chat(conversation, params, use_tqdm=False, tools=tools)
            else:
                outputs = self._llm.generate([body["prompt"]], params, use_tqdm=False)
        except ValueError as err:  # a template that fails, a prompt over the context
            raise RequestFailedError(f"the engine refused it: {err}") from err
        return len(outputs[0].prompt_token_ids or ())

    def _sample_memory(self) -> None:
        cuda = self._torch.cuda
        if cuda.is_available():
            free, total = cuda.mem_get_info()
            self._peak_used_bytes = max(self._peak_used_bytes, int(total - free))

    def memory(self) -> Memory:
        """Device memory in use at its highest sample (weights + KV cache + activations)."""
        return Memory(peak_bytes=self._peak_used_bytes or None)


def _generation(output: Any) -> Generation:
    completion = output.outputs[0]
    return Generation(
        text=str(completion.text),
        prompt_tokens=len(output.prompt_token_ids or ()),
        completion_tokens=len(completion.token_ids or ()),
    )


def load_vllm_engine(options: dict[str, Any]) -> VllmEngine:
    """Start `vllm.LLM(**options)` in this process (model, quantization, max_model_len, ...)."""
    vllm, torch = import_engine_modules()
    logger.info("starting vllm %s in-process for %s", getattr(vllm, "__version__", "?"), options)
    return VllmEngine(vllm, torch, vllm.LLM(**options))


def measure_level(
    engine: OfflineEngine,
    index: int,
    recorder: LevelRecorder,
    calibration: Calibration,
    clock: Callable[[], float] = time.perf_counter,
    advance: Advance = lambda n: None,
) -> None:
    """Run one closed-loop level as batches of `concurrency` prompts (see module doc)."""
    level = recorder.level
    size = level.concurrency
    for first in range(0, level.total, size):
        ids = range(first, min(first + size, level.total))
        prompts = [
            make_prompt(level.input_tokens, calibration.chars_per_token, request_seed(index, i))
            for i in ids
        ]
        start = clock()
        engine.generate([(p, 1) for p in prompts], ignore_eos=True)
        ttft = clock() - start
        start = clock()
        gens = engine.generate([(p, level.output_tokens) for p in prompts], ignore_eos=True)
        end = clock()
        for i, prompt, gen in zip(ids, prompts, gens, strict=True):
            stream = TimedStream(
                started_s=start,
                token_times_s=(start + ttft, end),
                finished_s=end,
                prompt_chars=len(prompt),
                prompt_tokens=gen.prompt_tokens or None,
                completion_tokens=gen.completion_tokens or None,
            )
            timing = extract_timing(stream)
            calibration.observe(timing)
            if i >= level.warmup:
                recorder.timings.append(timing)
        advance(len(ids))


def measure_accuracy(
    engine: OfflineEngine,
    items: Sequence[EvalItem],
    results: list[EvalResult],
    advance: Advance = lambda n: None,
) -> None:
    """Score every item greedily: prompt items in one batch, chat items through `chat`."""
    prompted = [i for i in items if i.prompt is not None]
    chats = [i for i in items if i.messages is not None]
    answers = engine.generate([(i.prompt or "", i.max_tokens) for i in prompted], False)
    answers += engine.chat(
        [([m.model_dump() for m in i.messages or ()], i.max_tokens) for i in chats]
    )
    runner = CodeTestRunner()  # items with `tests` run them against the answer
    for item, gen in zip([*prompted, *chats], answers, strict=True):
        ok = score_answer_blocking(runner, gen.text, item.scoring)
        results.append(EvalResult(item.category, correct=ok, item=item.key))
    advance(len(items))


class _MemoryFacts(FactsTracker):
    """Engine facts for the in-process mode: no queue counters, memory from the engine."""

    def __init__(self, engine: OfflineEngine) -> None:
        super().__init__([])
        self._engine = engine

    def engine_facts(self) -> EngineFacts:
        return EngineFacts()

    def memory(self) -> Memory:
        return self._engine.memory()


@dataclass(frozen=True, slots=True)
class EngineIdentity:
    """The engine's version and context length, and the checkpoint it loaded (`root`: the
    `model` option, a directory or a hub id), where its tokenizer file is looked for."""

    version: str
    context_length: int | None
    root: str | None = None


class _OfflineCounter:
    """The profiler's `PromptCounter` over an in-process engine: each count runs the engine
    on this thread (the in-process mode has no event loop of its own; the loop
    `measure_tokenizer` starts runs nothing else)."""

    def __init__(self, engine: OfflineEngine) -> None:
        self._engine = engine

    async def prompt_tokens(self, body: dict[str, Any]) -> int:
        return self._engine.prompt_tokens(body)


def measure_tokenizer(engine: OfflineEngine, root: str | None) -> TokenizerRef | None:
    """The tokenizer file of the checkpoint `root` names, with what the chat template and a
    completions prompt add on `engine` (`template_tokens.with_template`); None (logged) when
    there is no such file here or it does not load."""
    path = tokenizer_path(root)
    if path is None:
        logger.info("no tokenizer recorded: the checkpoint %r has no tokenizer.json here", root)
        return None
    try:
        ref = read_tokenizer_ref(path)
    except (ValueError, OSError) as err:
        logger.warning("no tokenizer recorded: %s", err)
        return None
    return asyncio.run(with_template(_OfflineCounter(engine), ref))


def profile_inprocess(
    plan: PairPlan,
    engine: OfflineEngine,
    identity: EngineIdentity,
    progress: Progress,
    origin: tuple[str | None, str | None] = (None, None),
) -> ProfileReport:
    """Profile a pair on an engine running in this process (blocking; no event loop).
    Open-loop levels need a server and are skipped. Ctrl-C writes the partial report."""
    started_at = datetime.now(UTC)
    items, set_id, set_sha = load_eval_sets(plan.evalsets)
    tokenizer = measure_tokenizer(engine, identity.root)
    info = EndpointInfo(plan.endpoints[0], identity.context_length, identity.version, tokenizer)
    facts = run_facts(plan, info, (set_id, set_sha), started_at, origin, items)
    levels = [lv for lv in plan.sweep if lv.open_loop_rps is None]
    if len(levels) < len(plan.sweep):
        logger.warning("open-loop levels need a server; skipped in the inprocess mode")
    state = RunState(recorders=[LevelRecorder(lv) for lv in levels])
    state.tracker = _MemoryFacts(engine)
    try:
        with progress.bar(len(items), f"{plan.pair} accuracy") as advance:
            measure_accuracy(engine, items, state.evals, advance)
        with progress.bar(sum(lv.total for lv in levels), f"{plan.pair} load") as advance:
            for index, recorder in enumerate(state.recorders):
                measure_level(engine, index, recorder, state.calibration, advance=advance)
    except KeyboardInterrupt:
        write_partial(plan, facts, state)
        raise
    return finish_report(plan, facts, state)
