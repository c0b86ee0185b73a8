"""Fake (shape-only) kernels of the torch.ops.mok compute operators, for torch.compile and FakeTensor tracing.

The operators themselves are C++ (python/torch_ops.cpp); that file's header describes their arguments. Every
per-rank tensor is stacked over the layer's L local ranks ([L, T, H], [L, E/R, I, H], ...), and every output is a
new dense tensor on the layer's device: the fakes below describe exactly that, so that a compiled graph agrees with
the real kernels. "context" is the CPU int64 tensor of four fields that names a ForwardContext.
"""

import torch

CONTEXT_FIELDS = 4


def _context() -> torch.Tensor:
    return torch.empty(CONTEXT_FIELDS, dtype=torch.int64, device="cpu")


def _like(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(t.shape, dtype=dtype, device=t.device)


@torch.library.register_fake("mok::forward")
def _forward_fake(x, expert_ids, router_weights, expert_gate, expert_up, expert_down, shared, layer):
    return _like(x, torch.bfloat16), _context()


@torch.library.register_fake("mok::recompute_forward")
def _recompute_forward_fake(x, expert_ids, router_weights, expert_gate, expert_up, expert_down, shared, layer):
    return _context()


@torch.library.register_fake("mok::backward")
def _backward_fake(dy, x, expert_ids, router_weights, expert_gate, expert_up, expert_down, shared, layer, context):
    return (
        _like(x, torch.bfloat16),
        _like(router_weights, torch.float32),
        _like(expert_gate, torch.bfloat16),
        _like(expert_up, torch.bfloat16),
        _like(expert_down, torch.bfloat16),
        [_like(w, torch.bfloat16) for w in shared],
    )


@torch.library.register_fake("mok::backward_accumulate")
def _backward_accumulate_fake(
    dy,
    x,
    expert_ids,
    router_weights,
    expert_gate,
    expert_up,
    expert_down,
    shared,
    main_grad_expert_gate,
    main_grad_expert_up,
    main_grad_expert_down,
    main_grad_shared,
    layer,
    context,
):
    return _like(x, torch.bfloat16), _like(router_weights, torch.float32)
