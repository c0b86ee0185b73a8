"""The layer baselines' correctness check: the layer against the fp32 loop-over-experts reference.

Run at reduced width with the case's k, EP degree, shared experts and routing, so it takes milliseconds and
exercises the same code as the timed case: the output, dx, the router-weight gradients and every weight
gradient are compared (relative Frobenius error, common.CHECK_TOLERANCE).
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
import torch.distributed as dist

import common
from common import DistContext, MoeShape
from moe_layer import MoeLayer, make_weights, reference_forward

# The check's reduced problem: small enough to be instant, wide enough for 16-byte GEMM rows.
CHECK_TOKENS = 96
CHECK_HIDDEN = 256
CHECK_WIDTH = 128


def check_sized(shape: MoeShape, ep: int) -> MoeShape:
    """Reduced width, at least k + 2 experts (a multiple of EP) so routing has choices on every rank."""
    experts = ep * math.ceil((shape.top_k + 2) / ep)
    return MoeShape(
        shape.name, experts, CHECK_HIDDEN, CHECK_WIDTH, shape.top_k, tuple(CHECK_WIDTH for _ in shape.shared_widths)
    )


def check_errors(
    ctx: DistContext,
    small: MoeShape,
    ep: int,
    rank: int,
    group: Optional[dist.ProcessGroup],
    make_exchange: Callable[[], object],
    routing: str,
    zipf_exponent: float,
    seed: int,
) -> dict[str, float]:
    """Relative errors of every output and gradient, the maximum over the ranks; `rank` is the rank in `group`."""
    local = small.experts // ep
    full = make_weights(small.experts, small.hidden, small.width, small.shared_widths, ctx.device, seed)
    weights = full.experts(rank * local, local)
    reference_weights = full.to(torch.float32)
    route = common.make_routing(CHECK_TOKENS * ep, small.experts, small.top_k, routing, zipf_exponent, seed)
    mine = route.for_rank(rank, CHECK_TOKENS, ctx.device)
    gen = torch.Generator(device=ctx.device).manual_seed(common.derived_seed(seed, "check inputs"))
    x_all = torch.randn(CHECK_TOKENS * ep, small.hidden, generator=gen, device=ctx.device).to(torch.bfloat16)
    dy_all = torch.randn(CHECK_TOKENS * ep, small.hidden, generator=gen, device=ctx.device).to(torch.bfloat16)
    rows = slice(rank * CHECK_TOKENS, (rank + 1) * CHECK_TOKENS)
    x = x_all[rows].clone().requires_grad_(True)
    router_weights = mine.weights.clone().requires_grad_(True)
    layer = MoeLayer(small, weights, make_exchange())
    y = layer(x, mine.ids, router_weights)
    y.backward(dy_all[rows])

    x_ref = x.detach().float().requires_grad_(True)
    router_ref = mine.weights.clone().requires_grad_(True)
    y_ref = reference_forward(x_ref, mine.ids, router_ref, reference_weights)
    y_ref.backward(dy_all[rows].float())
    # Routed experts' weight gradients sum over every rank's tokens; the reference saw this rank's only.
    if group is not None:
        for w in (reference_weights.gate_up, reference_weights.down):
            dist.all_reduce(w.grad, group=group)
    experts = slice(rank * local, (rank + 1) * local)
    errors = {
        "error_y": common.relative_error(y, y_ref),
        "error_dx": common.relative_error(x.grad, x_ref.grad),
        "error_d_router_weights": common.relative_error(router_weights.grad, router_ref.grad),
        "error_dw_gate_up": common.relative_error(weights.gate_up.grad, reference_weights.gate_up.grad[experts]),
        "error_dw_down": common.relative_error(weights.down.grad, reference_weights.down.grad[experts]),
    }
    # Shared experts' gradients are per-rank partial sums by contract: compared without a reduction.
    for s, (mine_w, ref_w) in enumerate(zip(weights.shared_gate_up, reference_weights.shared_gate_up)):
        errors[f"error_dw_shared{s}_gate_up"] = common.relative_error(mine_w.grad, ref_w.grad)
    for s, (mine_w, ref_w) in enumerate(zip(weights.shared_down, reference_weights.shared_down)):
        errors[f"error_dw_shared{s}_down"] = common.relative_error(mine_w.grad, ref_w.grad)
    return {key: common.all_reduce_max(ctx, value) for key, value in errors.items()}
