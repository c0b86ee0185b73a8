#!/usr/bin/env bash
# Builds the PyTorch binding and runs its tests: the CPU tests everywhere, the CUDA tests where a GPU and the CUDA
# backend are present, and the two-process expert-parallel test under torchrun where two GPUs are.
#   python/run_tests.sh [extra pytest arguments]
# Environment: PYTHON, the interpreter that has torch (default python3); MOK_PY_BUILD_DIR (default build-py);
# MOK_JOBS (default: all cores); MOK_ENABLE_CUDA=ON|OFF to override CMake's choice (on where nvcc is found).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=$(command -v "${PYTHON:-python3}")
build=${MOK_PY_BUILD_DIR:-$root/build-py}
# Absolute: pytest runs from python/, where a relative build folder would name another place.
mkdir -p "$build"
build=$(cd "$build" && pwd)
jobs=${MOK_JOBS:-$(nproc)}

cmake_args=(-DCMAKE_BUILD_TYPE=Release -DMOK_BUILD_PYTHON=ON -DMOK_BUILD_TESTS=OFF -DMOK_BUILD_BENCH=OFF
    "-DPython3_EXECUTABLE=$python")
if command -v ninja >/dev/null 2>&1; then
    cmake_args+=(-G Ninja)
fi
if [ -n "${MOK_ENABLE_CUDA:-}" ]; then
    cmake_args+=("-DMOK_ENABLE_CUDA=$MOK_ENABLE_CUDA")
fi
# torch loads its own NCCL (the nvidia-nccl pip package), so mok must be built against that one: the device API's
# structures have to match the library loaded at run time (cmake/nccl.cmake).
nccl_root=$("$python" - <<'PY'
import importlib.util
import os

spec = importlib.util.find_spec("nvidia.nccl")
paths = list(spec.submodule_search_locations or []) if spec else []
print(next((p for p in paths if os.path.isfile(os.path.join(p, "include", "nccl_device.h"))), ""))
PY
)
if [ -n "$nccl_root" ]; then
    cmake_args+=("-DMOK_NCCL_ROOT=$nccl_root")
fi

cmake -S "$root" -B "$build" "${cmake_args[@]}"
cmake --build "$build" --target mok_torch --parallel "$jobs"

export MOK_TORCH_LIBRARY=$build/python/libmok_torch.so
# NVLink multicast stays off (DEVELOPERS.md).
export NCCL_NVLS_ENABLE=0
cd "$root/python"
# Both suites run whatever the first gives; the script fails if either does.
status=0
"$python" -m pytest "$@" || status=$?
gpus=$("$python" -c "import torch; print(torch.cuda.device_count())")
if [ "$gpus" -ge 2 ]; then
    "$python" -m torch.distributed.run --nproc-per-node 2 -m pytest tests/test_ep2.py "$@" || status=$?
else
    echo "run_tests.sh: the two-process expert-parallel test needs 2 GPUs, $gpus visible: not run"
fi
exit "$status"
