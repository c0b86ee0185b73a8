"""What the PyTorch baselines share: model shapes, routing, distributed setup, timing and the in-run ceiling.

Timing follows docs/benchmarking.md: warm-up runs, then repetitions each bracketed by CUDA events, the L2
flushed before every run, ranks aligned on the device before every run, and each repetition's time taken as
the maximum over ranks. On the CPU (a logic check without a GPU) wall-clock time stands in for events.
"""

from __future__ import annotations

import argparse
import datetime
import os
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.distributed as dist

import results

# NVLink multicast (NVLS) stays off on every machine mok runs on; set before NCCL or NVSHMEM initialise.
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

# A collective that does not complete within this long is a hang, not a slow case: fail instead of waiting
# out NCCL's ten-minute default on a machine whose time is scarce.
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=180)

GIB = float(1 << 30)
MS_PER_S = 1e3
TERA = 1e12
GIGA = 1e9


def keep_multicast_off() -> None:
    os.environ.update(MULTICAST_OFF)


# NVSHMEM reserves its symmetric heap at start-up (1 GiB by default); the device-split baseline needs more.
NVSHMEM_HEAP_MARGIN = 1.25
NVSHMEM_HEAP_RESERVE_BYTES = 1 << 30


def size_nvshmem_heap(bytes_needed: int) -> None:
    """Sets NVSHMEM_SYMMETRIC_SIZE (unless the caller already chose one) before NVSHMEM initialises."""
    if bytes_needed <= 0 or "NVSHMEM_SYMMETRIC_SIZE" in os.environ:
        return
    size = int(bytes_needed * NVSHMEM_HEAP_MARGIN) + NVSHMEM_HEAP_RESERVE_BYTES
    os.environ["NVSHMEM_SYMMETRIC_SIZE"] = str(size)


def derived_seed(seed: int, purpose: str, rank: int = 0) -> int:
    """A seed of its own for each (purpose, rank), reproducible from the run's one seed."""
    return zlib.crc32(f"{seed}/{purpose}/{rank}".encode())


@dataclass(frozen=True)
class MoeShape:
    """A model's MoE layer (the presets of include/mok/models.hpp, from the brief's table)."""

    name: str
    experts: int
    hidden: int
    width: int
    top_k: int
    shared_widths: tuple[int, ...]


SHAPES: dict[str, MoeShape] = {
    s.name: s
    for s in (
        MoeShape("kimi-k2.7-code", 384, 7168, 2048, 8, (2048,)),
        MoeShape("glm-5.2", 256, 6144, 2048, 8, (2048,)),
        MoeShape("qwen3.5-397b-a17b", 512, 4096, 1024, 10, (1024,)),
        MoeShape("deepseek-v4-pro", 384, 7168, 3072, 6, (3072,)),
        MoeShape("deepseek-v3", 256, 7168, 2048, 8, (2048,)),
        MoeShape("qwen3-235b-a22b", 128, 4096, 1536, 8, ()),
    )
}


def forward_flops(shape: MoeShape, tokens: int) -> float:
    """Useful forward FLOPs per rank: 3 GEMMs of 2 FLOPs per multiply-add, routed and shared."""
    routed = 6.0 * tokens * shape.top_k * shape.hidden * shape.width
    shared = sum(6.0 * tokens * shape.hidden * width for width in shape.shared_widths)
    return routed + shared


def backward_flops(shape: MoeShape, tokens: int) -> float:
    """The backward has two GEMMs (input and weight gradients) for each forward GEMM."""
    return 2.0 * forward_flops(shape, tokens)


def parse_list(text: str) -> list[str]:
    return [item for item in text.split(",") if item]


def parse_choices(
    flag: str, text: Optional[str], allowed: tuple[str, ...], default: tuple[str, ...]
) -> tuple[str, ...]:
    """A comma list of values from `allowed` (the default when the flag was not given)."""
    if text is None:
        return default
    chosen = tuple(parse_list(text))
    unknown = [item for item in chosen if item not in allowed]
    if unknown or not chosen:
        raise SystemExit(f"{flag}: expected a comma list of {', '.join(allowed)}; got '{text}'")
    return chosen


# Warm-up by duration, the C++ benchmarks' kDefaultWarmupMs (bench/common/timing.hpp): enough device time to bring a GPU
# that was idle under its power cap (docs/benchmarking.md, "Warm-up to the steady clock"; the layer baseline asks for
# more).
WARMUP_MS = 300.0


