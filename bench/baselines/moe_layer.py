"""The PyTorch MoE layer mok is measured against, and the plain fp32 reference it is checked against.

The layer is what a careful PyTorch user writes today: sort the (token, slot) pairs by expert, exchange the
per-expert counts, exchange the token rows, run the local experts as two torch._grouped_mm calls with SwiGLU
between them, send the outputs back, and sum them weighted into each token's row with index_add. Autograd
gives the backward. Three exchanges plug into it:

  LocalExchange    EP 1: no communication at all.
  NcclExchange     all_to_all_single for the counts, a host sync for the split sizes (.tolist()), then
                   all_to_all_single for the rows: the NCCL+PyTorch baseline.
  SymmMemExchange  (symm_exchange.py) torch.ops.symm_mem.all_to_all_vdev_2d and its _offset reverse: split sizes
                   stay on the device (no host sync), at the price of worst-case symmetric buffers.

An exchange has dispatch(x, token_of_row, counts) -> (rows grouped by local expert, group end offsets, plan) and
combine(expert outputs, plan) -> outputs in the sorted (token, slot) order, both differentiable.
"""

from __future__ import annotations

from dataclasses import dataclass
import torch
import torch.distributed as dist
import torch.nn.functional as F

from common import MoeShape


@dataclass
class LayerWeights:
    gate_up: torch.Tensor  # [experts, 2I, H] bf16: rows [0, I) are W_gate, rows [I, 2I) W_up
    down: torch.Tensor  # [experts, H, I] bf16
    shared_gate_up: list[torch.Tensor]  # per shared expert s: [2 I_s, H]
    shared_down: list[torch.Tensor]  # per shared expert s: [H, I_s]

    def parameters(self) -> list[torch.Tensor]:
        return [self.gate_up, self.down, *self.shared_gate_up, *self.shared_down]

    def experts(self, first: int, count: int) -> "LayerWeights":
        """A copy holding experts [first, first + count) and the shared experts, as fresh leaves."""

        def leaf(t: torch.Tensor) -> torch.Tensor:
            return t.detach().clone().requires_grad_(True)

        return LayerWeights(
            gate_up=leaf(self.gate_up[first : first + count]),
            down=leaf(self.down[first : first + count]),
            shared_gate_up=[leaf(w) for w in self.shared_gate_up],
            shared_down=[leaf(w) for w in self.shared_down],
        )

    def to(self, dtype: torch.dtype) -> "LayerWeights":
        def leaf(t: torch.Tensor) -> torch.Tensor:
            return t.detach().to(dtype).requires_grad_(True)

        return LayerWeights(
            leaf(self.gate_up),
            leaf(self.down),
            [leaf(w) for w in self.shared_gate_up],
            [leaf(w) for w in self.shared_down],
        )


def make_weights(
    num_experts: int, hidden: int, width: int, shared_widths: tuple[int, ...], device: torch.device, seed: int
) -> LayerWeights:
    """Random bf16 weights scaled by 1/sqrt(fan-in), so activations stay of order one through the layer."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*size: int, fan_in: int) -> torch.Tensor:
        t = torch.randn(*size, generator=gen, device=device, dtype=torch.bfloat16)
        return t.mul_(fan_in**-0.5).requires_grad_(True)

    return LayerWeights(
        gate_up=randn(num_experts, 2 * width, hidden, fan_in=hidden),
        down=randn(num_experts, hidden, width, fan_in=width),
        shared_gate_up=[randn(2 * w, hidden, fan_in=hidden) for w in shared_widths],
        shared_down=[randn(hidden, w, fan_in=w) for w in shared_widths],
    )


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def expert_ffn(x_em: torch.Tensor, offs: torch.Tensor, weights: LayerWeights) -> torch.Tensor:
    """Rows grouped by local expert (group e ends at offs[e]) through their experts' FFNs."""
    gate_up = torch._grouped_mm(x_em, weights.gate_up.transpose(-2, -1), offs=offs)
    return torch._grouped_mm(swiglu(gate_up), weights.down.transpose(-2, -1), offs=offs)


def shared_ffn(x: torch.Tensor, weights: LayerWeights) -> torch.Tensor:
    """The shared experts as dense matmuls, summed; zeros when the model has none."""
    y = torch.zeros_like(x)
    for gate_up, down in zip(weights.shared_gate_up, weights.shared_down):
        y = y + swiglu(x @ gate_up.t()) @ down.t()
    return y


class LocalExchange:
    """EP 1: every expert is local, and rows sorted by expert are already grouped by local expert."""

    def __init__(self, num_experts: int):
        self.num_experts = num_experts

    def dispatch(self, x: torch.Tensor, token_of_row: torch.Tensor, counts: torch.Tensor):
        return x.index_select(0, token_of_row), counts.cumsum(0).to(torch.int32), None

    def combine(self, o_em: torch.Tensor, plan) -> torch.Tensor:
        return o_em


