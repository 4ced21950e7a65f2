"""One simulated vLLM engine: admission, token timing, faults, answers, stats and metrics.

Knows nothing about HTTP: handlers pass request facts in and an `emit` callback that writes each
token out. Time is read from an injected clock; waiting is `asyncio.sleep`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from simulator.answer_key import KnownAnswer
from simulator.completion import CompletionPlan, decision_rng, plan_completion
from simulator.config import FaultConfig, SimPairConfig
from simulator.latency import LatencyModel
from simulator.metrics import CacheFacts, EngineGauges, VllmMetrics
from simulator.openai_request import ApiError, RequestFacts
from simulator.scheduler import QueueFullError, Scheduler, Ticket

Emit = Callable[[int, str], Awaitable[None]]
# A generation request as it arrives, the engine's clock then, and the requests running and
# waiting before it (`Engine.watch`)
Watcher = Callable[["ReceivedRequest", float, int], None]
KV_BLOCK_TOKENS = 16


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


@dataclass
class _Counters:
    received: int = 0
    completed: int = 0
    cancelled: int = 0
    errors_injected: int = 0
    hangs_injected: int = 0
    slow_first_tokens_injected: int = 0
    streams_broken: int = 0
    rejected_queue_full: int = 0
    known_answers: int = 0
    correct_answers: int = 0
    last_request_body_bytes: int = 0
    peak_in_flight: int = 0  # most requests running + waiting at once, since the last reset


@dataclass(frozen=True, slots=True)
class PairStats:
    """A snapshot of one engine's request counters and its live running/waiting counts."""

    received: int
    completed: int
    cancelled: int
    errors_injected: int
    hangs_injected: int
    slow_first_tokens_injected: int
    streams_broken: int
    rejected_queue_full: int
    known_answers: int
    correct_answers: int
    last_request_body_bytes: int
    peak_in_flight: int
    running: int
    waiting: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ReceivedRequest:
    """The last generation request as it arrived: path, headers (lower-case names), raw body."""

    path: str
    headers: Mapping[str, str]
    body: bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "headers": dict(self.headers),
            "body": self.body.decode(errors="replace"),
        }


@dataclass(frozen=True, slots=True)
class FaultDraw:
    """The faults one request suffers, decided on arrival."""

    error: bool = False
    hang: bool = False
    slow_first_token_s: float = 0.0
    break_stream: bool = False