def non_negative_ms(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number of milliseconds, got '{text}'")
    return value


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    """The flags every benchmark program shares (bench/common/options.hpp has the C++ twin)."""
    parser.add_argument("--out", type=Path, default=results.default_out_dir(), help="where the JSON goes")
    parser.add_argument("--quick", action="store_true", help="a representative subset, fewer repetitions")
    parser.add_argument("--full", action="store_true", help="the whole sweep")
    parser.add_argument("--warmup", type=int, default=None, help="untimed runs before the timed ones, at least")
    parser.add_argument(
        "--warmup-ms",
        type=non_negative_ms,
        default=WARMUP_MS,
        help="and at least this much device time in them (0: the count alone)",
    )
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions")
    parser.add_argument("--seed", type=int, default=2026, help="seed of every random input")
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu runs the same logic on tiny shapes without a GPU (a check of the script, not a measurement)",
    )


@dataclass
class DistContext:
    rank: int
    world: int
    device: torch.device
    backend: Optional[str]  # None when single-process without a process group

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.backend is not None:
            dist.barrier()


def init_distributed(device_kind: str) -> DistContext:
    """One process per GPU under torchrun (NCCL; gloo on the CPU), or a single process without a group."""
    keep_multicast_off()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_kind == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world == 1 and "MASTER_ADDR" not in os.environ:
        return DistContext(rank=0, world=1, device=device, backend=None)
    backend = "nccl" if device_kind == "cuda" else "gloo"
    kwargs = {"device_id": device} if device_kind == "cuda" else {}
    dist.init_process_group(backend=backend, timeout=COLLECTIVE_TIMEOUT, **kwargs)
    return DistContext(rank=rank, world=world, device=device, backend=backend)


def shutdown(ctx: DistContext) -> None:
    if ctx.backend is not None:
        dist.destroy_process_group()


class EpGroups:
    """Expert-parallel groups of every degree a run uses: consecutive blocks of `ep` ranks."""

    def __init__(self, ctx: DistContext):
        self._ctx = ctx
        self._groups: dict[int, Optional[dist.ProcessGroup]] = {1: None}

    def get(self, ep: int) -> Optional[dist.ProcessGroup]:
        if ep in self._groups:
            return self._groups[ep]
        if self._ctx.world % ep != 0:
            raise ValueError(f"EP {ep} does not divide the {self._ctx.world} ranks of this run")
        if ep == self._ctx.world:
            group = dist.group.WORLD
        else:
            # Collective: every rank creates every block's group, in the same order.
            group, _ = dist.new_subgroups(group_size=ep)
        self._groups[ep] = group
        return group


def all_reduce_max(ctx: DistContext, value: float) -> float:
    if ctx.backend is None:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def any_rank(ctx: DistContext, flag: bool) -> bool:
    return all_reduce_max(ctx, 1.0 if flag else 0.0) > 0.0


