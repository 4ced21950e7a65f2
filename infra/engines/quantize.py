"""Quantize the bf16 checkpoint with llmcompressor GPTQ (W8A8 or W4A16) on CPU, from local text.

Runs inside the quantization venv (llmcompressor, datasets). Calibration uses the short lines
of `calibration.txt` beside this file, never a hub data set. Writes into `--out`; the caller
renames it into place only after this script succeeds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch  # type: ignore[import-not-found, unused-ignore]
from datasets import Dataset  # type: ignore[import-not-found, import-untyped, unused-ignore]
from llmcompressor import oneshot  # type: ignore[import-not-found, unused-ignore]
from llmcompressor.modifiers.quantization import (  # type: ignore[import-not-found, unused-ignore]
    GPTQModifier,
)
from transformers import (  # type: ignore[import-not-found, unused-ignore]
    AutoModelForCausalLM,
    AutoTokenizer,
)

SCHEMES = ("W8A8", "W4A16")
NUM_SAMPLES = 64
MAX_SEQ_TOKENS = 128
CALIBRATION = Path(__file__).with_name("calibration.txt")


def calibration_texts(path: Path, count: int) -> list[str]:
    """`count` samples from the file's lines (`\\n` escapes become newlines), cycled if short."""
    lines = [ln.replace("\\n", "\n") for ln in path.read_text().splitlines() if ln.strip()]
    if not lines:
        raise SystemExit(f"{path} holds no calibration text")
    return [lines[i % len(lines)] for i in range(count)]


def calibration_set(tokenizer: object, texts: list[str]) -> Dataset:
    encoded = tokenizer(texts, truncation=True, max_length=MAX_SEQ_TOKENS)  # type: ignore[operator]
    return Dataset.from_dict(
        {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}
    )


def quantize(src: Path, out: Path, scheme: str) -> None:
    tokenizer = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
    dataset = calibration_set(tokenizer, calibration_texts(CALIBRATION, NUM_SAMPLES))
    recipe = GPTQModifier(targets="Linear", scheme=scheme, ignore=["lm_head"])
    oneshot(
        model=model,
        dataset=dataset,
        recipe=recipe,
        max_seq_length=MAX_SEQ_TOKENS,
        num_calibration_samples=NUM_SAMPLES,
    )
    model.save_pretrained(out, save_compressed=True)
    tokenizer.save_pretrained(out)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--src", type=Path, required=True, help="the bf16 checkpoint")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--scheme", choices=SCHEMES, required=True)
    args = parser.parse_args(argv)
    quantize(args.src, args.out, args.scheme)
    config = (args.out / "config.json").read_text()
    if "quantization_config" not in config:
        raise SystemExit(f"{args.out}/config.json carries no quantization_config")
    print(f"gearbox: wrote {args.scheme} checkpoint to {args.out}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
