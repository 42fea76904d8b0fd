#!/usr/bin/env bash
# device_check.sh [--dry-run]: the one-call GPU check (gpu_check.sh).
#   On the GPU machine, from the repository root, with .gpucheck/ carried along and OUT set:
#       OUT=$OUT BUDGET_S=480 bash benchmarks/gpu/device_check.sh      (log in $OUT/log)
#   Here, without a GPU, after prepare.sh:
#       bash benchmarks/gpu/device_check.sh --dry-run
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# the carried folder holds the wheels; this checkout's script goes with them
if [ -d "$ROOT/.gpucheck" ] && [ "$HERE/gpu_check.sh" -nt "$ROOT/.gpucheck/gpu_check.sh" ]; then
  cp "$HERE/gpu_check.sh" "$ROOT/.gpucheck/gpu_check.sh"
fi
SCRIPT=$ROOT/.gpucheck/gpu_check.sh
[ -f "$SCRIPT" ] || SCRIPT=$HERE/gpu_check.sh
cd "$ROOT" && exec bash "$SCRIPT" "$@"
