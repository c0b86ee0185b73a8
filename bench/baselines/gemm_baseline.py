"""Baseline: torch._grouped_mm for the expert GEMMs of every model shape, with the dense ceiling of the same run.

For each model shape and rows per expert m (every expert the same m), the local experts of EP 8 (E / 8
groups, fewer when that would pass MAX_ROWS rows) run:
    gate_up          [G*m, H] x [G, H, 2I]              the gate and up projections as one grouped GEMM
    gate_up_swiglu   the same, then SwiGLU as a separate elementwise kernel (what mok fuses)
    down             [G*m, I] x [G, I, H]
Each is checked against an fp32 matmul on three of its groups before it is timed.

    python3 bench/baselines/gemm_baseline.py [--quick | --full]
    python3 bench/baselines/gemm_baseline.py --device cpu --quick        # logic check, no GPU
"""

from __future__ import annotations

import argparse
import sys
import traceback
from dataclasses import dataclass

import torch

import common
import results
from common import MoeShape
from moe_layer import swiglu

BENCHMARK = "baselines-gemm"
BASELINE = "torch_grouped_mm"
OPS = ("gate_up", "gate_up_swiglu", "down")
ROWS_PER_EXPERT = (128, 512, 2048, 4096)
QUICK_SHAPES = ("deepseek-v3", "qwen3.5-397b-a17b")
QUICK_ROWS = (128, 4096)
# Groups are the local experts at EP 8 (a full node), capped so a case stays within a realistic rank's rows.
EP_FOR_GROUPS = 8
MAX_ROWS = 65536
# Grouped GEMMs take 0.1-10 ms: enough repetitions for a stable median within a sweep of seconds.
WARMUP, REPS = 3, 10
QUICK_WARMUP, QUICK_REPS = 2, 5
CEILING_REPS = 10
CPU_HIDDEN, CPU_WIDTH, CPU_ROWS, CPU_MAX_GROUPS = 64, 32, (16, 32), 4


@dataclass(frozen=True)
class GemmCase:
    shape: MoeShape
    rows_per_expert: int
    groups: int
    op: str

    @property
    def name(self) -> str:
        return f"{BASELINE}/{self.shape.name}/m{self.rows_per_expert}/{self.op}"

    @property
    def flops(self) -> float:
        rows = self.groups * self.rows_per_expert
        if self.op == "down":
            return 2.0 * rows * self.shape.width * self.shape.hidden
        return 2.0 * rows * self.shape.hidden * 2 * self.shape.width


