#!/usr/bin/env bash
# prepare.sh [CHECKOUT]: build CHECKOUT/.gpucheck/ (default: this repository) for the one-call
# GPU check, on a development machine with PyPI reachable: see gpu_check.sh "prepare".
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec bash "$HERE/gpu_check.sh" prepare "${1:-$(cd "$HERE/../.." && pwd)}"
