"""The layer object and the differentiable layer call, over the torch.ops.mok operators.

A `Layer` is the C++ layer (shape, topology, tuning, backend, device, communicator), created once; `moe` runs it on
tensors stacked over the layer's local ranks, with autograd. MoELayer (module.py) wraps both for one rank per
process; use these directly to drive several local ranks from one process (the CPU reference, or virtual ranks).
"""

import dataclasses
import weakref
from typing import Optional, Sequence

import torch

_DEFAULTS = torch.ops.mok.default_config()


@dataclasses.dataclass(frozen=True)
class Config:
    """How the layer runs (include/mok/config.hpp); results are bitwise the same for every value."""

    num_comm_sms_forward: int = _DEFAULTS[0]
    num_comm_sms_backward: int = _DEFAULTS[1]
    minibatch_rows: int = _DEFAULTS[2]
    ring_rows: int = _DEFAULTS[3]
    schedule_capacity_factor: float = _DEFAULTS[4]
    peer_timeout_ms: int = _DEFAULTS[5]
    gemm_pingpong: bool = _DEFAULTS[6]
    gemm_epilogue_warps: bool = _DEFAULTS[7]
    # "auto", "push" or "down_stores": how the forward's expert outputs reach the combine (ForwardCombine).
    forward_combine: str = _DEFAULTS[8]
    # The dispatch pulls a source token's rows on a rank once per group of up to four (docs/transport.md, section 15).
    dispatch_token_groups: bool = _DEFAULTS[9]


def resolve_device(backend: str, device) -> torch.device:
    """`device`, or the backend's default (the current CUDA device for "cuda"), with a CUDA device's index made
    explicit: the layer binds to one device."""
    if device is None:
        device = "cuda" if backend == "cuda" else "cpu"
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


class Layer:
    """One MoE layer in mok's C++ registry; the token count is each call's.

    Invalid options raise here, naming the option (ValueError); a backend this build lacks raises
    NotImplementedError. Expert parallelism: ranks [first_local_rank, first_local_rank + num_local_ranks) of
    `ep_size` run in this process; ranks in other processes need `communicator` (mok.communicator_for).
    """

    def __init__(
        self,
        hidden: int,
        expert_width: int,
        num_experts: int,
        top_k: int,
        shared_expert_widths: Sequence[int] = (),
        *,
        ep_size: int = 1,
        first_local_rank: int = 0,
        num_local_ranks: Optional[int] = None,
        backend: str = "cpu",
        device=None,
        config: Optional[Config] = None,
        communicator=None,
    ):
        config = config or Config()
        self.hidden = hidden
        self.expert_width = expert_width
        self.num_experts = num_experts
        self.top_k = top_k
        self.shared_expert_widths = tuple(shared_expert_widths)
        self.ep_size = ep_size
        self.first_local_rank = first_local_rank
        self.num_local_ranks = ep_size if num_local_ranks is None else num_local_ranks
        self.backend = backend
        self.device = resolve_device(backend, device)
        self.config = config
        # Held so that the communicator outlives every layer made with it.
        self.communicator = communicator
        self.id = torch.ops.mok.create_layer(
            hidden,
            expert_width,
            num_experts,
            top_k,
            list(self.shared_expert_widths),
            ep_size,
            first_local_rank,
            self.num_local_ranks,
            config.num_comm_sms_forward,
            config.num_comm_sms_backward,
            config.minibatch_rows,
            config.ring_rows,
            config.schedule_capacity_factor,
            config.peer_timeout_ms,
            config.gemm_pingpong,
            config.gemm_epilogue_warps,
            config.forward_combine,
            config.dispatch_token_groups,
            backend,
            self.device,
            0 if communicator is None else communicator.id,
        )
        # weakref.finalize rather than __del__: it also runs at interpreter exit, while torch.ops still works.
        self._finalizer = weakref.finalize(self, torch.ops.mok.destroy_layer, self.id)

    @property
    def num_local_experts(self) -> int:
        return self.num_experts // self.ep_size

    def synchronize(self) -> None:
        """Waits for the layer's work on the current stream and raises the first failure found on the device
        (schedule overflow, a peer that timed out) since the last call. A no-op on the CPU reference, whose calls
        raise everything themselves."""
        torch.ops.mok.synchronize(self.id)

    def release_contexts(self) -> None:
        """Frees the saved-for-backward storage that no pending backward holds (it is otherwise kept for reuse)."""
        torch.ops.mok.release_contexts(self.id)

    def close(self) -> None:
        self._finalizer()


