"""The binding on Backend::kCuda, one GPU: results against the oracle within the tolerance model (the CPU
reference as the same-precision result), determinism, virtual ranks, torch's current stream, torch.compile, and
device-side errors through synchronize(). Skipped without a GPU or without the CUDA backend in this build."""

import pytest
import torch

import mok
from harness import add_main_grads, make_module, run_local_ranks, run_module
from moe_reference import ROUTINGS, Results, assert_bitwise_equal, judge, oracle, random_problem

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("cuda_backend")]

SHAPES = {
    # (T, H, I, E, k, shared widths): partial GEMM tiles everywhere, then a DeepSeek-like narrow expert shape.
    "small": (200, 136, 72, 8, 3, (40,)),
    "no_shared": (333, 256, 128, 16, 4, ()),
    "wide": (256, 1024, 256, 32, 8, (512,)),
}


def cpu(results: Results) -> Results:
    return Results(
        results.y.cpu(), results.dx.cpu(), results.d_router_weights.cpu(), [g.cpu() for g in results.weight_grads]
    )


def gpu_module(p, **kwargs):
    return make_module(p, backend="cuda", device="cuda", **kwargs)


@pytest.mark.parametrize("routing", ROUTINGS)
@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
def test_matches_oracle(shape, routing, seed):
    p = random_problem(*SHAPES[shape], routing=routing, seed=seed)
    got = cpu(run_module(gpu_module(p), p))
    same_precision = run_module(make_module(p), p)
    want = oracle(p)
    for (name, g), (_, s), (_, w) in zip(got.named(), same_precision.named(), want.named()):
        judge(name, g, s, w)


def test_repeat_runs(seed):
    p = random_problem(*SHAPES["small"], routing="skewed", seed=seed)
    module = gpu_module(p)
    assert_bitwise_equal(run_module(module, p), run_module(module, p))


@pytest.mark.parametrize(
    "config",
    [
        mok.Config(minibatch_rows=128, ring_rows=256),
        mok.Config(num_comm_sms_forward=4, num_comm_sms_backward=24, minibatch_rows=256),
        mok.Config(schedule_capacity_factor=2.0),
    ],
)
def test_every_config(config, seed):
    p = random_problem(*SHAPES["no_shared"], routing="unused_slots", seed=seed)
    assert_bitwise_equal(run_module(gpu_module(p), p), run_module(gpu_module(p, config=config), p))


@pytest.mark.parametrize("num_ranks", [2, 4])
def test_virtual_ranks(num_ranks, seed):
    """Every EP rank on one GPU against one rank, on the same global batch (routed experts' gradients only:
    the shared experts' are per-rank partial sums)."""
    p = random_problem(256, 128, 64, 8, 2, (64,), routing="skewed", seed=seed)
    one = run_local_ranks(p, 1, backend="cuda", device="cuda:0")
    many = run_local_ranks(p, num_ranks, backend="cuda", device="cuda:0")
    routed = slice(0, 3)
    assert_bitwise_equal(
        Results(one.y, one.dx, one.d_router_weights, one.weight_grads[routed]),
        Results(many.y, many.dx, many.d_router_weights, many.weight_grads[routed]),
    )


def test_runs_on_the_current_stream(seed):
    """The layer's inputs are written on a side stream after a long delay there; a layer that ran on another
    stream would read them too early."""
    p = random_problem(*SHAPES["small"], seed=seed)
    module = gpu_module(p)
    want = run_module(module, p)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        delay = torch.randn(4096, 4096, device="cuda")
        for _ in range(20):
            delay = delay @ delay
            delay /= delay.norm()
        x = (p.x.cuda() + 0 * delay[0, 0].to(torch.bfloat16)).requires_grad_()
        router_weights = p.router_weights.cuda().requires_grad_()
        y = module(x, p.expert_ids.cuda(), router_weights)
        module.zero_grad(set_to_none=True)
        y.backward(p.dy.cuda())
        late = Results(y.detach(), x.grad, router_weights.grad, [module.expert_gate.grad])
    torch.cuda.current_stream().wait_stream(side)
    assert_bitwise_equal(Results(want.y, want.dx, want.d_router_weights, want.weight_grads[:1]), late)


def test_compiled(seed):
    torch._dynamo.reset()
    p = random_problem(*SHAPES["small"], routing="unused_slots", seed=seed)
    module = gpu_module(p)
    assert_bitwise_equal(run_module(module, p), run_module(module, p, call=torch.compile(module, fullgraph=True)))


def test_recompute_and_accumulate(seed):
    p = random_problem(*SHAPES["small"], seed=seed)
    fresh = run_module(gpu_module(p), p)
    assert_bitwise_equal(fresh, run_module(gpu_module(p, recompute=True), p))
    module = gpu_module(p, grad_mode="accumulate")
    add_main_grads(module)
    accumulated = run_module(module, p)
    accumulated.weight_grads = [g.to(torch.bfloat16) for g in accumulated.weight_grads]
    assert_bitwise_equal(fresh, accumulated)


def test_tensors_on_the_wrong_device(seed):
    p = random_problem(*SHAPES["small"], seed=seed)
    module = gpu_module(p)
    with pytest.raises(ValueError, match=r"inputs\.x'.*cuda:0"):
        module(p.x, p.expert_ids.cuda(), p.router_weights.cuda())


def test_synchronize_reports_schedule_overflow(seed):
    """Overflow found on the GPU comes back from synchronize() (or from the call, where the host sees it first),
    and the next step runs normally."""
    # Capacity at factor 0.5: the balanced load's half, 1024 rows, plus a row tile per expert, 2048 rows.
    config = mok.Config(schedule_capacity_factor=0.5)
    p = random_problem(1024, 128, 64, 8, 2, seed=seed)
    module = gpu_module(p, config=config)
    # 1023 tokens on experts 0 and 1 and one on 2 and 3: 2 x 1024 + 2 x 128 padded rows.
    crowded = torch.tensor([0, 1], dtype=torch.int32).repeat(1024, 1)
    crowded[0] = torch.tensor([2, 3], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="schedule overflow"):
        module(p.x.cuda(), crowded.cuda(), p.router_weights.cuda())
        module.synchronize()
    module.synchronize()
    # One slot per token: at most 1024 rows plus 8 x 127 of padding, within the capacity.
    p.expert_ids[:, 1] = -1
    assert_bitwise_equal(run_module(gpu_module(p), p), run_module(module, p))
    module.synchronize()
