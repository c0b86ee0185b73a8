#!/usr/bin/env bash
# Builds mok (the CPU parts, and every sm_90a kernel where nvcc is installed) and runs the CPU test suite.
# GPU tests are built too but run only on GPU machines (tools/gpu_runner.sh).
#   tools/test.sh [extra ctest arguments]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MOK_BUILD_DIR:-$root/build}
jobs=${MOK_JOBS:-$(nproc)}
generator=()
if command -v ninja >/dev/null 2>&1; then
    generator=(-G Ninja)
fi
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" --parallel "$jobs"
ctest --test-dir "$build" -L cpu --output-on-failure --parallel "$jobs" "$@"
