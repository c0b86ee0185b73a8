"""Bad input raises an exception whose message names the argument: the C++ API's Status messages for everything
the contract checks (ValueError for kInvalidArgument, NotImplementedError for kNotSupported, RuntimeError for the
rest), the binding's own for what it adds."""

import pytest
import torch

import mok
from harness import make_module
from moe_reference import random_problem

SHAPE = (16, 32, 16, 4, 2, (8,))


@pytest.fixture
def problem(seed):
    return random_problem(*SHAPE, seed=seed)


@pytest.fixture
def module(problem):
    return make_module(problem)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        (dict(hidden=12), r"options\.shape\.hidden"),
        (dict(expert_width=0), r"options\.shape\.expert_width"),
        (dict(top_k=5), r"options\.shape\.top_k"),
        (dict(shared_expert_widths=(8, 20)), r"options\.shape\.shared_expert_widths\[1\]"),
        (dict(config=mok.Config(minibatch_rows=100)), r"options\.config\.minibatch_rows"),
        (dict(config=mok.Config(ring_rows=128 * 3, minibatch_rows=256)), r"options\.config\.ring_rows"),
        (dict(config=mok.Config(peer_timeout_ms=0)), r"options\.config\.peer_timeout_ms"),
        (dict(config=mok.Config(forward_combine="pull")), r"'forward_combine'"),
        (dict(backend="tpu"), r"'backend'"),
        (dict(grad_mode="sum"), r"'grad_mode'"),
    ],
)
def test_bad_options(kwargs, argument):
    options = dict(hidden=32, expert_width=16, num_experts=4, top_k=2, backend="cpu")
    options.update(kwargs)
    with pytest.raises(ValueError, match=argument):
        mok.MoELayer(**options)


def test_bad_topology():
    with pytest.raises(ValueError, match=r"options\.shape\.num_experts.*multiple of topology\.ep_size"):
        mok.Layer(32, 16, 6, 2, ep_size=4)
    with pytest.raises(ValueError, match=r"options\.topology\.num_local_ranks"):
        mok.Layer(32, 16, 8, 2, ep_size=2, num_local_ranks=3)


def test_cpu_backend_runs_every_rank_locally():
    with pytest.raises(NotImplementedError, match="simulates the whole EP group"):
        mok.Layer(32, 16, 8, 2, ep_size=2, first_local_rank=1, num_local_ranks=1)
    with pytest.raises(ValueError, match=r"options\.device"):
        mok.Layer(32, 16, 8, 2, device="cuda:0")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible")
def test_cuda_backend_without_a_device():
    """Without a GPU (or without the CUDA backend in this build) a CUDA layer is valid input mok cannot run."""
    with pytest.raises(NotImplementedError, match=r"Backend::kCuda"):
        mok.Layer(32, 16, 8, 2, backend="cuda", device="cuda:0")


def test_communicator_arguments():
    """A build with the CUDA backend makes NCCL ids (no GPU needed); one without says so."""
    try:
        unique_id = torch.ops.mok.make_unique_id()
    except NotImplementedError as error:
        assert "CUDA backend" in str(error)
    else:
        assert unique_id.dtype == torch.uint8 and unique_id.shape == (128,)
    with pytest.raises(ValueError, match=r"'unique_id'.*128-byte"):
        torch.ops.mok.create_communicator(torch.zeros(3, dtype=torch.uint8), 0, 2, 0)
    with pytest.raises(ValueError, match=r"'communicator'"):
        mok.Layer(32, 16, 8, 2, communicator=type("Fake", (), {"id": 12345})())


def _padded(t):
    """`t` in storage with padded rows: each row still unit-stride and aligned, but not dense."""
    padded = t.new_zeros(t.shape[0], t.shape[1] + 4)
    padded[:, : t.shape[1]] = t
    return padded[:, : t.shape[1]]


def _call(module, p, **replace):
    args = dict(x=p.x, expert_ids=p.expert_ids, router_weights=p.router_weights)
    args.update(replace)
    return module(**args)


@pytest.mark.parametrize(
    "make, argument",
    [
        (lambda p: dict(x=p.x.float()), r"inputs\.x'.*bf16"),
        (lambda p: dict(x=p.x[:, :24]), r"inputs\.x'.*\[T, H\]"),
        (lambda p: dict(x=p.x[:15]), r"inputs\.expert_ids'.*\[T, k\]"),
        (lambda p: dict(x=p.x.half()), r"'x'.*bfloat16, float32 or int32.*torch\.float16"),
        (lambda p: dict(x=p.x[None]), r"'x'.*2-D"),
        (lambda p: dict(expert_ids=p.expert_ids.long()), r"'expert_ids'.*int32.*torch\.int64"),
        (lambda p: dict(expert_ids=p.expert_ids.T.contiguous().T), r"inputs\.expert_ids'.*unit stride"),
        (lambda p: dict(expert_ids=_padded(p.expert_ids)), r"inputs\.expert_ids'.*dense"),
        (lambda p: dict(router_weights=p.router_weights.bfloat16()), r"inputs\.router_weights'.*fp32"),
    ],
)
def test_bad_tensors(module, problem, make, argument):
    with pytest.raises(ValueError, match=argument):
        _call(module, problem, **make(problem))


