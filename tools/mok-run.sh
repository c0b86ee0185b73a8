#!/usr/bin/env bash
# Builds and runs mok's main job: one MoE layer's forward and backward through the public API, with a report.
#   tools/mok-run.sh --model deepseek-v3 --tokens 4096 --ep 8      (mok-run --help lists every flag)
# Without a GPU it runs the CPU reference with simulated EP ranks at reduced sizes (the report says so);
# --backend cuda runs the GPU layer at full size on GPU 0 and prints the time per pass.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MOK_BUILD_DIR:-$root/build}
generator=()
if command -v ninja >/dev/null 2>&1; then
    generator=(-G Ninja)
fi
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target mok_run --parallel "${MOK_JOBS:-$(nproc)}" >/dev/null
exec "$build/tools/mok_run/mok-run" "$@"
