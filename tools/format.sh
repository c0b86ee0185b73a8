#!/usr/bin/env bash
# Formats mok's C++ and CUDA sources in place with the repository's .clang-format.
#   tools/format.sh          every tracked source
#   tools/format.sh --check  list the files that differ, exit 1 if any
set -euo pipefail
cd "$(dirname "$0")/.."
# wgmma_instructions.cuh is generated (tools/gen_wgmma.py) and keeps its generator's layout.
mapfile -t files < <(git ls-files '*.hpp' '*.cpp' '*.cuh' '*.cu' | grep -v 'src/device/ptx/wgmma_instructions.cuh')
if [ "${1:-}" = "--check" ]; then
    status=0
    for f in "${files[@]}"; do
        if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
            echo "$f"
            status=1
        fi
    done
    exit $status
fi
clang-format -i "${files[@]}"