class Timer:
    """Times a body on this rank and takes, per repetition, the maximum over all ranks of the run."""

    # Writing twice the L2's size evicts whatever the previous run left there.
    L2_COVER_FACTOR = 2
    # The C++ Timer's kMaxWarmupRounds: each round aims at the rest of the duration, so a few reach it.
    MAX_WARMUP_ROUNDS = 8

    def __init__(self, ctx: DistContext, warmup_ms: float = WARMUP_MS):
        self._ctx = ctx
        self._warmup_ms = warmup_ms
        self._flush: Optional[torch.Tensor] = None
        self._align: Optional[torch.Tensor] = None
        if ctx.device.type == "cuda":
            l2_bytes = torch.cuda.get_device_properties(ctx.device).L2_cache_size
            self._flush = torch.empty(self.L2_COVER_FACTOR * l2_bytes, dtype=torch.uint8, device=ctx.device)
            self._align = torch.zeros(1, dtype=torch.float32, device=ctx.device)

    def _align_ranks(self) -> None:
        # A tiny all-reduce on the stream: every rank's start event then follows the slowest rank's arrival,
        # so skew left by the previous run is not charged to this one.
        if self._ctx.backend is not None and self._align is not None:
            dist.all_reduce(self._align)

    def _run(self, body: Callable[[int], None], iteration: int, prepare: Optional[Callable[[int], None]], events=None):
        if prepare is not None:
            # Aligned before the untimed part too: no rank may start the next run (and write into a peer's
            # buffers) while a peer still works on the previous one.
            self._align_ranks()
            prepare(iteration)
        self._flush.bitwise_not_()
        self._align_ranks()
        if events is not None:
            events[0].record()
        body(iteration)
        if events is not None:
            events[1].record()

    def _warm_up(self, body, warmup: int, prepare) -> tuple[int, float]:
        """Runs until there have been `warmup` runs and they have taken the Timer's warmup_ms of device time on the
        slowest rank; every rank runs the same count (the bodies may be collectives)."""
        runs, elapsed_ms = 0, 0.0
        next_runs = max(warmup, 1 if self._warmup_ms > 0 else 0)
        for _ in range(self.MAX_WARMUP_ROUNDS):
            if next_runs <= 0:
                break
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for i in range(next_runs):
                self._run(body, runs + i, prepare)
            stop.record()
            torch.cuda.synchronize(self._ctx.device)
            elapsed_ms += all_reduce_max(self._ctx, start.elapsed_time(stop))
            runs += next_runs
            next_runs = results.more_warmup_runs(elapsed_ms, runs, self._warmup_ms) if self._warmup_ms > 0 else 0
        return runs, elapsed_ms

    def time(
        self,
        body: Callable[[int], None],
        warmup: int,
        reps: int,
        prepare: Optional[Callable[[int], None]] = None,
    ) -> results.TimingStats:
        """Runs prepare(i) (untimed) and body(i) for i = 0, 1, ...: warm-up runs until there have been `warmup`
        and they have taken the Timer's warmup_ms of device time, then `reps` timed bodies."""
        if self._ctx.device.type != "cuda":
            return self._time_on_cpu(body, warmup, reps, prepare)
        warmup_runs, warmup_ms = self._warm_up(body, warmup, prepare)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for rep in range(reps):
            self._run(body, warmup_runs + rep, prepare, events[rep])
        torch.cuda.synchronize(self._ctx.device)
        samples = [start.elapsed_time(stop) for start, stop in events]
        stats = results.summarize(self._max_over_ranks(samples))
        stats.warmup_runs, stats.warmup_ms = warmup_runs, warmup_ms
        return stats

    def _time_on_cpu(self, body, warmup, reps, prepare) -> results.TimingStats:
        samples = []
        for iteration in range(warmup + reps):
            if prepare is not None:
                prepare(iteration)
            start = time.perf_counter()
            body(iteration)
            if iteration >= warmup:
                samples.append((time.perf_counter() - start) * MS_PER_S)
        stats = results.summarize(self._max_over_ranks(samples))
        stats.warmup_runs = warmup
        return stats

    def _max_over_ranks(self, samples: list[float]) -> list[float]:
        if self._ctx.backend is None:
            return samples
        mine = torch.tensor(samples, dtype=torch.float64, device=self._ctx.device)
        gathered = [torch.empty_like(mine) for _ in range(self._ctx.world)]
        dist.all_gather(gathered, mine)
        return results.max_over_ranks([g.tolist() for g in gathered])


@dataclass
class Routing:
    """Expert ids [N, k] (int64) and router weights [N, k] (fp32) for the N tokens of every rank together."""

    ids: torch.Tensor
    weights: torch.Tensor

    def for_rank(self, rank: int, tokens_per_rank: int, device: torch.device) -> "Routing":
        rows = slice(rank * tokens_per_rank, (rank + 1) * tokens_per_rank)
        return Routing(self.ids[rows].to(device), self.weights[rows].to(device))


# Router weights drawn from [floor, 1) before normalising: never zero, as real softmax weights are not.
_WEIGHT_FLOOR = 0.05


def make_routing(num_tokens: int, experts: int, top_k: int, mode: str, zipf_exponent: float, seed: int) -> Routing:
    """Routing for the global batch, the same on every rank (generated on the CPU from one seed).

    uniform: k distinct experts per token, uniformly at random.
    zipf:    expert popularity p(e) proportional to 1 / rank(e)^s over a seeded random order of the experts
             (so the popular experts land on random ranks); k distinct experts per token drawn by popularity.
    """
    gen = torch.Generator().manual_seed(seed)
    if mode == "uniform":
        ids = torch.rand(num_tokens, experts, generator=gen).topk(top_k, dim=1).indices
    elif mode == "zipf":
        popularity = torch.arange(1, experts + 1, dtype=torch.float64).pow(-zipf_exponent)
        popularity = popularity[torch.randperm(experts, generator=gen)]
        ids = torch.multinomial(popularity.expand(num_tokens, experts), top_k, replacement=False, generator=gen)
    else:
        raise ValueError(f"routing '{mode}': expected uniform or zipf")
    weights = torch.rand(num_tokens, top_k, generator=gen) * (1.0 - _WEIGHT_FLOOR) + _WEIGHT_FLOOR
    weights = weights / weights.sum(dim=1, keepdim=True)
    return Routing(ids.to(torch.int64), weights.to(torch.float32))


