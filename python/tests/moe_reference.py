"""The tests' plain PyTorch implementation of docs/semantics.md, their random problems, and the tolerance model.

Two references, as the C++ tests use:
  - the oracle: the math of section 3 in fp64 with autograd, from the bf16 inputs;
  - the same-precision reference: the math in fp32, rounded to bf16 where section 5 rounds (g, u, h, each expert
    output, y; dg, du, the scaled dy, each dx row, dx; the weight-gradient sums), combined in section 6's orders.
A result passes when its relative Frobenius error against the oracle is at most kErrorRatio times the
same-precision reference's plus kErrorFloor, the model of reference/tolerance.hpp, whose constants are read from
that file so that the tests have one tolerance model.
"""

import dataclasses
import math
import pathlib
import re
from typing import List, Optional, Tuple

import torch

TOLERANCE_HEADER = pathlib.Path(__file__).resolve().parents[2] / "reference" / "tolerance.hpp"


def _tolerance_constant(name: str) -> float:
    text = TOLERANCE_HEADER.read_text()
    match = re.search(rf"constexpr double {name} = ([0-9.]+)(?: / ([0-9.]+))?;", text)
    if match is None:
        raise RuntimeError(f"{TOLERANCE_HEADER}: no 'constexpr double {name} = ...;' to read the tolerance from")
    value = float(match.group(1))
    return value / float(match.group(2)) if match.group(2) else value


ERROR_RATIO = _tolerance_constant("kErrorRatio")
ERROR_FLOOR = _tolerance_constant("kErrorFloor")


def relative_error(got: torch.Tensor, oracle: torch.Tensor) -> float:
    got = got.double()
    oracle = oracle.double()
    if not torch.isfinite(got).all():
        return math.inf
    norm = oracle.norm().item()
    diff = (got - oracle).norm().item()
    return diff / norm if norm > 0 else diff


def judge(name: str, got: torch.Tensor, same_precision: torch.Tensor, oracle: torch.Tensor) -> None:
    """Asserts the tolerance model for one result."""
    error = relative_error(got, oracle)
    reference_error = relative_error(same_precision, oracle)
    bound = ERROR_RATIO * reference_error + ERROR_FLOOR
    assert error <= bound, (
        f"{name}: error {error:.3e} vs bound {bound:.3e} (same-precision error {reference_error:.3e})"
    )


# ---------------------------------------------------------------------------------------------------------------
# Problems


@dataclasses.dataclass
class Problem:
    """One global batch and the whole group's weights, all on the CPU."""

    x: torch.Tensor  # [T, H] bf16
    expert_ids: torch.Tensor  # [T, k] int32
    router_weights: torch.Tensor  # [T, k] fp32
    gate: torch.Tensor  # [E, I, H] bf16
    up: torch.Tensor  # [E, I, H] bf16
    down: torch.Tensor  # [E, H, I] bf16
    shared: List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]  # (gate [I_s, H], up [I_s, H], down [H, I_s])
    dy: torch.Tensor  # [T, H] bf16

    @property
    def weights(self) -> List[torch.Tensor]:
        return [self.gate, self.up, self.down] + [w for triple in self.shared for w in triple]


ROUTINGS = ("uniform", "skewed", "unused_slots", "idle_experts")