def cache_facts(config: SimPairConfig) -> CacheFacts:
    """A KV cache just big enough for `max_running` full contexts, in 16-token blocks."""
    blocks = -(-config.max_running * config.context_length // KV_BLOCK_TOKENS)
    dtype = "fp8" if "fp8" in config.quantization else "auto"
    return CacheFacts(block_size=KV_BLOCK_TOKENS, num_gpu_blocks=blocks, cache_dtype=dtype)


class Engine:
    """The state of one simulated pair; every handler of its server shares it."""

    def __init__(
        self,
        config: SimPairConfig,
        answers: Mapping[str, KnownAnswer],
        clock: Callable[[], float] | None = None,
    ) -> None:
        """`clock`: the running loop's by default (`time.monotonic` on asyncio's own loop), so
        the engine's timings and its `asyncio.sleep`s keep one time, virtual time included."""
        self.config = config
        self.latency = LatencyModel.from_config(config)
        self._answers = answers
        self._clock = clock or _loop_time
        self.scheduler = Scheduler(config.max_running, config.max_queue)
        self.metrics = VllmMetrics(
            config.name,
            EngineGauges(self._running, self._waiting, self._kv_usage),
            cache_facts(config),
        )
        self._kv_tokens = 0
        self._watcher: Watcher | None = None
        self.reset()

    def reset(self) -> None:
        """Counters, faults, RNG and answer occurrences back to their start (metrics stay)."""
        self.counters = _Counters()
        self.last_request: ReceivedRequest | None = None
        self.faults = self.config.faults
        self._rng = random.Random(self.config.seed)
        self._occurrences: dict[str, int] = {}

    def _running(self) -> float:
        return float(self.scheduler.running)

    def _waiting(self) -> float:
        return float(self.scheduler.waiting)

    def _kv_usage(self) -> float:
        capacity = self.config.max_running * self.config.context_length
        return min(1.0, self._kv_tokens / capacity)

    def record(self, request: ReceivedRequest) -> None:
        """Count a generation request on arrival and keep it for `/sim/last-request`."""
        self.counters.received += 1
        self.counters.last_request_body_bytes = len(request.body)
        self.last_request = request
        if self._watcher is not None:
            self._watcher(request, self._clock(), self.scheduler.running + self.scheduler.waiting)

    def watch(self, watcher: Watcher | None) -> None:
        """Call `watcher` with each generation request as it arrives (None: stop), for a
        benchmark that follows requests through the router to the engine."""
        self._watcher = watcher

    def stats(self) -> PairStats:
        values = {f.name: getattr(self.counters, f.name) for f in fields(_Counters)}
        return PairStats(**values, running=self.scheduler.running, waiting=self.scheduler.waiting)

    def draw_faults(self) -> FaultDraw:
        """Decide this request's faults (always four draws, so the sequence stays stable)."""
        f = self.faults
        error, hang, slow, broken = (self._rng.random() for _ in range(4))
        draw = FaultDraw(
            error=error < f.error_rate,
            hang=hang < f.hang_rate,
            slow_first_token_s=f.slow_first_token_s if slow < f.slow_first_token_rate else 0.0,
            break_stream=broken < f.break_stream_rate,
        )
        c = self.counters
        c.errors_injected += draw.error
        c.hangs_injected += draw.hang and not draw.error
        c.slow_first_tokens_injected += bool(draw.slow_first_token_s) and not draw.error
        return draw

    def plan(self, facts: RequestFacts) -> CompletionPlan:
        """The answer for this request (reproducible per prompt and occurrence)."""
        known = self._answers.get(facts.lookup_text) if facts.lookup_text is not None else None
        if known is None:
            return plan_completion(None, 0.0, 0.0, facts.max_tokens, facts.ignore_eos, 1.0)
        prompt = facts.lookup_text or ""
        occurrence = self._occurrences.get(prompt, 0)
        self._occurrences[prompt] = occurrence + 1
        rng = decision_rng(self.config.seed, self.config.name, prompt, occurrence)
        accuracy = max(0.0, self.config.accuracy_for(known.category) - self.faults.accuracy_drop)
        plan = plan_completion(
            known,
            accuracy,
            rng.random(),
            facts.max_tokens,
            facts.ignore_eos,
            self.config.chars_per_token,
        )
        self.counters.known_answers += 1
        self.counters.correct_answers += bool(plan.correct)
        return plan

    def enqueue(self) -> Ticket:
        """A place in line; 503 like an overloaded vLLM when the waiting queue is full."""
        try:
            ticket = self.scheduler.enqueue()
        except QueueFullError as err:
            self.counters.rejected_queue_full += 1
            raise ApiError(503, "The engine's waiting queue is full; retry later.") from err
        in_flight = self.scheduler.running + self.scheduler.waiting
        self.counters.peak_in_flight = max(self.counters.peak_in_flight, in_flight)
        return ticket

    async def generate(
        self,
        ticket: Ticket,
        facts: RequestFacts,
        plan: CompletionPlan,
        slow_first_token_s: float,
        emit: Emit,
    ) -> None:
        """Wait for a slot, prefill, then emit each token at the current TPOT; always closes."""
        arrival = self._clock()
        try:
            await ticket.wait()
            self.metrics.queue.observe(self._clock() - arrival)
            self.metrics.prompt_tokens.inc(facts.prompt_tokens)
            await self._decode(facts, plan, slow_first_token_s, emit, arrival)
        except BaseException:  # cancelled, client gone, or the stream was broken on purpose
            self.metrics.finished("abort")
            raise
        else:
            self.metrics.finished(plan.finish_reason)
        finally:
            ticket.close()

    def _slow_prompt_s(self, facts: RequestFacts) -> float:
        marker = self.faults.slow_prompt_marker
        text = facts.lookup_text
        return self.faults.slow_prompt_s if marker and text and marker in text else 0.0

    async def _decode(
        self,
        facts: RequestFacts,
        plan: CompletionPlan,
        slow_first_token_s: float,
        emit: Emit,
        arrival: float,
    ) -> None:
        held = facts.prompt_tokens
        self._kv_tokens += held
        try:
            slow = self.faults.slowdown_factor
            prefill = self.latency.ttft_s(facts.prompt_tokens, self._rng.random()) * slow
            prefill += slow_first_token_s + self._slow_prompt_s(facts)
            due = self._clock() + prefill
            await asyncio.sleep(prefill)
            last = self._clock()
            self.metrics.ttft.observe(last - arrival)
            for index, token in enumerate(plan.tokens):
                if index:
                    tpot = self.latency.tpot_s(self.scheduler.running, self._rng.random()) * slow
                    # Deadlines, not plain sleeps: the loop's ~1 ms timer rounding must not
                    # add up over many tokens; a late token does not make later ones early.
                    due = max(due + tpot, last)
                    await asyncio.sleep(max(0.0, due - self._clock()))
                    now = self._clock()
                    self.metrics.itl.observe(now - last)
                    last = now
                self.metrics.generation_tokens.inc()
                self._kv_tokens += 1
                held += 1
                await emit(index, token)
            self.metrics.e2e.observe(self._clock() - arrival)
        finally:
            self._kv_tokens -= held

    def set_faults(self, faults: FaultConfig) -> None:
        self.faults = faults
