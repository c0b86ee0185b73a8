"""Baseline: NCCL all_to_all_single on raw bytes, the exchange a dispatch would move, in GB/s leaving each rank.

Sizes: the routed rows of one dispatch (tokens x k rows of H bf16 values per rank, split evenly as uniform
routing does) for the DeepSeek-V3 and Qwen3.5 shapes at 4096 tokens per rank, and 512 MiB per rank, the
size of the reference figure in docs/benchmarking.md. Each exchange is checked for exact delivery first.

    torchrun --nproc-per-node 2 bench/baselines/a2a_baseline.py
    torchrun --nproc-per-node 2 bench/baselines/a2a_baseline.py --device cpu --quick   # logic check (gloo)
"""

from __future__ import annotations

import argparse
import sys
import traceback

import torch
import torch.distributed as dist

import common
import results

BENCHMARK = "baselines-a2a"
BASELINE = "nccl_all_to_all"
DISPATCH_SHAPES = ("deepseek-v3", "qwen3.5-397b-a17b")
DISPATCH_TOKENS = 4096
REFERENCE_BYTES = 512 << 20
BF16_BYTES = 2
# A pattern of small integers is exact in bf16, nonzero, and differs per (source, destination) chunk, so a
# chunk delivered to the wrong place or shifted by a row is seen.
PATTERN_PERIOD = 251
# Exchanges take 0.1-3 ms: many repetitions are cheap.
WARMUP, REPS = 5, 20
QUICK_WARMUP, QUICK_REPS = 2, 5
CPU_ELEMENTS = 1 << 16


def pattern(source: int, dest: int, ranks: int, count: int, device: torch.device) -> torch.Tensor:
    base = torch.arange(count, device=device) % PATTERN_PERIOD
    return (base + 1 + source * ranks + dest).to(torch.bfloat16)


def exchange_case(ctx: common.DistContext, timer: common.Timer, name: str, chunk: int, warmup: int, reps: int):
    """Every rank sends `chunk` bf16 values to every rank (itself included), as all_to_all_single does."""
    ranks = ctx.world
    send = torch.cat([pattern(ctx.rank, dest, ranks, chunk, ctx.device) for dest in range(ranks)])
    recv = torch.empty_like(send)
    bytes_per_rank = send.numel() * BF16_BYTES
    leaving = bytes_per_rank * (ranks - 1) / ranks
    case = results.Case(
        name=name,
        params={"bytes_per_rank": bytes_per_rank, "bytes_leaving_each_rank": leaving, "ranks": ranks},
    )
    dist.all_to_all_single(recv, send)
    expected = torch.cat([pattern(source, ctx.rank, ranks, chunk, ctx.device) for source in range(ranks)])
    wrong = int((recv != expected).sum().item())
    if common.any_rank(ctx, wrong != 0):
        case.status, case.note = results.STATUS_FAILED, "exchange check failed: a chunk arrived wrong"
        return case
    stats = timer.time(lambda _: dist.all_to_all_single(recv, send), warmup, reps)
    case.figures = [
        results.time_figure("time", stats),
        results.rate_figure("bandwidth", "GB/s", leaving / common.GIGA, stats),
        results.rate_figure("algorithm_bandwidth", "GB/s", bytes_per_rank / common.GIGA, stats),
    ]
    return case


def planned_sizes(args: argparse.Namespace, ranks: int, on_cpu: bool) -> list[tuple[str, int]]:
    """(case name, values sent to each destination)."""
    if on_cpu:
        return [(f"{BASELINE}/cpu", CPU_ELEMENTS // ranks)]
    sizes = []
    for name in DISPATCH_SHAPES:
        shape = common.SHAPES[name]
        values = DISPATCH_TOKENS * shape.top_k * shape.hidden
        sizes.append((f"{BASELINE}/{name}/t{DISPATCH_TOKENS}", values // ranks))
    if not args.quick:
        sizes.append((f"{BASELINE}/{REFERENCE_BYTES >> 20}MiB", REFERENCE_BYTES // BF16_BYTES // ranks))
    return sizes


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_flags(parser)
    args = parser.parse_args(argv)
    ctx = common.init_distributed(args.device)
    warmup = args.warmup if args.warmup is not None else (QUICK_WARMUP if args.quick else WARMUP)
    reps = args.reps if args.reps is not None else (QUICK_REPS if args.quick else REPS)
    device, sm_count = common.device_description(ctx)
    result = results.Result(
        run=results.make_run_info(BENCHMARK, device, ctx.world, sm_count),
        config={"warmup": warmup, "warmup_ms": args.warmup_ms, "reps": reps, "environment": common.environment(ctx)},
    )
    timer = common.Timer(ctx, args.warmup_ms)
    for name, chunk in planned_sizes(args, ctx.world, ctx.device.type == "cpu"):
        if ctx.world < 2:
            case = results.Case(name, status=results.STATUS_SKIPPED, note="needs 2 or more GPUs (one process each)")
        else:
            try:
                case = exchange_case(ctx, timer, name, chunk, warmup, reps)
            except Exception as error:  # a failed case is recorded; the sweep goes on
                traceback.print_exc(file=sys.stderr)
                case = results.Case(name, status=results.STATUS_FAILED, note=f"{type(error).__name__}: {error}")
        result.cases.append(case)
        if ctx.is_root:
            results.write_result(result, args.out)
            print(results.format_summary(results.Result(result.run, {}, [case])), end="", flush=True)
    common.shutdown(ctx)
    if ctx.is_root:
        print(f"wrote {args.out / results.result_file_name(result.run)}")
    return 1 if any(c.status == results.STATUS_FAILED for c in result.cases) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
