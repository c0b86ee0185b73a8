"""Baseline: the PyTorch MoE layer, forward and backward, timed the way mok is (docs/benchmarking.md).

Run one process per GPU; EP 1 needs no communication and runs on every rank alike:

    torchrun --nproc-per-node 2 bench/baselines/layer_baseline.py            # representative subset
    torchrun --nproc-per-node 2 bench/baselines/layer_baseline.py --full     # the whole sweep
    python3 bench/baselines/layer_baseline.py --device cpu --quick           # logic check, no GPU

Before timing, every (variant, EP, routing) combination is checked against the fp32 loop-over-experts
reference at reduced width: the output, dx, the router-weight gradients and every weight gradient.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist

import common
import layer_check
import results
from common import DistContext, MoeShape
from layer_check import CHECK_HIDDEN, CHECK_TOKENS, CHECK_WIDTH, check_sized
from moe_layer import LocalExchange, MoeLayer, NcclExchange, make_weights
from symm_exchange import SymmBuffers, SymmMemExchange, symm_mem_unavailable_reason, use_nvshmem_backend

BENCHMARK = "baselines-layer"
# Case-name prefixes: a baseline case is named '<baseline>/<mok case name>' (docs/benchmarking.md).
BASELINE_NAMES = {"nccl": "nccl_pytorch", "symm_mem": "symm_mem_pytorch"}
PASSES = ("forward", "backward")
# How the backward leaves the weight gradients: fresh bf16 .grad tensors (autograd's), or added into fp32 main_grad
# tensors after it (main_grad.add_(grad), what a PyTorch training loop without a fused accumulation does). An
# accumulate case times the backward alone and carries /accumulate in its name, as mok-bench-layer's.
GRAD_MODES = ("fresh", "accumulate")
# Starting values of main_grad: earlier steps' sums, not zeros (as mok-bench-layer's).
MAIN_GRAD_SCALE = 0.01
FP32_BYTES = 4
ROUTINGS = ("uniform", "zipf")
DEFAULT_ZIPF_EXPONENT = 1.2

# Default: the two shapes the transport is tuned on, one token count, both routings, both passes.
DEFAULT_SHAPES = ("deepseek-v3", "qwen3.5-397b-a17b")
DEFAULT_TOKENS = (4096,)
FULL_TOKENS = (2048, 4096, 16384)
QUICK_SHAPES = ("deepseek-v3",)
# A layer pass takes 5-150 ms: a few repetitions give a stable median and keep the full sweep within minutes.
# The warm-up lasts at least --warmup-ms of device time besides these counts (common.Timer): two seconds, as for mok's
# layer benchmark (bench/layer/main.cpp), so that the repetitions come after the power cap's first dip
# (docs/benchmarking.md, "Warm-up to the steady clock").
WARMUP, REPS = 3, 5
QUICK_WARMUP, QUICK_REPS = 3, 3
WARMUP_MS = 2000.0
# The ceiling's GEMM takes about 1.5 ms: more repetitions cost nothing.
CEILING_REPS = 10

# The CPU logic check runs every case at this size instead of the model's.
CPU_HIDDEN, CPU_WIDTH, CPU_TOKENS = 64, 32, 64
CPU_MAX_EXPERTS = 16

# Free device memory a case may plan to use: the allocator needs headroom for fragmentation.
MEMORY_HEADROOM = 0.9
BF16_BYTES = 2


@dataclass(frozen=True)
class Sweep:
    shapes: tuple[MoeShape, ...]
    tokens: tuple[int, ...]
    eps: tuple[int, ...]
    routings: tuple[str, ...]
    passes: tuple[str, ...]
    grad_modes: tuple[str, ...]
    variants: tuple[str, ...]
    zipf_exponent: float
    warmup: int
    reps: int


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_flags(parser)
    parser.add_argument("--shapes", help=f"comma list of {', '.join(common.SHAPES)} or 'all'")
    parser.add_argument("--tokens", help="comma list of tokens per rank")
    parser.add_argument("--ep", help="comma list of EP degrees, each dividing the number of processes")
    parser.add_argument("--routing", help="comma list of uniform, zipf")
    parser.add_argument("--passes", help="comma list of forward, backward")
    parser.add_argument(
        "--grad-modes", help="comma list of fresh, accumulate (default fresh): accumulate adds the weight gradients "
        "into fp32 main_grad after the backward and times the backward alone"
    )
    parser.add_argument("--variants", help="comma list of nccl, symm_mem")
    parser.add_argument("--zipf-exponent", type=float, default=DEFAULT_ZIPF_EXPONENT, help="s in p(e) ~ 1/rank^s")
    parser.set_defaults(warmup_ms=WARMUP_MS)
    return parser.parse_args(argv)


def make_sweep(args: argparse.Namespace, world: int) -> Sweep:
    if args.shapes == "all" or (args.shapes is None and args.full):
        shape_names: tuple[str, ...] = tuple(common.SHAPES)
    elif args.shapes is not None:
        shape_names = tuple(common.parse_list(args.shapes))
    else:
        shape_names = QUICK_SHAPES if args.quick else DEFAULT_SHAPES
    unknown = [name for name in shape_names if name not in common.SHAPES]
    if unknown:
        raise SystemExit(f"unknown shape(s) {unknown}; known: {list(common.SHAPES)}")
    if args.tokens is not None:
        tokens = tuple(int(t) for t in common.parse_list(args.tokens))
    else:
        tokens = FULL_TOKENS if args.full else DEFAULT_TOKENS
    if args.ep is not None:
        eps = tuple(int(e) for e in common.parse_list(args.ep))
    else:
        eps = tuple(sorted({1, world})) if args.full else (world,)
    bad_eps = [ep for ep in eps if ep < 1 or world % ep != 0]
    if bad_eps:
        raise SystemExit(f"EP degree(s) {bad_eps} do not divide the {world} processes of this run")
    routings = common.parse_choices("--routing", args.routing, ROUTINGS, ROUTINGS[:1] if args.quick else ROUTINGS)
    passes = common.parse_choices("--passes", args.passes, PASSES, PASSES)
    grad_modes = common.parse_choices("--grad-modes", args.grad_modes, GRAD_MODES, GRAD_MODES[:1])
    variants = common.parse_choices("--variants", args.variants, tuple(BASELINE_NAMES), tuple(BASELINE_NAMES))
    warmup = args.warmup if args.warmup is not None else (QUICK_WARMUP if args.quick else WARMUP)
    reps = args.reps if args.reps is not None else (QUICK_REPS if args.quick else REPS)
    shapes = tuple(common.SHAPES[name] for name in shape_names)
    if args.device == "cpu":
        shapes = tuple(cpu_sized(shape) for shape in shapes)
        tokens = (CPU_TOKENS,)
    return Sweep(shapes, tokens, eps, routings, passes, grad_modes, variants, args.zipf_exponent, warmup, reps)


def cpu_sized(shape: MoeShape) -> MoeShape:
    """The same routing structure (k, shared experts) on widths a CPU runs in a blink."""
    experts = min(shape.experts, CPU_MAX_EXPERTS)
    return MoeShape(
        shape.name, experts, CPU_HIDDEN, CPU_WIDTH, shape.top_k, tuple(CPU_WIDTH for _ in shape.shared_widths)
    )


def case_name(
    variant: str, shape: MoeShape, ep: int, tokens: int, routing: str, pass_name: str, grad_mode: str = "fresh"
) -> str:
    grads = "" if grad_mode == "fresh" else f"/{grad_mode}"
    return f"{BASELINE_NAMES[variant]}/{shape.name}/ep{ep}/t{tokens}/{routing}{grads}/{pass_name}"


def timed_passes(sweep: Sweep) -> list[tuple[str, str]]:
    """(grad mode, pass) of every timed case of a (shape, EP, tokens, routing): fresh's passes, then the backward of
    each other mode (its forward is fresh's)."""
    out = []
    for grad_mode in sweep.grad_modes:
        for pass_name in sweep.passes:
            if grad_mode == "fresh" or pass_name == "backward":
                out.append((grad_mode, pass_name))
    return out


class Runner:
    """Holds the run's state: context, groups, timer, ceiling, symmetric buffers and the result so far."""

    def __init__(self, ctx: DistContext, sweep: Sweep, args: argparse.Namespace):
        self.ctx = ctx
        self.sweep = sweep
        self.args = args
        self.groups = common.EpGroups(ctx)
        self.timer = common.Timer(ctx, args.warmup_ms)
        self.pools: dict[int, SymmBuffers] = {}
        self.symm_reason: Optional[str] = None
        device, sm_count = common.device_description(ctx)
        self.result = results.Result(
            run=results.make_run_info(BENCHMARK, device, ctx.world, sm_count),
            config={
                "warmup": sweep.warmup,
                "warmup_ms": args.warmup_ms,
                "reps": sweep.reps,
                "flush_l2": ctx.device.type == "cuda",
                "zipf_exponent": sweep.zipf_exponent,
                "timing": "CUDA events per repetition, maximum over ranks, median and spread over repetitions",
                "forward": "timed with autograd recording (as in training)",
                "backward": "forward untimed, then the backward timed; weight gradients fresh (bf16), or in "
                "/accumulate cases added into fp32 main_grad by main_grad.add_(grad) after it, inside the timing",
                "check": f"fp32 loop-over-experts reference at H {CHECK_HIDDEN}, I {CHECK_WIDTH}, "
                f"{CHECK_TOKENS} tokens per rank; tolerance {common.CHECK_TOLERANCE} (relative Frobenius)",
                "environment": common.environment(ctx),
                "device_kind": ctx.device.type,
            },
        )
        self.ceiling_tflops = 0.0

    # -- bookkeeping ------------------------------------------------------------------------------------------

    def add(self, case: results.Case) -> None:
        """Records a case and rewrites the JSON, so a run cut short keeps what it measured."""
        self.result.cases.append(case)
        if self.ctx.is_root:
            results.write_result(self.result, self.args.out)
            if case.figures or case.status != results.STATUS_OK:
                print(results.format_summary(results.Result(self.result.run, {}, [case])), end="", flush=True)
            else:
                print(f"{case.name}  ok", flush=True)

    def rank_in(self, ep: int) -> int:
        group = self.groups.get(ep)
        return 0 if group is None else dist.get_rank(group)

    # -- exchanges --------------------------------------------------------------------------------------------

    def symm_pool(self, ep: int) -> SymmBuffers:
        if ep not in self.pools:
            sent, recv, splits = self.symm_sizes(ep)
            self.pools[ep] = SymmBuffers(self.groups.get(ep), self.ctx.device, sent, recv, splits)
        return self.pools[ep]

    def symm_sizes(self, ep: int) -> tuple[int, int, int]:
        """Largest per-role element counts over this EP's cases and checks: the pool's sizes."""
        problems = []  # (tokens per rank, hidden, experts, top_k)
        for shape in self.sweep.shapes:
            problems += [(tokens, shape.hidden, shape.experts, shape.top_k) for tokens in self.sweep.tokens]
            small = check_sized(shape, ep)
            problems.append((CHECK_TOKENS, small.hidden, small.experts, small.top_k))
        sent = recv = splits = 0
        for tokens, hidden, experts, top_k in problems:
            rows = tokens * top_k
            sent = max(sent, rows * hidden)
            recv = max(recv, SymmBuffers.worst_case_rows(rows, ep, experts // ep) * hidden)
            splits = max(splits, experts)
        return sent, recv, splits

    def exchange(self, variant: str, shape: MoeShape, ep: int, tokens: int):
        group = self.groups.get(ep)
        if group is None:
            return LocalExchange(shape.experts)
        if variant == "nccl":
            return NcclExchange(shape.experts, group)
        return SymmMemExchange(shape.experts, group, tokens, shape.top_k, shape.hidden, self.symm_pool(ep))

    def variant_skip_reason(self, variant: str, ep: int) -> Optional[str]:
        if variant == "symm_mem":
            if ep == 1:
                return "EP 1 exchanges nothing"
            if self.ctx.device.type != "cuda":
                return "symmetric memory needs CUDA"
            return self.symm_reason
        return None

    # -- the check --------------------------------------------------------------------------------------------

    def check(self, variant: str, shape: MoeShape, ep: int, routing: str) -> results.Case:
        small = check_sized(shape, ep)
        name = f"check/{BASELINE_NAMES[variant]}/{shape.name}/ep{ep}/{routing}"
        case = results.Case(name=name, params={"experts": small.experts, "hidden": small.hidden, "width": small.width})
        errors = layer_check.check_errors(
            self.ctx,
            small,
            ep,
            self.rank_in(ep),
            self.groups.get(ep),
            lambda: self.exchange(variant, small, ep, CHECK_TOKENS),
            routing,
            self.sweep.zipf_exponent,
            self.args.seed,
        )
        case.params.update(errors)
        worst = max(errors.values())
        if common.any_rank(self.ctx, not worst <= common.CHECK_TOLERANCE):
            case.status = results.STATUS_FAILED
            case.note = f"differs from the fp32 reference: {errors}"
        return case

    # -- one timed case ---------------------------------------------------------------------------------------

    def memory_shortfall(
        self, shape: MoeShape, ep: int, tokens: int, max_rows: int, pass_name: str, grad_mode: str
    ) -> Optional[str]:
        """A collective verdict on whether the case fits: one rank running out would hang the others."""
        if self.ctx.device.type != "cuda":
            return None
        sent = tokens * shape.top_k
        hidden, width = shape.hidden, shape.width
        # Saved and transient activations of one pass: sorted, received, grouped, gate/up, h, outputs.
        activations = BF16_BYTES * (3 * sent * hidden + max_rows * (4 * hidden + 3 * width))
        local_weights = BF16_BYTES * 3 * (shape.experts // ep) * hidden * width
        backward = pass_name == "backward"
        need = activations * (2 if backward else 1) + (local_weights if backward else 0)
        if grad_mode == "accumulate":
            shared = sum(3 * hidden * w for w in shape.shared_widths)
            need += FP32_BYTES * (3 * (shape.experts // ep) * hidden * width + shared)
        free, _ = torch.cuda.mem_get_info(self.ctx.device)
        # What the caching allocator holds but no tensor uses (an earlier case's main_grad, say) is free to this case.
        free += torch.cuda.memory_reserved(self.ctx.device) - torch.cuda.memory_allocated(self.ctx.device)
        short = need > MEMORY_HEADROOM * free
        if common.any_rank(self.ctx, short):
            return (
                f"needs about {need / common.GIB:.1f} GiB more than the {free / common.GIB:.1f} GiB free on some rank"
            )
        return None

    def time_case(self, layer: MoeLayer, x, route, dy, pass_name: str, grad_mode: str) -> results.TimingStats:
        params = layer.weights.parameters()
        router_weights = route.weights.clone().requires_grad_(True)
        holder: list[torch.Tensor] = []
        main_grads: list[torch.Tensor] = []
        if grad_mode == "accumulate":
            gen = torch.Generator(device=x.device).manual_seed(common.derived_seed(self.args.seed, "main_grad", 0))
            for p in params:
                t = torch.empty(p.shape, dtype=torch.float32, device=p.device)
                main_grads.append(t.uniform_(-MAIN_GRAD_SCALE, MAIN_GRAD_SCALE, generator=gen))

        def forward(_: int) -> None:
            holder.clear()
            holder.append(layer(x, route.ids, router_weights))

        def prepare_backward(_: int) -> None:
            holder.clear()
            for t in (*params, x, router_weights):
                t.grad = None
            holder.append(layer(x, route.ids, router_weights))

        def backward(_: int) -> None:
            holder[0].backward(dy)
            for p, main_grad in zip(params, main_grads):
                main_grad.add_(p.grad)

        try:
            if pass_name == "forward":
                return self.timer.time(forward, self.sweep.warmup, self.sweep.reps)
            return self.timer.time(backward, self.sweep.warmup, self.sweep.reps, prepare=prepare_backward)
        finally:
            holder.clear()
            main_grads.clear()
            for t in (*params, x, router_weights):
                t.grad = None

    def run_case(self, variant, shape, ep, tokens, routing, pass_name, grad_mode, weights, route_all) -> results.Case:
        ctx = self.ctx
        name = case_name(variant, shape, ep, tokens, routing, pass_name, grad_mode)
        per_rank_rows = common.rows_per_rank(route_all, shape.experts, ep)
        flops = common.forward_flops(shape, tokens) * (2.0 if pass_name == "backward" else 1.0)
        case = results.Case(
            name=name,
            params={
                "variant": variant,
                "model": shape.name,
                "experts": shape.experts,
                "hidden": shape.hidden,
                "width": shape.width,
                "top_k": shape.top_k,
                "shared_widths": list(shape.shared_widths),
                "tokens_per_rank": tokens,
                "ep": ep,
                "routing": routing,
                "zipf_exponent": self.sweep.zipf_exponent if routing == "zipf" else None,
                "pass": pass_name,
                "grad_mode": grad_mode,
                "flops_per_rank": flops,
                "routed_rows_max_rank": max(per_rank_rows),
                "rank_imbalance": max(per_rank_rows) / (sum(per_rank_rows) / len(per_rank_rows)),
            },
        )
        shortfall = self.memory_shortfall(shape, ep, tokens, max(per_rank_rows), pass_name, grad_mode)
        if shortfall is not None:
            case.status, case.note = results.STATUS_SKIPPED, shortfall
            return case
        rank = self.rank_in(ep)
        route = route_all.for_rank(rank, tokens, ctx.device)
        gen = torch.Generator(device=ctx.device).manual_seed(common.derived_seed(self.args.seed, "inputs", ctx.rank))
        x = torch.randn(tokens, shape.hidden, generator=gen, device=ctx.device).to(torch.bfloat16).requires_grad_(True)
        dy = torch.randn(tokens, shape.hidden, generator=gen, device=ctx.device).to(torch.bfloat16)
        layer = MoeLayer(shape, weights, self.exchange(variant, shape, ep, tokens))
        common.reset_peak_memory(ctx)
        stats = self.time_case(layer, x, route, dy, pass_name, grad_mode)
        time = results.time_figure("time", stats)
        tflops = results.rate_figure("tflops", "TFLOP/s", flops / common.TERA, stats)
        case.figures = [time, tflops]
        if self.ceiling_tflops > 0:
            case.figures.append(
                results.fraction_figure("roofline_fraction", tflops, common.CEILING_NAME, self.ceiling_tflops)
            )
        case.figures.append(results.value_figure("peak_memory", "GiB", results.LOWER, common.peak_memory_gib(ctx)))
        return case

    # -- the sweep --------------------------------------------------------------------------------------------

    def run(self) -> int:
        sweep, ctx = self.sweep, self.ctx
        ceiling, self.ceiling_tflops = common.measure_matmul_ceiling(
            ctx, self.timer, sweep.warmup, CEILING_REPS, common.derived_seed(self.args.seed, "ceiling", ctx.rank)
        )
        self.add(ceiling)
        # One variant after the other: a variant that fails hard (a broken NVSHMEM setup) leaves the others done.
        for variant in sweep.variants:
            failed = self.run_checks(variant)
            for shape in sweep.shapes:
                for ep in sweep.eps:
                    self.run_shape(variant, shape, ep, failed)
        return 1 if any(c.status == results.STATUS_FAILED for c in self.result.cases) else 0

    def run_checks(self, variant: str) -> set[tuple[int, str, str]]:
        """Checks every (EP, shape, routing) of the variant; returns those that failed."""
        failed = set()
        for ep in self.sweep.eps:
            if self.variant_skip_reason(variant, ep) is not None:
                continue
            for shape in self.sweep.shapes:
                for routing in self.sweep.routings:
                    name = f"check/{BASELINE_NAMES[variant]}/{shape.name}/ep{ep}/{routing}"
                    case = self.guarded(name, lambda: self.check(variant, shape, ep, routing))
                    self.add(case)
                    if case.status != results.STATUS_OK:
                        failed.add((ep, shape.name, routing))
        return failed

    def run_shape(self, variant: str, shape: MoeShape, ep: int, failed: set) -> None:
        reason = self.variant_skip_reason(variant, ep)
        if reason is not None and ep == 1:
            return
        ctx = self.ctx
        weights = None
        if reason is None:
            seed = common.derived_seed(self.args.seed, "weights", ctx.rank)
            local = shape.experts // ep
            weights = self.guarded_value(
                lambda: make_weights(local, shape.hidden, shape.width, shape.shared_widths, ctx.device, seed)
            )
        for tokens in self.sweep.tokens:
            for routing in self.sweep.routings:
                route_all = common.make_routing(
                    tokens * ep, shape.experts, shape.top_k, routing, self.sweep.zipf_exponent, self.args.seed
                )
                for grad_mode, pass_name in timed_passes(self.sweep):
                    name = case_name(variant, shape, ep, tokens, routing, pass_name, grad_mode)
                    case = results.Case(name=name, params={"variant": variant, "ep": ep})
                    if reason is not None:
                        case.status, case.note = results.STATUS_SKIPPED, reason
                    elif weights is None:
                        case.status, case.note = results.STATUS_SKIPPED, "the weights do not fit in memory"
                    elif (ep, shape.name, routing) in failed:
                        case.status, case.note = results.STATUS_FAILED, "not timed: the correctness check failed"
                    else:
                        run = (variant, shape, ep, tokens, routing, pass_name, grad_mode, weights, route_all)
                        case = self.guarded(name, lambda: self.run_case(*run))
                    self.add(case)
        del weights
        if ctx.device.type == "cuda":
            torch.cuda.empty_cache()

    def guarded(self, name: str, make_case) -> results.Case:
        """Runs make_case; an exception on any rank turns into a failed case on every rank."""
        case: Optional[results.Case] = None
        note = ""
        unsupported = False
        try:
            case = make_case()
        except torch.cuda.OutOfMemoryError as error:
            note = f"out of memory: {str(error).splitlines()[0]}"
        except Exception as error:  # a failed case is recorded; the sweep goes on
            traceback.print_exc(file=sys.stderr)
            note = f"{type(error).__name__}: {error}"
            # all_to_all_vdev_2d of the installed PyTorch takes fewer local experts than the model shapes have:
            # the baseline does not exist for this case, which is a skip, not a failure of the baseline.
            unsupported = UNSUPPORTED_BY_PYTORCH in str(error)
        if common.any_rank(self.ctx, case is None):
            status = results.STATUS_SKIPPED if unsupported else results.STATUS_FAILED
            return results.Case(name=name, status=status, note=note or "failed on another rank")
        return case

    def guarded_value(self, make):
        value = None
        try:
            value = make()
        except torch.cuda.OutOfMemoryError:
            value = None
        return None if common.any_rank(self.ctx, value is None) else value


# The message of torch.ops.symm_mem.all_to_all_vdev_2d when a rank holds more experts than it supports.
UNSUPPORTED_BY_PYTORCH = "Number of experts must be smaller than"


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    ctx = common.init_distributed(args.device)
    sweep = make_sweep(args, ctx.world)
    runner = Runner(ctx, sweep, args)
    if ctx.device.type != "cuda":
        runner.symm_reason = "symmetric memory needs CUDA"
    elif "symm_mem" in sweep.variants:
        runner.symm_reason = symm_mem_unavailable_reason()
        if runner.symm_reason is None:
            common.size_nvshmem_heap(
                max((SymmBuffers.bytes_needed(*runner.symm_sizes(ep)) for ep in sweep.eps if ep > 1), default=0)
            )
            try:
                use_nvshmem_backend()
            except RuntimeError as error:
                runner.symm_reason = f"cannot select the NVSHMEM backend: {error}"
    runner.result.config["symm_mem"] = runner.symm_reason or "available"
    try:
        status = runner.run()
    finally:
        common.shutdown(ctx)
    if ctx.is_root:
        print(f"wrote {args.out / results.result_file_name(runner.result.run)}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
