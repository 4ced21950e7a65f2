"""Set up and start real vLLM CPU engines for Gearbox (stdlib only: runs with plain python3).

    python3 infra/engines/engines.py setup [--variants bf16,w8a8,w4a16]
    python3 infra/engines/engines.py start VARIANT --port PORT [--kv-gib 1] [--all-cpus]
    python3 infra/engines/engines.py check-memory [--engines 3] [--kv-gib 1]
    python3 infra/engines/engines.py paths [--json]
    python3 infra/engines/engines.py smoke VARIANT [--kv-gib 1] [--all-cpus]
    python3 infra/engines/engines.py capabilities [--json] [--variants ...]

Everything lives under $GEARBOX_CACHE_DIR (default ~/.cache/gearbox), keyed by the versions
pinned in engine.lock and quant.lock beside this file.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from capabilities import VARIANT_KERNELS, describe, probe_kernels, summary_lines, variant_problem
from launch import (
    ServeOptions,
    check_memory,
    missing_checkpoint,
    read_meminfo,
    serve_command,
    serve_env,
)
from layout import MARKER, VARIANTS, Layout, LayoutError, parse_variants
from progress import CommandError, say
from setup_steps import run_setup
from smoke import free_port, result_line, smoke

ALL_VARIANTS = "bf16,w8a8,w4a16"
CPUINFO = Path("/proc/cpuinfo")


def cache_root() -> Path:
    configured = os.environ.get("GEARBOX_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "gearbox"


def cmd_setup(args: argparse.Namespace) -> int:
    layout = Layout.load(cache_root())
    variants = parse_variants(args.variants)
    say(f"engine set-up for {', '.join(variants)} under {layout.root}")
    try:
        seconds = run_setup(layout, variants)
    except (CommandError, RuntimeError, OSError) as err:
        say(f"set-up failed: {err}")
        return 1
    try:
        cpuinfo = CPUINFO.read_text()
        kernels = probe_kernels(layout, cpuinfo)
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as err:
        say(f"set-up failed: {err}")
        return 1
    for line in summary_lines(describe(cpuinfo, kernels, tuple(VARIANT_KERNELS))):
        say(line)
    say(f"set-up complete in {seconds:.0f} s; start an engine with "
        f"`bash infra/engines/start_engine.sh {variants[0]} PORT`")  # fmt: skip
    return 0


def cmd_check_memory(args: argparse.Namespace) -> int:
    result = check_memory(args.engines, args.kv_gib, read_meminfo())
    say(result.message)
    return 0 if result.ok else 3


def cmd_paths(args: argparse.Namespace) -> int:
    described = Layout.load(cache_root()).describe()
    if args.json:
        say(json.dumps(described, indent=2))
    else:
        for key, value in described.items():
            say(f"{key:20} {value}")
    return 0


def startup_problem(layout: Layout, variant: str) -> str | None:
    """Why `variant` cannot start here (not set up, or this CPU lacks its kernels), else None."""
    missing = missing_checkpoint(layout, variant)
    if missing is not None:
        return missing
    cpuinfo = CPUINFO.read_text()
    return variant_problem(variant, cpuinfo, probe_kernels(layout, cpuinfo))


def cmd_capabilities(args: argparse.Namespace) -> int:
    """The CPU's ISA, vLLM's quantized CPU kernels, and which variants run here (and why not)."""
    layout = Layout.load(cache_root())
    cpuinfo = Path(args.cpuinfo).read_text()
    if args.kernels_json is not None:
        kernels = {k: bool(v) for k, v in json.loads(Path(args.kernels_json).read_text()).items()}
    elif not (layout.engine_venv / MARKER).is_file():
        say(f"{layout.engine_venv} is not set up; run `python3 infra/engines/engines.py setup`")
        return 2
    else:
        try:
            kernels = probe_kernels(layout, cpuinfo)
        except (RuntimeError, subprocess.SubprocessError) as err:
            say(str(err))
            return 1
    described = describe(cpuinfo, kernels, parse_variants(args.variants))
    if args.json:
        say(json.dumps(described, indent=2))
    else:
        for line in summary_lines(described):
            say(line)
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    layout = Layout.load(cache_root())
    opts = ServeOptions(
        port=args.port,
        kv_gib=args.kv_gib,
        eager=not args.compiled,
        all_cpus=args.all_cpus,
        max_model_len=args.max_model_len,
        served_model_name=args.served_model_name,
        host=args.host,
    )
    argv = serve_command(layout, args.variant, opts) + list(args.extra)
    env = serve_env(opts)
    if args.print_command:
        say(" ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + shlex.join(argv))
        return 0
    if (problem := startup_problem(layout, args.variant)) is not None:
        say(problem)
        return 2
    memory = check_memory(1, args.kv_gib, read_meminfo())
    if not memory.ok and not args.skip_memory_check:
        say(memory.message)
        return 3
    say(f"starting {args.variant} on {opts.host}:{opts.port}: {shlex.join(argv)}")
    os.execve(argv[0], argv, {**os.environ, **env})


def cmd_smoke(args: argparse.Namespace) -> int:
    layout = Layout.load(cache_root())
    if (problem := startup_problem(layout, args.variant)) is not None:
        say(problem)
        return 2
    memory = check_memory(1, args.kv_gib, read_meminfo())
    if not memory.ok:
        say(memory.message)
        return 3
    opts = ServeOptions(port=free_port(), kv_gib=args.kv_gib, all_cpus=args.all_cpus)
    log = layout.logs / f"smoke-{args.variant}.log"
    say(f"smoke test of {args.variant} on port {opts.port} (log: {log})")
    try:
        say(result_line(smoke(layout, args.variant, opts, log)))
    except (RuntimeError, OSError) as err:
        say(f"smoke test of {args.variant} failed: {err}; see {log}")
        return 1
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="engines.py", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = top.add_subparsers(dest="command", required=True)
    setup = sub.add_parser("setup", help="build venvs and checkpoints (idempotent)")
    setup.add_argument("--variants", default=ALL_VARIANTS, help=f"default {ALL_VARIANTS}")
    setup.set_defaults(func=cmd_setup)
    memory = sub.add_parser("check-memory", help="exit 3 when the engines would not fit")
    memory.add_argument("--engines", type=int, default=1)
    memory.add_argument("--kv-gib", type=int, default=1)
    memory.set_defaults(func=cmd_check_memory)
    paths = sub.add_parser("paths", help="print the cache layout")
    paths.add_argument("--json", action="store_true")
    paths.set_defaults(func=cmd_paths)
    start = sub.add_parser("start", help="exec `vllm serve` for one variant")
    start.add_argument("variant", choices=list(VARIANTS))
    start.add_argument("--port", type=int, required=True)
    start.add_argument("--host", default="127.0.0.1")
    start.add_argument("--kv-gib", type=int, default=1, help="VLLM_CPU_KVCACHE_SPACE (whole GiB)")
    start.add_argument("--max-model-len", type=int, default=2048)
    start.add_argument("--served-model-name", default=None)
    start.add_argument(
        "--compiled", action="store_true", help="drop --enforce-eager (slower start)"
    )
    start.add_argument("--all-cpus", action="store_true", help="VLLM_CPU_NUM_OF_RESERVED_CPU=0")
    start.add_argument("--skip-memory-check", action="store_true")
    start.add_argument("--print-command", action="store_true", help="print, do not start")
    start.add_argument("extra", nargs="*", help="after --: more `vllm serve` arguments")
    start.set_defaults(func=cmd_start)
    check = sub.add_parser("smoke", help="start, time, ask once, measure RSS, stop")
    check.add_argument("variant", choices=list(VARIANTS))
    check.add_argument("--kv-gib", type=int, default=1)
    check.add_argument("--all-cpus", action="store_true")
    check.set_defaults(func=cmd_smoke)
    caps = sub.add_parser("capabilities", help="the CPU's ISA, vLLM's kernels, what runs here")
    caps.add_argument("--json", action="store_true")
    caps.add_argument("--variants", default=",".join(VARIANT_KERNELS))
    caps.add_argument("--cpuinfo", default=str(CPUINFO), help="another machine's /proc/cpuinfo")
    caps.add_argument(
        "--kernels-json", default=None, help="a kernel probe's answer instead of probing"
    )
    caps.set_defaults(func=cmd_capabilities)
    return top


def main(argv: list[str]) -> int:
    # `start VARIANT ... -- VLLM ARGS`: argparse gives a `*` positional nothing once it matched
    # it empty before the options, so the words after `--` are split off here.
    vllm_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser().parse_args(argv[: len(argv) - len(vllm_args) - (1 if "--" in argv else 0)])
    if vllm_args:
        if args.func is not cmd_start:
            say("error: only `start` takes `-- vllm serve args`")
            return 2
        args.extra = [*args.extra, *vllm_args]
    try:
        return int(args.func(args))
    except LayoutError as err:
        say(f"error: {err}")
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
