"""The determinism promise (docs/semantics.md section 7) through the binding, on the CPU reference: identical bits
from run to run, for every Config, at every EP degree, with recompute, and with several forwards in flight."""

import pytest
import torch

import mok
from harness import make_module, run_local_ranks, run_module
from moe_reference import Results, assert_bitwise_equal, random_problem

# T divisible by every EP degree below, with each rank's [T/R, k] block of the stacked routing tensors 16-byte
# aligned, as the contract wants every data pointer.
SHAPE = (64, 32, 16, 8, 3, (24,))


def test_repeat_runs(seed):
    p = random_problem(*SHAPE, routing="skewed", seed=seed)
    module = make_module(p)
    assert_bitwise_equal(run_module(module, p), run_module(module, p))


@pytest.mark.parametrize(
    "config",
    [
        mok.Config(minibatch_rows=128, ring_rows=128),
        mok.Config(minibatch_rows=256, ring_rows=1024, schedule_capacity_factor=8.0),
        mok.Config(num_comm_sms_forward=3, num_comm_sms_backward=5, peer_timeout_ms=100),
        mok.Config(gemm_pingpong=False),
        mok.Config(gemm_epilogue_warps=False),
        mok.Config(forward_combine="push"),
        mok.Config(forward_combine="down_stores"),
        mok.Config(dispatch_token_groups=True),
    ],
)
def test_every_config(config, seed):
    p = random_problem(*SHAPE, routing="unused_slots", seed=seed)
    assert_bitwise_equal(run_module(make_module(p), p), run_module(make_module(p, config=config), p))


@pytest.mark.parametrize("num_ranks", [2, 4, 8])
@pytest.mark.parametrize("routing", ["uniform", "skewed", "idle_experts"])
def test_every_ep_degree(num_ranks, routing, seed):
    """R simulated ranks against one on the same global batch: y, dx, d_router_weights and the routed experts'
    gradients are identical. The shared experts' gradients are per-rank partial sums by definition (section 3),
    so they are not compared."""
    p = random_problem(*SHAPE, routing=routing, seed=seed)
    one = run_local_ranks(p, 1)
    many = run_local_ranks(p, num_ranks)
    routed = slice(0, 3)
    assert_bitwise_equal(
        Results(one.y, one.dx, one.d_router_weights, one.weight_grads[routed]),
        Results(many.y, many.dx, many.d_router_weights, many.weight_grads[routed]),
    )


def test_module_matches_one_local_rank(seed):
    p = random_problem(*SHAPE, routing="uniform", seed=seed)
    assert_bitwise_equal(run_module(make_module(p), p), run_local_ranks(p, 1))


def test_recompute(seed):
    p = random_problem(*SHAPE, routing="skewed", seed=seed)
    assert_bitwise_equal(run_module(make_module(p), p), run_module(make_module(p, recompute=True), p))


def test_token_counts_change_between_calls(seed):
    """One layer object serves every token count: each call equals a fresh layer's."""
    p = random_problem(*SHAPE, routing="uniform", seed=seed)
    module = make_module(p)
    for tokens in (slice(0, 64), slice(0, 17), slice(4, 5), slice(0, 64)):
        assert_bitwise_equal(run_module(module, p, tokens=tokens), run_module(make_module(p), p, tokens=tokens))


def test_forwards_in_flight(seed):
    """Two forwards before one backward (gradient accumulation, pipelining): each keeps its own saved context."""
    p = random_problem(*SHAPE, routing="skewed", seed=seed)
    q = random_problem(*SHAPE, routing="uniform", seed=seed + 1)
    module = make_module(p)
    first = run_module(module, p)
    second = run_module(module, q)

    module.zero_grad(set_to_none=True)
    xp = p.x.clone().requires_grad_()
    xq = q.x.clone().requires_grad_()
    yp = module(xp, p.expert_ids, p.router_weights)
    yq = module(xq, q.expert_ids, q.router_weights)
    torch.autograd.backward([yq, yp], [q.dy, p.dy])
    assert torch.equal(xp.grad, first.dx) and torch.equal(xq.grad, second.dx)
    assert torch.equal(yp, first.y) and torch.equal(yq, second.y)
    # Autograd adds the two bf16 gradients; addition commutes, so the order of the backwards does not matter.
    assert torch.equal(module.expert_gate.grad, first.weight_grads[0] + second.weight_grads[0])
