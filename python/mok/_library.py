"""Loads libmok_torch.so, the C++ half of the binding, which registers the torch.ops.mok operators."""

import os

import torch

LIBRARY_ENV = "MOK_TORCH_LIBRARY"
LIBRARY_NAME = "libmok_torch.so"


def load() -> None:
    # The library is a build product, not part of the source tree: $MOK_TORCH_LIBRARY names it (python/run_tests.sh
    # sets it), or it sits next to this file in an installed copy of the package.
    path = os.environ.get(LIBRARY_ENV) or os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY_NAME)
    if not os.path.isfile(path):
        raise ImportError(
            f"mok: the binding library {path} does not exist. Build it with "
            f"'cmake -S . -B build-py -DMOK_BUILD_PYTHON=ON && cmake --build build-py --target mok_torch' "
            f"(python/README.md) and set {LIBRARY_ENV} to build-py/python/{LIBRARY_NAME}."
        )
    torch.ops.load_library(path)