class _AllToAll(torch.autograd.Function):
    """all_to_all_single with host split sizes; its backward is the exchange with the splits swapped."""

    @staticmethod
    def forward(ctx, x, output_splits: list[int], input_splits: list[int], group):
        ctx.splits = (output_splits, input_splits)
        ctx.group = group
        out = x.new_empty((sum(output_splits), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), output_splits, input_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        output_splits, input_splits = ctx.splits
        grad_in = grad_out.new_empty((sum(input_splits), *grad_out.shape[1:]))
        dist.all_to_all_single(grad_in, grad_out.contiguous(), input_splits, output_splits, group=ctx.group)
        return grad_in, None, None, None


def exclusive_cumsum(t: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(t, 0) - t


def expert_major_order(recv_counts: torch.Tensor, total: int) -> torch.Tensor:
    """Received rows come grouped (source rank, local expert); the GEMMs want (local expert, source rank).

    recv_counts[src, e] rows came from rank src for local expert e. Returns perm with x_em = x_recv[perm]:
    computed on the device, with the total row count (already on the host) sizing it without a sync.
    """
    ranks, local_experts = recv_counts.shape
    device = recv_counts.device
    starts_in = exclusive_cumsum(recv_counts.reshape(-1)).view(ranks, local_experts).t().reshape(-1)
    counts_em = recv_counts.t().reshape(-1)
    starts_out = exclusive_cumsum(counts_em)
    chunk = torch.repeat_interleave(torch.arange(counts_em.numel(), device=device), counts_em, output_size=total)
    return starts_in[chunk] + torch.arange(total, device=device) - starts_out[chunk]


class NcclExchange:
    """The NCCL+PyTorch baseline's exchange: counts all-to-all, host sync for splits, rows all-to-all."""

    def __init__(self, num_experts: int, group: dist.ProcessGroup):
        self.num_experts = num_experts
        self.group = group
        self.ranks = dist.get_world_size(group)
        self.local_experts = num_experts // self.ranks

    def dispatch(self, x: torch.Tensor, token_of_row: torch.Tensor, counts: torch.Tensor):
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts, group=self.group)
        recv_counts = recv_counts.view(self.ranks, self.local_experts)
        send_splits = counts.view(self.ranks, self.local_experts).sum(1)
        # The host sync every all_to_all_single with uneven splits needs: one .tolist() for both directions.
        splits = torch.cat([send_splits, recv_counts.sum(1)]).tolist()
        input_splits, output_splits = splits[: self.ranks], splits[self.ranks :]
        x_recv = _AllToAll.apply(x.index_select(0, token_of_row), output_splits, input_splits, self.group)
        total = sum(output_splits)
        perm = expert_major_order(recv_counts, total)
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(total, device=perm.device)
        offs = recv_counts.sum(0).cumsum(0).to(torch.int32)
        return x_recv.index_select(0, perm), offs, (inverse, input_splits, output_splits)

    def combine(self, o_em: torch.Tensor, plan) -> torch.Tensor:
        inverse, input_splits, output_splits = plan
        return _AllToAll.apply(o_em.index_select(0, inverse), input_splits, output_splits, self.group)


class MoeLayer:
    """y = shared(x) + sum_j w_j FFN_{e_j}(x) for this rank's tokens (docs/semantics.md, section 3)."""

    def __init__(self, shape: MoeShape, weights: LayerWeights, exchange):
        self.shape = shape
        self.weights = weights
        self.exchange = exchange

    def __call__(self, x: torch.Tensor, ids: torch.Tensor, router_weights: torch.Tensor) -> torch.Tensor:
        top_k = ids.shape[1]
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)
        token_of_row = torch.div(order, top_k, rounding_mode="floor")
        # index_add, not bincount: bincount reads the largest id back to the host, a sync the device-split
        # exchange exists to avoid.
        counts = torch.zeros(self.exchange.num_experts, dtype=torch.int64, device=flat.device)
        counts.index_add_(0, flat, torch.ones_like(flat))
        x_em, offs, plan = self.exchange.dispatch(x, token_of_row, counts)
        o_sorted = self.exchange.combine(expert_ffn(x_em, offs, self.weights), plan)
        weighted = o_sorted * router_weights.reshape(-1)[order].unsqueeze(1).to(o_sorted.dtype)
        return shared_ffn(x, self.weights).index_add(0, token_of_row, weighted)


def reference_forward(x: torch.Tensor, ids: torch.Tensor, router_weights: torch.Tensor, weights: LayerWeights):
    """The contract's forward in fp32, one expert at a time over every expert of the group (weights holds all)."""
    y = shared_ffn(x, weights)
    for expert in range(weights.gate_up.shape[0]):
        tokens, slots = (ids == expert).nonzero(as_tuple=True)
        if tokens.numel() == 0:
            continue
        h = swiglu(x[tokens] @ weights.gate_up[expert].t())
        o = h @ weights.down[expert].t()
        y = y.index_add(0, tokens, o * router_weights[tokens, slots].unsqueeze(1))
    return y
