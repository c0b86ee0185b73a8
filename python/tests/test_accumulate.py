"""GradMode::kAccumulate through MoELayer(grad_mode="accumulate"): weight gradients added into fp32 main_grad."""

import pytest
import torch

from harness import add_main_grads, make_module, run_module, weights_of
from moe_reference import assert_bitwise_equal, bits, random_problem

SHAPE = (33, 24, 16, 6, 2, (16, 8))


def test_accumulate_equals_fresh(seed):
    """From zero, main_grad holds the fp32 sum whose bf16 rounding is the fresh gradient (docs/semantics.md
    section 5); dx and d_router_weights do not depend on the mode."""
    p = random_problem(*SHAPE, routing="unused_slots", seed=seed)
    fresh = run_module(make_module(p), p)
    module = make_module(p, grad_mode="accumulate")
    add_main_grads(module)
    accumulated = run_module(module, p)
    assert all(w.grad is None for w in module.parameters())
    assert all(g.dtype == torch.float32 for g in accumulated.weight_grads)
    accumulated.weight_grads = [g.to(torch.bfloat16) for g in accumulated.weight_grads]
    assert_bitwise_equal(fresh, accumulated)


def test_accumulate_adds(seed):
    p = random_problem(*SHAPE, routing="skewed", seed=seed)
    module = make_module(p, grad_mode="accumulate")
    add_main_grads(module)
    once = run_module(module, p).weight_grads
    start = [torch.randn(w.shape) for w in weights_of(module)]
    for w, s in zip(weights_of(module), start):
        w.main_grad.copy_(s)
    x = p.x.clone().requires_grad_()
    module(x, p.expert_ids, p.router_weights).backward(p.dy)
    for w, s, g in zip(weights_of(module), start, once):
        # One fp32 addition of the finished sum to what main_grad held.
        assert torch.equal(bits(w.main_grad), bits(s + g))


def test_accumulate_needs_main_grad():
    p = random_problem(*SHAPE, seed=1)
    module = make_module(p, grad_mode="accumulate")
    with pytest.raises(ValueError, match=r"'expert_gate\.main_grad'"):
        module(p.x, p.expert_ids, p.router_weights)


def test_accumulate_checks_main_grad_dtype():
    p = random_problem(*SHAPE, seed=2)
    module = make_module(p, grad_mode="accumulate")
    add_main_grads(module)
    module.shared[1].down.main_grad = torch.zeros(module.shared[1].down.shape, dtype=torch.bfloat16)
    y = module(p.x.clone().requires_grad_(), p.expert_ids, p.router_weights)
    with pytest.raises(ValueError, match=r"d_shared\[1\]\.down.*fp32"):
        y.backward(p.dy)