def test_expert_weights_checked(module, problem):
    with torch.no_grad():
        module.expert_down.data = module.expert_down.data.float()
    with pytest.raises(ValueError, match=r"inputs\.experts\.down'"):
        _call(module, problem)


def test_routing_values(module, problem):
    ids = problem.expert_ids.clone()
    ids[3, 1] = 4
    with pytest.raises(ValueError, match=r"inputs\.expert_ids\[3\]\[1\]'.*\[0, 4\)"):
        _call(module, problem, expert_ids=ids)
    ids = problem.expert_ids.clone()
    ids[5] = torch.tensor([2, 2], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"inputs\.expert_ids\[5\]\[1\]'.*at most once"):
        _call(module, problem, expert_ids=ids)
    weights = problem.router_weights.clone()
    weights[7, 0] = float("nan")
    with pytest.raises(ValueError, match=r"inputs\.router_weights\[7\]\[0\]'.*finite"):
        _call(module, problem, router_weights=weights)


def test_no_tokens(module, problem):
    with pytest.raises(ValueError, match=r"options\.shape\.tokens_per_rank"):
        _call(module, problem, x=problem.x[:0], expert_ids=problem.expert_ids[:0],
              router_weights=problem.router_weights[:0])


def test_schedule_overflow():
    """Routing that needs more rows than the schedule holds is an error, nothing is dropped."""
    # Capacity: the balanced load (512 tokens x 2 slots) plus a row tile per local expert, 1536 rows; every token
    # of both ranks goes to experts 0 and 1 of rank 0, 2048 rows.
    layer = mok.Layer(32, 16, 8, 2, ep_size=2, config=mok.Config(schedule_capacity_factor=1.0))
    p = random_problem(1024, 32, 16, 8, 2, seed=5)
    ids = torch.tensor([0, 1], dtype=torch.int32).repeat(2, 512, 1)
    stacked = [w.reshape(2, 4, *w.shape[1:]) for w in (p.gate, p.up, p.down)]
    with pytest.raises(RuntimeError, match="schedule overflow.*rank 0"):
        mok.moe(layer, p.x.reshape(2, 512, 32), ids, p.router_weights.reshape(2, 512, 2), *stacked)


def test_stacking(problem):
    layer = mok.Layer(32, 16, 4, 2, (8,), ep_size=2)
    x = problem.x.reshape(2, 8, 32)
    args = [problem.expert_ids.reshape(2, 8, 2), problem.router_weights.reshape(2, 8, 2)]
    weights = [w.reshape(2, 2, *w.shape[1:]) for w in (problem.gate, problem.up, problem.down)]
    shared = [[w.expand(2, *w.shape) for w in problem.shared[0]]]
    with pytest.raises(ValueError, match=r"'expert_ids'.*leading local-rank dimension of 2"):
        mok.moe(layer, x, args[0][:1], args[1], *weights, shared)
    with pytest.raises(ValueError, match=r"'x'.*\[L, T, H\]"):
        mok.moe(layer, problem.x, *args, *weights, shared)
    with pytest.raises(ValueError, match=r"'shared'.*multiple of 3"):
        torch.ops.mok.forward(x, *args, *weights, shared[0][:2], layer.id)
    with pytest.raises(ValueError, match=r"inputs\.shared'.*1 shared experts"):
        mok.moe(layer, x, *args, *weights, [])


def test_layer_and_context_ids(problem):
    one = mok.Layer(32, 16, 4, 2)
    other = mok.Layer(32, 16, 4, 2)
    inputs = [problem.x[None], problem.expert_ids[None], problem.router_weights[None], problem.gate[None],
              problem.up[None], problem.down[None], []]
    y, context = torch.ops.mok.forward(*inputs, one.id)
    with pytest.raises(ValueError, match=r"'context'.*of layer"):
        torch.ops.mok.backward(problem.dy[None], *inputs, other.id, context)
    with pytest.raises(ValueError, match=r"'context'"):
        torch.ops.mok.backward(problem.dy[None], *inputs, one.id, torch.zeros(4, dtype=torch.int64))
    # A copy of the context tensor does not keep the context: once the original is freed, it is refused.
    copy = context.clone()
    del context
    with pytest.raises(ValueError, match=r"'context'.*released"):
        torch.ops.mok.backward(problem.dy[None], *inputs, one.id, copy)
    one.close()
    with pytest.raises(ValueError, match=r"'layer'"):
        torch.ops.mok.forward(*inputs, one.id)