class _MoEFunction(torch.autograd.Function):
    """y = layer(inputs); backward through mok::backward (fresh bf16 weight gradients) or mok::backward_accumulate
    (added into fp32 main_grads, and no .grad for the weights).

    Arguments after the flags: x, expert_ids, router_weights, expert_gate, expert_up, expert_down, then the shared
    experts' weights (num_shared_tensors of them: (gate, up, down) triples, flattened), then the main_grads (one
    per weight) in accumulate mode.
    """

    @staticmethod
    def forward(ctx, layer: int, accumulate: bool, recompute: bool, num_shared_tensors: int, *tensors):
        inputs = tensors[: 6 + num_shared_tensors]
        x, expert_ids, router_weights, gate, up, down = inputs[:6]
        shared = list(inputs[6:])
        y, context = torch.ops.mok.forward(x, expert_ids, router_weights, gate, up, down, shared, layer)
        ctx.layer = layer
        ctx.accumulate = accumulate
        ctx.recompute = recompute
        ctx.num_inputs = len(inputs)
        ctx.num_main_grads = len(tensors) - len(inputs)
        # main_grads are not saved tensors: the backward writes them, and autograd would refuse a saved tensor that
        # an earlier backward (another microbatch's) wrote.
        ctx.main_grads = tensors[len(inputs) :]
        # With recompute the context is dropped here (its storage goes back to the layer's pool) and rebuilt by
        # mok::recompute_forward in the backward.
        ctx.save_for_backward(*inputs, *(() if recompute else (context,)))
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        saved = ctx.saved_tensors
        inputs = saved[: ctx.num_inputs]
        x, expert_ids, router_weights, gate, up, down = inputs[:6]
        shared = list(inputs[6:])
        if ctx.recompute:
            context = torch.ops.mok.recompute_forward(x, expert_ids, router_weights, gate, up, down, shared, ctx.layer)
        else:
            context = saved[ctx.num_inputs]
        # Autograd may hand an expanded gradient (stride 0, as from y.sum()); the layer reads dense rows.
        dy = dy.contiguous()
        if ctx.accumulate:
            m = ctx.main_grads
            dx, d_router_weights = torch.ops.mok.backward_accumulate(
                dy, x, expert_ids, router_weights, gate, up, down, shared, m[0], m[1], m[2], list(m[3:]),
                ctx.layer, context,
            )
            weight_grads = [None] * (3 + len(shared))
        else:
            dx, d_router_weights, d_gate, d_up, d_down, d_shared = torch.ops.mok.backward(
                dy, x, expert_ids, router_weights, gate, up, down, shared, ctx.layer, context
            )
            weight_grads = [d_gate, d_up, d_down, *d_shared]
        return (None, None, None, None, dx, None, d_router_weights, *weight_grads, *([None] * ctx.num_main_grads))


def moe(
    layer: Layer,
    x: torch.Tensor,
    expert_ids: torch.Tensor,
    router_weights: torch.Tensor,
    expert_gate: torch.Tensor,
    expert_up: torch.Tensor,
    expert_down: torch.Tensor,
    shared: Sequence[Sequence[torch.Tensor]] = (),
    *,
    main_grads: Optional[Sequence[torch.Tensor]] = None,
    recompute: bool = False,
) -> torch.Tensor:
    """The layer's output y [L, T, H] bf16, differentiable in x, router_weights and every weight.

    Tensors are stacked over the layer's L local ranks: x [L, T, H] bf16, expert_ids [L, T, k] int32 (global
    expert ids, -1 for an unused slot), router_weights [L, T, k] fp32, expert_gate and expert_up [L, E/R, I, H]
    bf16, expert_down [L, E/R, H, I] bf16, and per shared expert a (gate [L, I_s, H], up [L, I_s, H],
    down [L, H, I_s]) triple. docs/semantics.md has the math. Each rank's entry must meet the contract on its own:
    rows and data pointers 16-byte aligned, so with L > 1 the [L, T, k] routing tensors need T * k to be a multiple
    of 4. A shared expert's weights may be one tensor broadcast over the ranks (w.expand(L, ...)).

    main_grads: None for fresh bf16 weight gradients (GradMode::kFresh, through autograd); or fp32 tensors shaped
    like the weights, in the order gate, up, down, then each shared triple, into which the backward adds the
    weight gradients (GradMode::kAccumulate); the weights then get no .grad.
    recompute: keep nothing from the forward but its inputs and rebuild the rest in the backward (activation
    checkpointing through mok::recompute_forward).
    """
    flat_shared = [w for triple in shared for w in triple]
    tensors = [x, expert_ids, router_weights, expert_gate, expert_up, expert_down, *flat_shared]
    accumulate = main_grads is not None
    if accumulate:
        tensors += list(main_grads)
    return _MoEFunction.apply(layer.id, accumulate, recompute, len(flat_shared), *tensors)