def random_routing(tokens: int, num_experts: int, top_k: int, kind: str, gen: torch.Generator) -> torch.Tensor:
    """[T, k] int32 distinct experts per token. uniform: any expert alike; skewed: expert e drawn with weight
    1/(e+1)^2, so a few experts take most rows; unused_slots: a quarter of the slots -1; idle_experts: only the
    first half of the experts used (whole ranks idle under expert parallelism)."""
    weights = torch.ones(num_experts)
    if kind == "skewed":
        weights = 1.0 / (torch.arange(num_experts, dtype=torch.float64) + 1.0) ** 2
    elif kind == "idle_experts":
        weights[max(top_k, num_experts // 2) :] = 0.0
    ids = torch.stack([torch.multinomial(weights, top_k, replacement=False, generator=gen) for _ in range(tokens)])
    if kind == "unused_slots":
        ids[torch.rand(tokens, top_k, generator=gen) < 0.25] = -1
    return ids.to(torch.int32)


def random_problem(
    tokens: int,
    hidden: int,
    expert_width: int,
    num_experts: int,
    top_k: int,
    shared_expert_widths=(),
    routing: str = "uniform",
    seed: int = 0,
) -> Problem:
    gen = torch.Generator().manual_seed(seed)

    def bf16(*shape, fan_in: Optional[int] = None) -> torch.Tensor:
        scale = 1.0 if fan_in is None else fan_in**-0.5
        return (torch.randn(*shape, generator=gen) * scale).to(torch.bfloat16)

    # Router weights of either sign, with some exact zeros: the contract allows both.
    router_weights = torch.randn(tokens, top_k, generator=gen)
    router_weights[torch.rand(tokens, top_k, generator=gen) < 0.1] = 0.0
    return Problem(
        x=bf16(tokens, hidden),
        expert_ids=random_routing(tokens, num_experts, top_k, routing, gen),
        router_weights=router_weights,
        gate=bf16(num_experts, expert_width, hidden, fan_in=hidden),
        up=bf16(num_experts, expert_width, hidden, fan_in=hidden),
        down=bf16(num_experts, hidden, expert_width, fan_in=expert_width),
        shared=[
            (bf16(w, hidden, fan_in=hidden), bf16(w, hidden, fan_in=hidden), bf16(hidden, w, fan_in=w))
            for w in shared_expert_widths
        ],
        dy=bf16(tokens, hidden),
    )


@dataclasses.dataclass
class Results:
    """What the layer returns for a Problem: y, dx, d_router_weights and a gradient per weight (Problem.weights'
    order)."""

    y: torch.Tensor
    dx: torch.Tensor
    d_router_weights: torch.Tensor
    weight_grads: List[torch.Tensor]

    def named(self):
        names = ["y", "dx", "d_router_weights"] + [f"weight_grads[{i}]" for i in range(len(self.weight_grads))]
        return list(zip(names, [self.y, self.dx, self.d_router_weights, *self.weight_grads]))


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits, so that equality is bitwise (-0.0 differs from 0.0, a NaN equals itself)."""
    return t.view({torch.bfloat16: torch.int16, torch.float32: torch.int32}.get(t.dtype, t.dtype))


def assert_bitwise_equal(a: Results, b: Results) -> None:
    assert len(a.weight_grads) == len(b.weight_grads)
    for (name, x), (_, y) in zip(a.named(), b.named()):
        assert x.dtype == y.dtype and x.shape == y.shape, (
            f"{name}: {x.dtype} {list(x.shape)} vs {y.dtype} {list(y.shape)}"
        )
        assert torch.equal(bits(x.cpu()), bits(y.cpu())), f"{name} differs"


# ---------------------------------------------------------------------------------------------------------------
# The oracle


def oracle(p: Problem) -> Results:
    """Section 3 in fp64 with autograd."""
    x = p.x.double().requires_grad_()
    router_weights = p.router_weights.double().requires_grad_()
    weights = [w.double().requires_grad_() for w in p.weights]
    gate, up, down = weights[:3]

    def ffn(rows, wg, wu, wd):
        g = rows @ wg.T
        u = rows @ wu.T
        return (g * torch.sigmoid(g) * u) @ wd.T

    y = torch.zeros_like(x)
    for s in range(len(p.shared)):
        y = y + ffn(x, *weights[3 + 3 * s : 6 + 3 * s])
    for j in range(p.expert_ids.shape[1]):
        for e in p.expert_ids[:, j].unique().tolist():
            if e < 0:
                continue
            rows = (p.expert_ids[:, j] == e).nonzero().squeeze(1)
            contribution = router_weights[rows, j, None] * ffn(x[rows], gate[e], up[e], down[e])
            y = y.index_add(0, rows, contribution)
    grads = torch.autograd.grad(y, [x, router_weights, *weights], p.dy.double(), allow_unused=True)
    grads = [torch.zeros_like(t) if g is None else g for g, t in zip(grads, [x, router_weights, *weights])]
    return Results(y.detach(), grads[0], grads[1], list(grads[2:]))


# ---------------------------------------------------------------------------------------------------------------
# The same-precision reference


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).to(torch.float32)


def _silu(g: torch.Tensor) -> torch.Tensor:
    return g * torch.sigmoid(g)


class _Expert:
    """One expert's forward and backward on its rows, rounded where section 5 rounds."""

    def __init__(self, rows: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor, wd: torch.Tensor):
        self.rows, self.wg, self.wu, self.wd = rows, wg.float(), wu.float(), wd.float()
        self.g = _bf16(rows @ self.wg.T)
        self.u = _bf16(rows @ self.wu.T)
        self.h = _bf16(_silu(self.g) * self.u)
        self.out = _bf16(self.h @ self.wd.T)

    def backward(self, dy: torch.Tensor, weight: Optional[torch.Tensor]):
        """dy [n, H] fp32 (bf16 values); weight [n] (None for a shared expert). Returns d_weight [n], the dx rows
        and the weight-gradient sums (fp32)."""
        dh_prime = _bf16(dy @ self.wd)
        d_weight = (dh_prime * self.h).sum(1)
        dh = dh_prime if weight is None else weight[:, None] * dh_prime
        s = torch.sigmoid(self.g)
        dg = _bf16(dh * self.u * s * (1 + self.g * (1 - s)))
        du = _bf16(dh * _silu(self.g))
        dx_rows = _bf16(dg @ self.wg + du @ self.wu)
        scaled_dy = dy if weight is None else _bf16(weight[:, None] * dy)
        return d_weight, dx_rows, (dg.T @ self.rows, du.T @ self.rows, scaled_dy.T @ self.h)


def same_precision(p: Problem) -> Results:
    x = p.x.float()
    dy = p.dy.float()
    tokens, top_k = p.expert_ids.shape
    num_experts = p.gate.shape[0]
    y_acc = torch.zeros_like(x)
    dx_acc = torch.zeros_like(x)
    d_router_weights = torch.zeros(tokens, top_k)
    sums = [torch.zeros(w.shape) for w in p.weights]
    for s, (wg, wu, wd) in enumerate(p.shared):
        expert = _Expert(x, wg, wu, wd)
        y_acc += expert.out
        _, dx_rows, grads = expert.backward(dy, None)
        dx_acc += dx_rows
        for i, g in enumerate(grads):
            sums[3 + 3 * s + i] += g
    # Slots in order, as the combines sum them; within a slot every token is touched once, so grouping the tokens
    # by expert changes no sum. Weight-gradient sums go over each expert's rows in (token, slot) order, as the
    # canonical order does: the rows are collected first.
    expert_rows = [[] for _ in range(num_experts)]
    for j in range(top_k):
        for e in range(num_experts):
            rows = (p.expert_ids[:, j] == e).nonzero().squeeze(1)
            if rows.numel() == 0:
                continue
            expert = _Expert(x[rows], p.gate[e], p.up[e], p.down[e])
            weight = p.router_weights[rows, j]
            y_acc[rows] = weight[:, None] * expert.out + y_acc[rows]
            d_weight, dx_rows, _ = expert.backward(dy[rows], weight)
            d_router_weights[rows, j] = d_weight
            dx_acc[rows] += dx_rows
            expert_rows[e] += [(t, j) for t in rows.tolist()]
    for e, pairs in enumerate(expert_rows):
        if not pairs:
            continue
        pairs.sort()
        rows = torch.tensor([t for t, _ in pairs])
        weight = p.router_weights[rows, torch.tensor([j for _, j in pairs])]
        _, _, (dg, du, dd) = _Expert(x[rows], p.gate[e], p.up[e], p.down[e]).backward(dy[rows], weight)
        sums[0][e], sums[1][e], sums[2][e] = dg, du, dd
    return Results(_bf16(y_acc), _bf16(dx_acc), d_router_weights, [_bf16(s) for s in sums])
