"""torch.compile(fullgraph=True) traces the layer's forward and backward through the fake kernels (mok/ops.py)
and computes the eager bits; torch.library.opcheck checks the operators' registrations."""

import pytest
import torch

import mok
from harness import add_main_grads, make_module, run_module
from moe_reference import assert_bitwise_equal, random_problem

SHAPE = (24, 32, 16, 6, 2, (16,))


@pytest.fixture(autouse=True)
def fresh_compile_cache():
    torch._dynamo.reset()


@pytest.mark.parametrize(
    "options", [dict(), dict(recompute=True), dict(grad_mode="accumulate")], ids=["fresh", "recompute", "accumulate"]
)
def test_compiled_module_matches_eager(options, seed):
    p = random_problem(*SHAPE, routing="unused_slots", seed=seed)
    module = make_module(p, **options)
    if options.get("grad_mode") == "accumulate":
        add_main_grads(module)
    eager = run_module(module, p)
    compiled = torch.compile(module, fullgraph=True)
    assert_bitwise_equal(eager, run_module(module, p, call=compiled))


def test_compiled_in_a_model(seed):
    """The layer between ordinary PyTorch ops, with the routing computed inside the compiled graph."""
    p = random_problem(*SHAPE, seed=seed)
    num_experts, hidden = p.gate.shape[0], p.gate.shape[2]
    moe_layer = make_module(p)
    router = torch.nn.Linear(hidden, num_experts, dtype=torch.float32)

    def model(x):
        scores = router(x.float()).softmax(-1)
        weights, ids = scores.topk(2, dim=-1)
        return torch.nn.functional.layer_norm(moe_layer(x, ids.int(), weights).float(), (hidden,)).sum()

    def step(fn):
        moe_layer.zero_grad(set_to_none=True)
        router.zero_grad(set_to_none=True)
        x = p.x.clone().requires_grad_()
        fn(x).backward()
        return [x.grad, router.weight.grad, moe_layer.expert_gate.grad, moe_layer.shared[0].down.grad]

    eager = step(model)
    compiled = step(torch.compile(model, fullgraph=True))
    # Inductor generates its own kernels for the router and the norm, which round differently from eager PyTorch's:
    # only the layer's own bits are exact, so the comparison uses torch's default tolerances.
    for a, b in zip(eager, compiled):
        torch.testing.assert_close(a, b)


def test_dynamic_token_count(seed):
    p = random_problem(*SHAPE, seed=seed)
    module = make_module(p)
    compiled = torch.compile(module, fullgraph=True, dynamic=True)
    for tokens in (slice(0, 24), slice(0, 13), slice(4, 12)):
        assert_bitwise_equal(run_module(module, p, tokens=tokens), run_module(module, p, call=compiled, tokens=tokens))


def _op_args(p, layer):
    stacked = [t[None] for t in (p.x, p.expert_ids, p.router_weights, p.gate, p.up, p.down)]
    return stacked, [w[None] for triple in p.shared for w in triple]


def test_opcheck(seed):
    p = random_problem(*SHAPE, seed=seed)
    layer = mok.Layer(32, 16, 6, 2, (16,))
    inputs, shared = _op_args(p, layer)
    # The forward returns a fresh context tensor on each call (it names a pool slot, not a value computed from the
    # inputs), so the test that compares two calls' outputs does not apply to it.
    torch.library.opcheck(
        torch.ops.mok.forward.default,
        (*inputs, shared, layer.id),
        test_utils=["test_schema", "test_autograd_registration", "test_faketensor"],
    )
    _, context = torch.ops.mok.forward(*inputs, shared, layer.id)
    dy = p.dy[None]
    torch.library.opcheck(torch.ops.mok.backward.default, (dy, *inputs, shared, layer.id, context))
    main_grads = [torch.zeros(w.shape) for w in [*inputs[3:], *shared]]
    torch.library.opcheck(
        torch.ops.mok.backward_accumulate.default,
        (dy, *inputs, shared, *main_grads[:3], main_grads[3:], layer.id, context),
    )
    torch.library.opcheck(
        torch.ops.mok.recompute_forward.default,
        (*inputs, shared, layer.id),
        test_utils=["test_schema", "test_autograd_registration", "test_faketensor"],
    )
