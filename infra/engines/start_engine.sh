#!/usr/bin/env bash
# Start one real vLLM CPU engine in the foreground (exec: this process becomes the server).
#   bash infra/engines/start_engine.sh VARIANT PORT [engines.py start options] [-- vllm args]
# VARIANT: bf16 | w8a8 | w4a16 | fp8 (bf16 weights, --quantization fp8_per_block)
#          | fp8kv (bf16 weights, --kv-cache-dtype fp8).
# Refuses with a clear message when MemAvailable is too low (see `make demo-sim`).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 VARIANT PORT [--kv-gib N] [--all-cpus] [--compiled] [-- vllm serve args]" >&2
  exit 2
fi
variant=$1 port=$2
shift 2
exec python3 "$(dirname "$0")/engines.py" start "$variant" --port "$port" "$@"
