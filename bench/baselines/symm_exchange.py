"""The device-split exchange of the PyTorch MoE baseline: PyTorch symmetric memory (NVSHMEM).

torch.ops.symm_mem.all_to_all_vdev_2d sends rows sorted by global expert (rank-major) and delivers them grouped
by local expert (expert-major), with split sizes exchanged on the device; all_to_all_vdev_2d_offset is its
reverse. No host sync anywhere, at the price of buffers sized for the worst case.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist


def symm_mem_unavailable_reason() -> Optional[str]:
    """None when torch.ops.symm_mem.all_to_all_vdev_2d can run here; otherwise why not."""
    if not hasattr(torch.ops, "symm_mem") or not hasattr(torch.ops.symm_mem, "all_to_all_vdev_2d"):
        return f"PyTorch {torch.__version__} has no torch.ops.symm_mem.all_to_all_vdev_2d"
    if not torch.cuda.is_available():
        return "symmetric memory needs CUDA"
    try:
        import torch.distributed._symmetric_memory as symm_mem
    except ImportError as error:
        return f"torch.distributed._symmetric_memory does not import: {error}"
    if not symm_mem.is_nvshmem_available():
        return "NVSHMEM is not available to this PyTorch (all_to_all_vdev_2d runs on NVSHMEM)"
    return None


class SymmBuffers:
    """Symmetric buffers for every SymmMemExchange of one EP group, allocated once at the largest case's size.

    Split sizes never reach the host, so every receiving buffer is sized for the worst case (every rank sends
    every row here). Each role has its own buffer: peers write into them, and a buffer reused within one
    forward-backward pair could be written by a peer that runs ahead while this rank still reads it. Cases
    use prefixes of these flat buffers, so one allocation serves every shape and token count of a sweep.
    """

    ROW_ROLES = ("send", "out_recv", "grad_out_send", "grad_x_recv")  # sent_rows x H each
    EXPERT_ROLES = ("recv", "out_send", "grad_out_recv", "grad_x_send")  # worst_case_rows x H each
    SPLIT_ROLES = ("dispatch", "combine", "grad_combine", "grad_dispatch")  # (2, splits) each

    def __init__(
        self,
        group: dist.ProcessGroup,
        device: torch.device,
        max_sent_elements: int,
        max_recv_elements: int,
        max_splits: int,
    ):
        import torch.distributed._symmetric_memory as symm_mem

        self.group = group

        def symmetric(numel: int, dtype: torch.dtype) -> torch.Tensor:
            # Zeros, once: rows the exchange never writes (spare and padding rows) must hold finite values.
            t = symm_mem.empty(numel, dtype=dtype, device=device)
            t.zero_()
            symm_mem.rendezvous(t, group)
            return t

        self.rows = {role: symmetric(max_sent_elements, torch.bfloat16) for role in self.ROW_ROLES}
        self.expert_rows = {role: symmetric(max_recv_elements, torch.bfloat16) for role in self.EXPERT_ROLES}
        self.in_splits = symmetric(max_splits, torch.int64)
        self.splits_offsets = {role: symmetric(2 * max_splits, torch.int64) for role in self.SPLIT_ROLES}

    @staticmethod
    def worst_case_rows(sent_rows: int, ranks: int, local_experts: int) -> int:
        # all_to_all_vdev_2d gives an expert with no rows a one-row bin: one spare row per local expert.
        return ranks * sent_rows + local_experts

    @classmethod
    def bytes_needed(cls, max_sent_elements: int, max_recv_elements: int, max_splits: int) -> int:
        bf16_bytes = 2
        int64_bytes = 8
        rows = len(cls.ROW_ROLES) * max_sent_elements + len(cls.EXPERT_ROLES) * max_recv_elements
        splits = (1 + 2 * len(cls.SPLIT_ROLES)) * max_splits
        return bf16_bytes * rows + int64_bytes * splits


def use_nvshmem_backend() -> None:
    """all_to_all_vdev_2d runs on NVSHMEM-allocated symmetric memory; select it before the first allocation."""
    import torch.distributed._symmetric_memory as symm_mem

    device = torch.device("cuda", torch.cuda.current_device())
    if symm_mem.get_backend(device) != "NVSHMEM":
        symm_mem.set_backend("NVSHMEM")


class SymmMemExchange:
    """Device-split exchange through PyTorch symmetric memory (NVSHMEM): no host sync anywhere.

    The expert GEMMs and SwiGLU run over the whole worst-case receiving buffer, bounded by offs: the price of
    keeping the row count on the device.
    """

    def __init__(
        self, num_experts: int, group: dist.ProcessGroup, tokens: int, top_k: int, hidden: int, pool: SymmBuffers
    ):
        self.num_experts = num_experts
        self.group_name = group.group_name
        self.ranks = dist.get_world_size(group)
        self.local_experts = num_experts // self.ranks
        sent_rows = tokens * top_k
        recv_rows = SymmBuffers.worst_case_rows(sent_rows, self.ranks, self.local_experts)
        splits = self.ranks * self.local_experts

        def rows(flat: torch.Tensor, count: int) -> torch.Tensor:
            if count * hidden > flat.numel():
                raise ValueError(f"symmetric buffer of {flat.numel()} elements is too small for {count} x {hidden}")
            return flat[: count * hidden].view(count, hidden)

        def splits_offsets(role: str) -> torch.Tensor:
            return pool.splits_offsets[role][: 2 * splits].view(2, splits)

        self.in_splits = pool.in_splits[:splits]
        self.dispatch_splits_offsets = splits_offsets("dispatch")
        self.combine_splits_offsets = splits_offsets("combine")
        self.grad_combine_splits_offsets = splits_offsets("grad_combine")
        self.grad_dispatch_splits_offsets = splits_offsets("grad_dispatch")
        self.send = rows(pool.rows["send"], sent_rows)  # x rows sorted by expert
        self.recv = rows(pool.expert_rows["recv"], recv_rows)  # rows grouped by local expert
        self.out_send = rows(pool.expert_rows["out_send"], recv_rows)  # expert outputs going back
        self.out_recv = rows(pool.rows["out_recv"], sent_rows)  # expert outputs back home, sorted
        self.grad_out_send = rows(pool.rows["grad_out_send"], sent_rows)  # d(outputs) going to the experts
        self.grad_out_recv = rows(pool.expert_rows["grad_out_recv"], recv_rows)  # d(outputs) at the experts
        self.grad_x_send = rows(pool.expert_rows["grad_x_send"], recv_rows)  # d(x rows) going home
        self.grad_x_recv = rows(pool.rows["grad_x_recv"], sent_rows)  # d(x rows) back home, sorted

    def dispatch(self, x: torch.Tensor, token_of_row: torch.Tensor, counts: torch.Tensor):
        self.in_splits.copy_(counts)
        x_em = _SymmDispatch.apply(x, token_of_row, self)
        splits, offsets = self.dispatch_splits_offsets.view(2, self.local_experts, self.ranks)
        # Group e starts where its first source's chunk does and ends after all its sources' rows.
        offs = (offsets[:, 0] + splits.sum(1)).to(torch.int32)
        return x_em, offs, None

    def combine(self, o_em: torch.Tensor, plan) -> torch.Tensor:
        return _SymmCombine.apply(o_em, self)


class _SymmDispatch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, token_of_row, ex: SymmMemExchange):
        torch.index_select(x, 0, token_of_row, out=ex.send)
        # Padding rows of empty experts land inside a GEMM group: zeros there keep them out of the weight
        # gradients (a stale row would add its product to the next expert's dW).
        ex.recv.zero_()
        torch.ops.symm_mem.all_to_all_vdev_2d(ex.send, ex.recv, ex.in_splits, ex.dispatch_splits_offsets, ex.group_name)
        ctx.save_for_backward(token_of_row)
        ctx.exchange = ex
        ctx.num_tokens = x.shape[0]
        return ex.recv.detach()

    @staticmethod
    def backward(ctx, grad_x_em):
        (token_of_row,) = ctx.saved_tensors
        ex: SymmMemExchange = ctx.exchange
        ex.grad_x_send.copy_(grad_x_em)
        torch.ops.symm_mem.all_to_all_vdev_2d_offset(
            ex.grad_x_send, ex.grad_x_recv, ex.dispatch_splits_offsets, ex.grad_dispatch_splits_offsets, ex.group_name
        )
        grad_x = ex.grad_x_recv.new_zeros((ctx.num_tokens, ex.grad_x_recv.shape[1]))
        return grad_x.index_add_(0, token_of_row, ex.grad_x_recv), None, None


class _SymmCombine(torch.autograd.Function):
    @staticmethod
    def forward(ctx, o_em, ex: SymmMemExchange):
        ex.out_send.copy_(o_em)
        torch.ops.symm_mem.all_to_all_vdev_2d_offset(
            ex.out_send, ex.out_recv, ex.dispatch_splits_offsets, ex.combine_splits_offsets, ex.group_name
        )
        ctx.exchange = ex
        return ex.out_recv.detach()

    @staticmethod
    def backward(ctx, grad_sorted):
        ex: SymmMemExchange = ctx.exchange
        ex.grad_out_send.copy_(grad_sorted)
        torch.ops.symm_mem.all_to_all_vdev_2d(
            ex.grad_out_send, ex.grad_out_recv, ex.in_splits, ex.grad_combine_splits_offsets, ex.group_name
        )
        return ex.grad_out_recv.detach(), None
