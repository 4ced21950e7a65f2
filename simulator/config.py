"""Fleet files for the engine simulator: one SimPairConfig per simulated vLLM server.

Human-written (YAML or JSON), so unknown keys fail; every error names the file and the field
path, e.g. `fleet.yaml: pairs[2].faults.error_rate: ...`. Durations are float seconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from contracts.names import Family, Quantization

Ratio = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=0.0, le=3600.0, allow_inf_nan=False)]
DEFAULT_ACCURACY = 0.5
IMAGE_TOKENS = 576  # prompt tokens per image part by default (a 336 px image, LLaVA-1.5)


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FaultConfig(_Config):
    """Failure injection for one pair; every rate is a per-request probability."""

    error_rate: Ratio = 0.0
    error_status: int = Field(default=503, ge=400, le=599)
    hang_rate: Ratio = 0.0
    slow_first_token_rate: Ratio = 0.0
    slow_first_token_s: Seconds = 0.0
    break_stream_rate: Ratio = 0.0
    break_after_chunks: int = Field(default=1, ge=0, le=1_000_000)
    refuse_connections: bool = False
    # Every answer goes silent (connection open, no bytes) after this many stream chunks, or
    # after half its body when not streamed, until the client leaves; None = never.
    stall_after_chunks: int | None = Field(default=None, ge=0, le=1_000_000)
    # Every request's prefill and per-token times multiplied by this (a slower engine at run
    # time: noisy neighbour, new engine version); 1 = as configured.
    slowdown_factor: float = Field(default=1.0, ge=1.0, le=100.0, allow_inf_nan=False)
    # Subtracted from every category's configured accuracy (a checkpoint that degrades on
    # production inputs); 0 = as configured.
    accuracy_drop: Ratio = 0.0
    # Requests whose prompt text contains this marker wait `slow_prompt_s` longer for their
    # first token (a kind of request one client sends that the engine is slow on, e.g. guided
    # decoding or a LoRA swap, while its other requests are as fast as ever); None = none.
    slow_prompt_marker: str | None = Field(default=None, min_length=1, max_length=200)
    slow_prompt_s: Seconds = 0.0


class SimPairConfig(_Config):
    """One simulated engine: served name, latency model, limits, accuracy and faults."""

    name: str = Field(min_length=1, max_length=200)
    family: Family
    quantization: Quantization
    port: int = Field(default=0, ge=0, le=65535)
    ttft_base_s: Seconds
    ttft_per_input_token_s: Seconds = 0.0
    tpot_base_s: Seconds
    tpot_per_running_s: Seconds = 0.0
    max_running: int = Field(default=8, ge=1, le=100_000)
    max_queue: int = Field(default=256, ge=0, le=1_000_000)
    context_length: int = Field(default=4096, ge=16, le=10_000_000)
    chars_per_token: float = Field(default=4.0, gt=0.0, le=100.0, allow_inf_nan=False)
    json_chars_per_token: float = Field(
        default=3.0,
        gt=0.0,
        le=100.0,
        allow_inf_nan=False,
        description="characters per token of a `tools` schema's JSON: a tokenizer splits JSON "
        "finer than prose (1.28-1.39x more tokens with gemma-3-270m's, docs/data_plane.md)",
    )
    image_tokens: int = Field(
        default=IMAGE_TOKENS,
        ge=1,
        le=1_000_000,
        description="prompt tokens of one image part (576: a 336 px image in LLaVA-1.5; "
        "Qwen2-VL and Gemma 3 use 256, LLaVA-NeXT up to 2,880): what the profiler measures "
        '(docs/profiler.md, "Tokens per image")',
    )
    tokenizer: Path | None = Field(
        default=None,
        description="a tokenizer.json: prompt tokens are its counts of each turn's text and "
        "the tools' JSON (chars_per_token and json_chars_per_token unused), and /v1/models "
        "names its directory as root, where the profiler finds it",
    )
    template_tokens: tuple[int, int] = Field(
        default=(0, 0),
        description="with a `tokenizer`: the chat template's own tokens, (per prompt, per "
        "turn), as a real template's BOS, generation prompt and turn markers",
    )
    template_renders_tools: bool = Field(
        default=True,
        description="with a `tokenizer`: whether the chat template renders `tools` (Gemma's "
        "turn format renders none: their tokens are not counted)",
    )
    special_tokens: int = Field(
        default=0,
        ge=0,
        le=64,
        description="with a `tokenizer`: the tokens added to each completions prompt's text "
        "(the tokenizer's BOS, which vLLM's /v1/completions adds by default: 1 for Gemma)",
    )
    accuracy: dict[str, Ratio] = Field(default_factory=dict)
    jitter_ratio: Ratio = 0.0
    default_max_tokens: int = Field(default=16, ge=1, le=1_000_000)
    seed: int = 0
    faults: FaultConfig = Field(default_factory=FaultConfig)

    def accuracy_for(self, category: str) -> float:
        """Probability of the right answer for `category` (0.5 when not configured)."""
        return self.accuracy.get(category, DEFAULT_ACCURACY)


class SimFleetConfig(_Config):
    """Every simulated pair of one process; `answer_keys` are JSONL files (see answer_key.py)."""

    pairs: list[SimPairConfig] = Field(min_length=1)
    answer_keys: list[Path] = Field(default_factory=list)

    @model_validator(mode="after")
    def _distinct(self) -> SimFleetConfig:
        names = [p.name for p in self.pairs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"pair names must be distinct, repeated: {dupes}")
        ports = [p.port for p in self.pairs if p.port]
        taken = sorted({p for p in ports if ports.count(p) > 1})
        if taken:
            raise ValueError(f"explicit ports must be distinct, repeated: {taken}")
        return self

    def pair(self, name: str) -> SimPairConfig:
        """The pair serving `name`; KeyError names the known ones."""
        for pair in self.pairs:
            if pair.name == name:
                return pair
        raise KeyError(f"no simulated pair {name!r}; known: {[p.name for p in self.pairs]}")


class FleetConfigError(ValueError):
    """A fleet file that cannot be used; `problems` are `path: message` lines."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + f"; {source}: ".join(problems))


def format_loc(loc: tuple[int | str, ...]) -> str:
    """Pydantic's error location as a field path: `pairs[2].faults.error_rate`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(root)"


def parse_fleet(data: Any, source: str = "<fleet>", base_dir: Path | None = None) -> SimFleetConfig:
    """Validate fleet data; relative answer-key paths resolve against `base_dir`."""
    if not isinstance(data, dict):
        raise FleetConfigError(source, ["(root): must be a mapping with a `pairs` list"])
    try:
        fleet = SimFleetConfig.model_validate(data)
    except ValidationError as err:
        problems = [f"{format_loc(tuple(e['loc']))}: {e['msg']}" for e in err.errors()]
        raise FleetConfigError(source, problems) from err
    if base_dir is None:
        return fleet
    keys = [k if k.is_absolute() else base_dir / k for k in fleet.answer_keys]
    return fleet.model_copy(update={"answer_keys": keys})


def load_fleet(path: str | Path) -> SimFleetConfig:
    """Read a YAML or JSON fleet file; errors name the file and the field path."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise FleetConfigError(str(path), [f"(file): cannot read: {err.strerror}"]) from err
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as err:
        raise FleetConfigError(str(path), [f"(file): not valid YAML/JSON: {err}"]) from err
    return parse_fleet(data, str(path), path.parent)
