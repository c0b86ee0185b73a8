"""Seeds and skips shared by the binding's tests.

Seeds are fresh every run and reproducible from the report header, as in the C++ tests (tests/common/test_seed.hpp):
MOK_TEST_SEED replays a run.
"""

import os
import random
import zlib

import pytest
import torch

import mok

_BASE_SEED = int(os.environ.get("MOK_TEST_SEED", "0"), 0) or random.SystemRandom().getrandbits(63)


def pytest_report_header(config):
    return f"mok test seed: {_BASE_SEED} (replay with MOK_TEST_SEED={_BASE_SEED})"


def case_seed(name: str) -> int:
    """A seed per test case, derived from the run's base seed and the case's name (splitmix64's mixing step)."""
    mask = (1 << 64) - 1
    z = (_BASE_SEED + (zlib.crc32(name.encode()) + 1) * 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return (z ^ (z >> 31)) & ((1 << 63) - 1)


@pytest.fixture
def seed(request) -> int:
    return case_seed(request.node.nodeid)


def cuda_backend_reason():
    """Why the CUDA tests cannot run here, or None when they can."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    try:
        mok.Layer(8, 8, 1, 1, backend="cuda", device="cuda:0").close()
    except NotImplementedError as error:
        return f"this mok build cannot run Backend::kCuda: {error}"
    return None


@pytest.fixture(scope="session")
def cuda_backend():
    reason = cuda_backend_reason()
    if reason is not None:
        pytest.skip(reason)
