"""The layer's outputs and gradients against the plain PyTorch implementation of the same math (moe_reference.py),
on the CPU reference backend, judged by the one tolerance model (reference/tolerance.hpp)."""

import pytest
import torch

from harness import make_module, run_module
from moe_reference import ROUTINGS, judge, oracle, random_problem, same_precision

SHAPES = {
    # (T, H, I, E, k, shared widths); T odd, sizes off every power of two where the rules allow.
    "no_shared": (37, 40, 24, 8, 3, ()),
    "one_shared": (29, 32, 16, 6, 2, (24,)),
    "two_shared": (19, 24, 32, 5, 5, (8, 40)),
    "top_1": (23, 16, 8, 4, 1, (16,)),
}


@pytest.mark.parametrize("routing", ROUTINGS)
@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
def test_matches_pytorch_reference(shape, routing, seed):
    p = random_problem(*SHAPES[shape], routing=routing, seed=seed)
    got = run_module(make_module(p), p)
    want = oracle(p)
    near = same_precision(p)
    for (name, g), (_, w), (_, n) in zip(got.named(), want.named(), near.named()):
        assert g.shape == w.shape, name
        judge(name, g, n, w)


def test_output_dtypes_and_unused_slots(seed):
    p = random_problem(*SHAPES["one_shared"], routing="unused_slots", seed=seed)
    got = run_module(make_module(p), p)
    assert got.y.dtype == torch.bfloat16 and got.dx.dtype == torch.bfloat16
    assert got.d_router_weights.dtype == torch.float32
    assert all(g.dtype == torch.bfloat16 for g in got.weight_grads)
    unused = p.expert_ids == -1
    assert unused.any()
    # The contract: an unused slot's router-weight gradient is exactly 0.
    assert torch.equal(got.d_router_weights[unused], torch.zeros(int(unused.sum())))
