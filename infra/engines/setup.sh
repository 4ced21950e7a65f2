#!/usr/bin/env bash
# Idempotent set-up of the real vLLM CPU engines (venvs + checkpoints) under the cache folder.
#   bash infra/engines/setup.sh [--variants bf16,w8a8,w4a16]
set -euo pipefail
exec python3 "$(dirname "$0")/engines.py" setup "$@"
