"""Expert parallelism across two processes, one GPU each: MoELayer(process_group=WORLD) against the same layer
without expert parallelism on the same global batch, bit for bit (docs/semantics.md section 7).

Runs under torchrun only:
    torchrun --nproc-per-node 2 -m pytest python/tests/test_ep2.py
and is skipped unless WORLD_SIZE is 2, two GPUs are visible and this build has the CUDA backend.
"""

import os

import pytest
import torch
import torch.distributed as dist

import mok
from conftest import cuda_backend_reason
from harness import make_module, run_module
from moe_reference import Results, assert_bitwise_equal, random_problem

NUM_RANKS = 2
TOKENS_PER_RANK = 256


def _skip_reason():
    if int(os.environ.get("WORLD_SIZE", "1")) != NUM_RANKS:
        return f"needs torchrun --nproc-per-node {NUM_RANKS}"
    if torch.cuda.device_count() < NUM_RANKS:
        return f"needs {NUM_RANKS} GPUs"
    return cuda_backend_reason()


_SKIP_REASON = _skip_reason()
pytestmark = [pytest.mark.ep2, pytest.mark.skipif(_SKIP_REASON is not None, reason=str(_SKIP_REASON))]


@pytest.fixture(scope="module")
def group():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    yield dist.group.WORLD
    dist.destroy_process_group()


@pytest.fixture
def shared_seed(group, seed):
    """Rank 0's seed on every rank: both must draw the same global batch."""
    value = torch.tensor([seed], dtype=torch.int64, device="cuda")
    dist.broadcast(value, src=0)
    return int(value.item())


@pytest.mark.parametrize("routing", ["uniform", "skewed", "unused_slots", "idle_experts"])
@pytest.mark.parametrize(
    "config", [mok.Config(), mok.Config(minibatch_rows=128, ring_rows=256)], ids=["default", "small_ring"]
)
def test_ep2_matches_ep1(group, shared_seed, routing, config):
    rank = dist.get_rank(group)
    p = random_problem(NUM_RANKS * TOKENS_PER_RANK, 256, 128, 16, 4, (128,), routing=routing, seed=shared_seed)
    whole = run_module(make_module(p, backend="cuda", config=config), p)

    module = make_module(p, backend="cuda", config=config, process_group=group)
    assert module.layer.ep_size == NUM_RANKS and module.first_expert == rank * 16 // NUM_RANKS
    tokens = slice(rank * TOKENS_PER_RANK, (rank + 1) * TOKENS_PER_RANK)
    mine = run_module(module, p, tokens=tokens)
    module.synchronize()
    experts = slice(module.first_expert, module.first_expert + module.layer.num_local_experts)
    # The shared experts' gradients are per-rank partial sums by definition (section 3): not compared.
    assert_bitwise_equal(
        Results(whole.y[tokens], whole.dx[tokens], whole.d_router_weights[tokens],
                [g[experts] for g in whole.weight_grads[:3]]),
        Results(mine.y, mine.dx, mine.d_router_weights, mine.weight_grads[:3]),
    )
    assert_bitwise_equal(mine, run_module(module, p, tokens=tokens))
