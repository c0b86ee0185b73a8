"""MoELayer: the layer as an nn.Module, one expert-parallel rank per process."""

import math
from typing import Optional, Sequence

import torch
import torch.distributed as dist
from torch import nn

from mok.distributed import communicator_for
from mok.functional import Config, Layer, moe, resolve_device

GRAD_MODES = ("fresh", "accumulate")


class SharedExpert(nn.Module):
    """One shared expert's weights, replicated on every rank: gate and up [I_s, H], down [H, I_s], bf16."""

    def __init__(self, width: int, hidden: int, device: torch.device):
        super().__init__()
        self.gate = nn.Parameter(torch.empty(width, hidden, dtype=torch.bfloat16, device=device))
        self.up = nn.Parameter(torch.empty(width, hidden, dtype=torch.bfloat16, device=device))
        self.down = nn.Parameter(torch.empty(hidden, width, dtype=torch.bfloat16, device=device))


def _init_uniform(weight: torch.Tensor, fan_in: int) -> None:
    # nn.Linear's default initialisation, per expert: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    bound = 1.0 / math.sqrt(fan_in)
    with torch.no_grad():
        weight.uniform_(-bound, bound)


class MoELayer(nn.Module):
    """y = sum over shared experts s of FFN_s(x) + sum over slots j of router_weights[:, j] * FFN_{expert_ids[:, j]}(x),
    each FFN a SwiGLU: W_down (silu(W_gate x) * (W_up x)). docs/semantics.md is the contract.

    Expert parallelism over `process_group` (None: no expert parallelism): the EP size R is the group's size, one
    rank per process, and this rank owns global experts [rank E/R, (rank + 1) E/R) as expert_gate and expert_up
    [E/R, I, H] and expert_down [E/R, H, I], bf16. Shared experts are replicated on every rank (their gradients
    cover this rank's tokens; reduce them over data-parallel ranks as any replicated weight). With backend "cuda"
    and R > 1 the first layer on a group creates the group's communicator: a collective, so every rank builds its
    layers in the same order.

    backend: "cuda" (the sm_90a kernels, on the current CUDA device unless `device` says otherwise) or "cpu" (the
    CPU reference, which computes the GPU's bits; expert parallelism only within one process, through mok.Layer).
    grad_mode: "fresh" gives each weight a bf16 .grad through autograd; "accumulate" adds the weight gradients into
    each weight's fp32 `main_grad` attribute instead (as Megatron-style training keeps them) and leaves .grad alone.
    recompute: save only the inputs for the backward and recompute the rest there (activation checkpointing).
    Both may be changed between steps.
    """

    def __init__(
        self,
        hidden: int,
        expert_width: int,
        num_experts: int,
        top_k: int,
        shared_expert_widths: Sequence[int] = (),
        process_group=None,
        backend: str = "cuda",
        config: Optional[Config] = None,
        *,
        device=None,
        grad_mode: str = "fresh",
        recompute: bool = False,
    ):
        super().__init__()
        if grad_mode not in GRAD_MODES:
            raise ValueError(f"MoELayer: argument 'grad_mode': expected one of {GRAD_MODES}, got {grad_mode!r}")
        if process_group is None:
            ep_size, rank = 1, 0
        else:
            ep_size, rank = dist.get_world_size(process_group), dist.get_rank(process_group)
        device = resolve_device(backend, device)
        communicator = None
        if ep_size > 1 and backend == "cuda":
            communicator = communicator_for(process_group, device)
        self.layer = Layer(
            hidden,
            expert_width,
            num_experts,
            top_k,
            shared_expert_widths,
            ep_size=ep_size,
            first_local_rank=rank,
            num_local_ranks=1,
            backend=backend,
            device=device,
            config=config,
            communicator=communicator,
        )
        self.process_group = process_group
        self.grad_mode = grad_mode
        self.recompute = recompute
        local_experts = self.layer.num_local_experts
        kwargs = dict(dtype=torch.bfloat16, device=device)
        self.expert_gate = nn.Parameter(torch.empty(local_experts, expert_width, hidden, **kwargs))
        self.expert_up = nn.Parameter(torch.empty(local_experts, expert_width, hidden, **kwargs))
        self.expert_down = nn.Parameter(torch.empty(local_experts, hidden, expert_width, **kwargs))
        self.shared = nn.ModuleList(SharedExpert(width, hidden, device) for width in shared_expert_widths)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        hidden, width = self.layer.hidden, self.layer.expert_width
        _init_uniform(self.expert_gate, hidden)
        _init_uniform(self.expert_up, hidden)
        _init_uniform(self.expert_down, width)
        for expert in self.shared:
            _init_uniform(expert.gate, hidden)
            _init_uniform(expert.up, hidden)
            _init_uniform(expert.down, expert.down.shape[1])

    @property
    def first_expert(self) -> int:
        """The global id of this rank's first expert: local expert l is global expert first_expert + l."""
        return self.layer.first_local_rank * self.layer.num_local_experts

    def _named_weights(self):
        """The weights in the operators' order: routed gate, up, down, then each shared expert's."""
        named = [("expert_gate", self.expert_gate), ("expert_up", self.expert_up), ("expert_down", self.expert_down)]
        for i, expert in enumerate(self.shared):
            named += [(f"shared.{i}.{part}", getattr(expert, part)) for part in ("gate", "up", "down")]
        return named

    def _main_grads(self):
        grads = []
        for name, weight in self._named_weights():
            main_grad = getattr(weight, "main_grad", None)
            if main_grad is None:
                raise ValueError(
                    f"MoELayer: argument '{name}.main_grad': expected an fp32 tensor shaped like {name} "
                    f"(grad_mode='accumulate'), got none"
                )
            grads.append(main_grad.unsqueeze(0))
        return grads

    def forward(self, x: torch.Tensor, expert_ids: torch.Tensor, router_weights: torch.Tensor) -> torch.Tensor:
        """x [T, H] bf16, expert_ids [T, k] int32 (global ids in [0, E), -1 for an unused slot, no expert twice in
        a token), router_weights [T, k] fp32 -> y [T, H] bf16. T must be the same on every rank of the group."""
        for name, t in (("x", x), ("expert_ids", expert_ids), ("router_weights", router_weights)):
            if t.dim() != 2:
                raise ValueError(
                    f"MoELayer.forward: argument '{name}': expected a 2-D tensor "
                    f"({'[T, H]' if name == 'x' else '[T, k]'}), got shape {list(t.shape)}"
                )
        main_grads = self._main_grads() if self.grad_mode == "accumulate" else None
        y = moe(
            self.layer,
            x.unsqueeze(0),
            expert_ids.unsqueeze(0),
            router_weights.unsqueeze(0),
            self.expert_gate.unsqueeze(0),
            self.expert_up.unsqueeze(0),
            self.expert_down.unsqueeze(0),
            [(e.gate.unsqueeze(0), e.up.unsqueeze(0), e.down.unsqueeze(0)) for e in self.shared],
            main_grads=main_grads,
            recompute=self.recompute,
        )
        return y.squeeze(0)

    def synchronize(self) -> None:
        """Waits for this layer's work on the current stream and raises the first failure the device found since
        the last call (schedule overflow, a peer that timed out); see mok.Layer.synchronize."""
        self.layer.synchronize()

    def extra_repr(self) -> str:
        layer = self.layer
        return (
            f"hidden={layer.hidden}, expert_width={layer.expert_width}, num_experts={layer.num_experts}, "
            f"top_k={layer.top_k}, shared_expert_widths={layer.shared_expert_widths}, ep_size={layer.ep_size}, "
            f"backend={layer.backend!r}, device={layer.device}, grad_mode={self.grad_mode!r}, "
            f"recompute={self.recompute}"
        )