def rows_per_rank(routing: Routing, experts: int, ep: int) -> list[int]:
    """Routed rows each EP rank's experts receive from the whole batch (the load the slowest rank carries)."""
    counts = torch.bincount(routing.ids.reshape(-1), minlength=experts)
    return counts.view(ep, experts // ep).sum(dim=1).tolist()


# Accepted relative Frobenius error of a bf16 pipeline against its fp32 reference on random data. Each bf16
# storage (g, u, h, the expert outputs, the combined sum) rounds with relative error up to 2^-9, and together they
# stay under one percent; a dropped row, a wrong expert or a mis-ordered exchange gives an error of order one.
CHECK_TOLERANCE = 3e-2


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """||got - want|| / ||want|| in fp64; infinity when got holds a NaN or an infinity."""
    got64 = got.detach().to(torch.float64)
    want64 = want.detach().to(torch.float64)
    if not torch.isfinite(got64).all():
        return float("inf")
    norm = want64.norm().item()
    diff = (got64 - want64).norm().item()
    return diff / norm if norm > 0 else diff


# The dense GEMM ceiling every roofline fraction of a baseline divides by, measured in the same run.
CEILING_SIZE = 8192
CEILING_NAME = f"torch_matmul_bf16_{CEILING_SIZE}"
_CEILING_SIZE_ON_CPU = 256


# Rows of the ceiling's product checked against fp32 before timing: a cheap guard against a broken setup.
_CEILING_CHECKED_ROWS = 64


def measure_matmul_ceiling(
    ctx: DistContext, timer: Timer, warmup: int, reps: int, seed: int
) -> tuple[results.Case, float]:
    """torch.matmul bf16 n^3 on random data; returns the case and its TFLOP/s (max over ranks per repetition)."""
    n = CEILING_SIZE if ctx.device.type == "cuda" else _CEILING_SIZE_ON_CPU
    gen = torch.Generator(device=ctx.device).manual_seed(seed)
    a = torch.randn(n, n, generator=gen, device=ctx.device).to(torch.bfloat16)
    b = torch.randn(n, n, generator=gen, device=ctx.device).to(torch.bfloat16)
    got = torch.matmul(a[:_CEILING_CHECKED_ROWS], b)
    want = torch.matmul(a[:_CEILING_CHECKED_ROWS].float(), b.float())
    error = relative_error(got, want)
    case = results.Case(name=f"ceiling/{CEILING_NAME}", params={"m": n, "n": n, "k": n, "check_error": error})
    if any_rank(ctx, error > CHECK_TOLERANCE):
        case.status = results.STATUS_FAILED
        case.note = f"result check failed: relative error {error:.3e} > {CHECK_TOLERANCE}"
        return case, 0.0
    out = torch.empty(n, n, dtype=torch.bfloat16, device=ctx.device)
    stats = timer.time(lambda _: torch.matmul(a, b, out=out), warmup, reps)
    tflops = 2.0 * n * n * n / TERA
    case.figures = [results.time_figure("time", stats), results.rate_figure("tflops", "TFLOP/s", tflops, stats)]
    return case, case.figures[1].value


def device_description(ctx: DistContext) -> tuple[str, int]:
    """(device name, SM count); the CPU reports itself as such."""
    if ctx.device.type != "cuda":
        return "cpu", 0
    props = torch.cuda.get_device_properties(ctx.device)
    return props.name, props.multi_processor_count


def environment(ctx: DistContext) -> dict:
    env = {"torch": torch.__version__, "multicast_off": dict(MULTICAST_OFF)}
    if ctx.device.type == "cuda":
        env["cuda"] = torch.version.cuda
        if ctx.backend == "nccl":
            env["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    return env


def peak_memory_gib(ctx: DistContext) -> float:
    """This case's peak allocated memory, the maximum over ranks."""
    if ctx.device.type != "cuda":
        return 0.0
    return all_reduce_max(ctx, torch.cuda.max_memory_allocated(ctx.device) / GIB)


def reset_peak_memory(ctx: DistContext) -> None:
    if ctx.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(ctx.device)