def groups_for(shape: MoeShape, rows_per_expert: int, max_groups: int) -> int:
    return max(1, min(shape.experts // EP_FOR_GROUPS, MAX_ROWS // rows_per_expert, max_groups))


class Operands:
    """Random operands of one (shape, rows per expert): activations and both weight stacks."""

    def __init__(self, shape: MoeShape, rows_per_expert: int, groups: int, device: torch.device, seed: int):
        gen = torch.Generator(device=device).manual_seed(seed)
        rows = groups * rows_per_expert

        def randn(*size: int, scale: float = 1.0) -> torch.Tensor:
            return torch.randn(*size, generator=gen, device=device, dtype=torch.bfloat16).mul_(scale)

        self.x = randn(rows, shape.hidden)
        self.h = randn(rows, shape.width)
        self.gate_up = randn(groups, 2 * shape.width, shape.hidden, scale=shape.hidden**-0.5)
        self.down = randn(groups, shape.hidden, shape.width, scale=shape.width**-0.5)
        self.offs = torch.arange(1, groups + 1, device=device, dtype=torch.int32) * rows_per_expert
        self.rows_per_expert = rows_per_expert

    def run(self, op: str) -> torch.Tensor:
        if op == "down":
            return torch._grouped_mm(self.h, self.down.transpose(-2, -1), offs=self.offs)
        gate_up = torch._grouped_mm(self.x, self.gate_up.transpose(-2, -1), offs=self.offs)
        return swiglu(gate_up) if op == "gate_up_swiglu" else gate_up

    def reference(self, op: str, group: int) -> torch.Tensor:
        rows = slice(group * self.rows_per_expert, (group + 1) * self.rows_per_expert)
        if op == "down":
            return self.h[rows].float() @ self.down[group].float().t()
        gate_up = self.x[rows].float() @ self.gate_up[group].float().t()
        return swiglu(gate_up) if op == "gate_up_swiglu" else gate_up

    def check(self, op: str) -> float:
        """The worst relative error over the first, middle and last groups against fp32."""
        out = self.run(op)
        groups = self.offs.numel()
        errors = []
        for group in sorted({0, groups // 2, groups - 1}):
            rows = slice(group * self.rows_per_expert, (group + 1) * self.rows_per_expert)
            errors.append(common.relative_error(out[rows], self.reference(op, group)))
        return max(errors)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_flags(parser)
    parser.add_argument("--shapes", help=f"comma list of {', '.join(common.SHAPES)} or 'all'")
    parser.add_argument("--rows", help="comma list of rows per expert")
    parser.add_argument("--ops", help=f"comma list of {', '.join(OPS)}")
    return parser.parse_args(argv)


def plan_cases(args: argparse.Namespace, on_cpu: bool) -> list[list[GemmCase]]:
    """Cases grouped by operands: each inner list shares one (shape, rows per expert)."""
    if args.shapes is not None and args.shapes != "all":
        names = common.parse_list(args.shapes)
    elif args.quick and args.shapes is None:
        names = list(QUICK_SHAPES)
    else:
        names = list(common.SHAPES)
    unknown = [n for n in names if n not in common.SHAPES]
    if unknown:
        raise SystemExit(f"unknown shape(s) {unknown}; known: {list(common.SHAPES)}")
    rows = (
        [int(r) for r in common.parse_list(args.rows)]
        if args.rows
        else list(QUICK_ROWS if args.quick else ROWS_PER_EXPERT)
    )
    ops = common.parse_choices("--ops", args.ops, OPS, OPS)
    max_groups = CPU_MAX_GROUPS if on_cpu else sys.maxsize
    if on_cpu:
        rows = list(CPU_ROWS)
    plan = []
    for name in names:
        shape = common.SHAPES[name]
        if on_cpu:
            shape = MoeShape(shape.name, shape.experts, CPU_HIDDEN, CPU_WIDTH, shape.top_k, shape.shared_widths)
        for m in rows:
            groups = groups_for(shape, m, max_groups)
            plan.append([GemmCase(shape, m, groups, op) for op in ops])
    return plan


def measure(case: GemmCase, operands: Operands, timer: common.Timer, warmup: int, reps: int, ceiling: float):
    result = results.Case(
        name=case.name,
        params={
            "model": case.shape.name,
            "op": case.op,
            "groups": case.groups,
            "rows_per_expert": case.rows_per_expert,
            "hidden": case.shape.hidden,
            "width": case.shape.width,
            "flops": case.flops,
        },
    )
    error = operands.check(case.op)
    result.params["check_error"] = error
    if not error <= common.CHECK_TOLERANCE:
        result.status = results.STATUS_FAILED
        result.note = f"result check failed: relative error {error:.3e} > {common.CHECK_TOLERANCE}"
        return result
    stats = timer.time(lambda _: operands.run(case.op), warmup, reps)
    tflops = results.rate_figure("tflops", "TFLOP/s", case.flops / common.TERA, stats)
    result.figures = [results.time_figure("time", stats), tflops]
    if ceiling > 0:
        result.figures.append(results.fraction_figure("roofline_fraction", tflops, common.CEILING_NAME, ceiling))
    return result


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    ctx = common.init_distributed(args.device)
    warmup = args.warmup if args.warmup is not None else (QUICK_WARMUP if args.quick else WARMUP)
    reps = args.reps if args.reps is not None else (QUICK_REPS if args.quick else REPS)
    device, sm_count = common.device_description(ctx)
    result = results.Result(
        run=results.make_run_info(BENCHMARK, device, ctx.world, sm_count),
        config={
            "warmup": warmup,
            "warmup_ms": args.warmup_ms,
            "reps": reps,
            "flush_l2": ctx.device.type == "cuda",
            "groups": f"E / {EP_FOR_GROUPS} (the local experts of EP {EP_FOR_GROUPS}), at most {MAX_ROWS} rows",
            "environment": common.environment(ctx),
        },
    )
    timer = common.Timer(ctx, args.warmup_ms)
    ceiling_case, ceiling = common.measure_matmul_ceiling(
        ctx, timer, warmup, CEILING_REPS, common.derived_seed(args.seed, "ceiling", ctx.rank)
    )
    result.cases.append(ceiling_case)
    for cases in plan_cases(args, ctx.device.type == "cpu"):
        first = cases[0]
        seed = common.derived_seed(args.seed, f"{first.shape.name}/{first.rows_per_expert}", ctx.rank)
        operands = Operands(first.shape, first.rows_per_expert, first.groups, ctx.device, seed)
        for case in cases:
            try:
                measured = measure(case, operands, timer, warmup, reps, ceiling)
            except Exception as error:  # a failed case is recorded; the sweep goes on
                traceback.print_exc(file=sys.stderr)
                measured = results.Case(
                    case.name, status=results.STATUS_FAILED, note=f"{type(error).__name__}: {error}"
                )
            result.cases.append(measured)
            if ctx.is_root:
                results.write_result(result, args.out)
                print(results.format_summary(results.Result(result.run, {}, [measured])), end="", flush=True)
        del operands
    common.shutdown(ctx)
    if ctx.is_root:
        print(f"wrote {args.out / results.result_file_name(result.run)}")
    return 1 if any(c.status == results.STATUS_FAILED for c in result.cases) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
