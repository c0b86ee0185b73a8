"""Runs the binding on a Problem (moe_reference.py): through MoELayer, or through mok.moe with several local
ranks."""

from typing import Optional

import torch

import mok
from moe_reference import Problem, Results


def make_module(p: Problem, backend: str = "cpu", device=None, **kwargs) -> mok.MoELayer:
    """An MoELayer (EP 1 unless kwargs say otherwise) holding the Problem's weights for its rank."""
    num_experts, expert_width, hidden = p.gate.shape
    module = mok.MoELayer(
        hidden,
        expert_width,
        num_experts,
        p.expert_ids.shape[1],
        [g.shape[0] for g, _, _ in p.shared],
        backend=backend,
        device=device,
        **kwargs,
    )
    load_weights(module, p)
    return module


def load_weights(module: mok.MoELayer, p: Problem) -> None:
    local = slice(module.first_expert, module.first_expert + module.layer.num_local_experts)
    with torch.no_grad():
        module.expert_gate.copy_(p.gate[local])
        module.expert_up.copy_(p.up[local])
        module.expert_down.copy_(p.down[local])
        for expert, (g, u, d) in zip(module.shared, p.shared):
            expert.gate.copy_(g)
            expert.up.copy_(u)
            expert.down.copy_(d)


def run_module(module: torch.nn.Module, p: Problem, call=None, tokens: Optional[slice] = None) -> Results:
    """Forward and backward (dy from the Problem) of the module on the Problem's tokens `tokens` (all by default).
    Weight gradients are .grad in fresh mode and a copy of main_grad in accumulate mode; both are reset first
    (main_grad to zero)."""
    tokens = tokens or slice(None)
    device = module.expert_gate.device
    module.zero_grad(set_to_none=True)
    for weight in module.parameters():
        if hasattr(weight, "main_grad"):
            weight.main_grad.zero_()
    x = p.x[tokens].to(device).requires_grad_()
    router_weights = p.router_weights[tokens].to(device).requires_grad_()
    y = (module if call is None else call)(x, p.expert_ids[tokens].to(device), router_weights)
    y.backward(p.dy[tokens].to(device))
    accumulate = getattr(module, "grad_mode", "fresh") == "accumulate"
    grads = [w.main_grad.clone() if accumulate else w.grad for w in weights_of(module)]
    return Results(y.detach(), x.grad, router_weights.grad, grads)


def weights_of(module: mok.MoELayer):
    return [module.expert_gate, module.expert_up, module.expert_down] + [
        w for e in module.shared for w in (e.gate, e.up, e.down)
    ]


def add_main_grads(module: mok.MoELayer) -> None:
    for weight in module.parameters():
        weight.main_grad = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)


def run_local_ranks(p: Problem, num_ranks: int, backend: str = "cpu", device="cpu", config=None) -> Results:
    """The Problem's global batch on an EP group of `num_ranks` ranks, all driven from this process through
    mok.moe (rank r gets tokens [r T/R, (r + 1) T/R) and experts [r E/R, (r + 1) E/R)); results reassembled in
    global order. Shared experts' gradients are summed over the ranks (autograd of the broadcast weights)."""
    num_experts, expert_width, hidden = p.gate.shape
    tokens, top_k = p.expert_ids.shape
    layer = mok.Layer(
        hidden,
        expert_width,
        num_experts,
        top_k,
        [g.shape[0] for g, _, _ in p.shared],
        ep_size=num_ranks,
        backend=backend,
        device=device,
        config=config,
    )

    def stacked(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(num_ranks, t.shape[0] // num_ranks, *t.shape[1:]).to(device)

    x = stacked(p.x).requires_grad_()
    router_weights = stacked(p.router_weights).requires_grad_()
    weights = [stacked(w).requires_grad_() for w in (p.gate, p.up, p.down)]
    shared = [[w.to(device).requires_grad_() for w in triple] for triple in p.shared]
    y = mok.moe(
        layer,
        x,
        stacked(p.expert_ids),
        router_weights,
        *weights,
        [[w.expand(num_ranks, *w.shape) for w in triple] for triple in shared],
    )
    y.backward(stacked(p.dy))

    def flat(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(t.shape[0] * t.shape[1], *t.shape[2:])

    grads = [flat(w.grad) for w in weights] + [w.grad for triple in shared for w in triple]
    return Results(flat(y.detach()), flat(x.grad), flat(router_weights.grad), grads)
