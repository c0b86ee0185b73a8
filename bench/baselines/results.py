"""Benchmark results in mok's JSON schema, written from Python.

This module mirrors the C++ writer in bench/common/result.hpp field for field, so a baseline's JSON and a mok
benchmark's JSON read alike (docs/benchmarking.md describes the schema). It needs only the standard library.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

SCHEMA_VERSION = 1

LOWER = "lower"
HIGHER = "higher"

STATUS_OK = "ok"
STATUS_SKIPPED = "skipped"
STATUS_FAILED = "failed"

_MS_PER_S = 1e3


@dataclass
class Spread:
    """Spread of a figure over the repetitions, in the figure's unit."""

    min: float
    p25: float
    p75: float
    max: float


@dataclass
class Reference:
    """A same-run baseline (for a speedup) or a same-run ceiling (for a fraction of the roofline)."""

    name: str
    value: float
    unit: str = ""


@dataclass
class WarmUp:
    """The untimed runs before a time figure's repetitions, and their device time."""

    runs: int
    ms: float


@dataclass
class Figure:
    name: str
    unit: str
    better: str
    value: float
    spread: Optional[Spread] = None
    reps: int = 0
    samples: Optional[list[float]] = None  # timed figures: each repetition's value, in the order they ran
    warmup: Optional["WarmUp"] = None  # time figures: the untimed runs before the repetitions
    baseline: Optional[Reference] = None
    ceiling: Optional[Reference] = None

    def ratio(self) -> Optional[float]:
        """Times better than the baseline: > 1 always means this figure beats it."""
        if self.baseline is None or self.baseline.value == 0 or self.value == 0:
            return None
        if self.better == LOWER:
            return self.baseline.value / self.value
        return self.value / self.baseline.value

    def against(self, name: str, value: float) -> "Figure":
        self.baseline = Reference(name, value, self.unit)
        return self


@dataclass
class TimingStats:
    samples_ms: list[float]
    median_ms: float = 0.0
    min_ms: float = 0.0
    max_ms: float = 0.0
    p25_ms: float = 0.0
    p75_ms: float = 0.0
    warmup_runs: int = 0  # untimed runs before the repetitions
    warmup_ms: float = 0.0  # their device time (the slowest rank's); 0 when not measured

    @property
    def reps(self) -> int:
        return len(self.samples_ms)


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default; the C++ side does the same)."""
    position = q * (len(sorted_values) - 1)
    below = int(position)
    above = min(below + 1, len(sorted_values) - 1)
    weight = position - below
    return sorted_values[below] + weight * (sorted_values[above] - sorted_values[below])


def summarize(samples_ms: Sequence[float]) -> TimingStats:
    stats = TimingStats(samples_ms=list(samples_ms))
    if not samples_ms:
        return stats
    ordered = sorted(samples_ms)
    stats.min_ms = ordered[0]
    stats.max_ms = ordered[-1]
    stats.median_ms = quantile(ordered, 0.5)
    stats.p25_ms = quantile(ordered, 0.25)
    stats.p75_ms = quantile(ordered, 0.75)
    return stats


# The C++ twin: bench/common/stats.hpp, more_warmup_runs and kMaxWarmupRunsPerRound.
MAX_WARMUP_RUNS_PER_ROUND = 100000


def more_warmup_runs(elapsed_ms: float, runs_so_far: int, min_warmup_ms: float) -> int:
    """How many more warm-up runs at the mean length so far bring the warm-up to min_warmup_ms of device time."""
    if elapsed_ms >= min_warmup_ms:
        return 0
    if runs_so_far <= 0:
        return 1
    if elapsed_ms <= 0:
        return MAX_WARMUP_RUNS_PER_ROUND
    needed = math.ceil((min_warmup_ms - elapsed_ms) / (elapsed_ms / runs_so_far))
    return int(min(max(needed, 1), MAX_WARMUP_RUNS_PER_ROUND))


def max_over_ranks(per_rank_samples_ms: Sequence[Sequence[float]]) -> list[float]:
    """Per repetition, the slowest rank: a multi-GPU step is as slow as its slowest rank."""
    if not per_rank_samples_ms:
        return []
    lengths = {len(samples) for samples in per_rank_samples_ms}
    if len(lengths) != 1:
        raise ValueError("max_over_ranks: every rank must hold the same number of samples")
    return [max(values) for values in zip(*per_rank_samples_ms)]


def time_figure(name: str, stats: TimingStats) -> Figure:
    return Figure(
        name=name,
        unit="ms",
        better=LOWER,
        value=stats.median_ms,
        spread=Spread(stats.min_ms, stats.p25_ms, stats.p75_ms, stats.max_ms),
        reps=stats.reps,
        samples=list(stats.samples_ms),
        warmup=WarmUp(stats.warmup_runs, stats.warmup_ms),
    )


def rate_figure(name: str, unit: str, amount_per_run: float, stats: TimingStats) -> Figure:
    """amount_per_run / time, e.g. GB/s from GB or TFLOP/s from TFLOP; the slowest run is the spread's low end."""

    def rate(ms: float) -> float:
        return amount_per_run * _MS_PER_S / ms if ms > 0 else 0.0

    return Figure(
        name=name,
        unit=unit,
        better=HIGHER,
        value=rate(stats.median_ms),
        spread=Spread(rate(stats.max_ms), rate(stats.p75_ms), rate(stats.p25_ms), rate(stats.min_ms)),
        reps=stats.reps,
    )


def value_figure(name: str, unit: str, better: str, value: float) -> Figure:
    return Figure(name=name, unit=unit, better=better, value=value)


def fraction_figure(name: str, rate: Figure, ceiling_name: str, ceiling_value: float) -> Figure:
    def scale(value: float) -> float:
        return value / ceiling_value if ceiling_value > 0 else 0.0

    spread = None
    if rate.spread is not None:
        spread = Spread(scale(rate.spread.min), scale(rate.spread.p25), scale(rate.spread.p75), scale(rate.spread.max))
    return Figure(
        name=name,
        unit="fraction",
        better=HIGHER,
        value=scale(rate.value),
        spread=spread,
        reps=rate.reps,
        ceiling=Reference(ceiling_name, ceiling_value, rate.unit),
    )


@dataclass
class Case:
    """One configuration. Baseline case names are '<baseline>/<mok case name>' (docs/benchmarking.md)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    status: str = STATUS_OK
    note: str = ""


@dataclass
class RunInfo:
    benchmark: str
    device: str
    num_gpus: int
    sm_count: int
    commit: str
    date: str
    run_id: str


def current_commit() -> str:
    """MOK_COMMIT from the environment (the runner sets it), else git's HEAD of this tree, else 'unknown'."""
    from_env = os.environ.get("MOK_COMMIT")
    if from_env:
        return from_env
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            check=True,
        )
        return head.stdout.strip() or "unknown"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _compact_date(iso_date: str) -> str:
    return iso_date.replace("-", "").replace(":", "")


def run_id_for(date: str, commit: str) -> str:
    return os.environ.get("MOK_BENCH_RUN_ID") or f"{_compact_date(date)}-{commit}"


def make_run_info(benchmark: str, device: str, num_gpus: int, sm_count: int) -> RunInfo:
    date = utc_now()
    commit = current_commit()
    return RunInfo(benchmark, device, num_gpus, sm_count, commit, date, run_id_for(date, commit))


def device_slug(device_name: str) -> str:
    """'NVIDIA H200' -> 'h200'."""
    lower = device_name.lower()
    if lower.startswith("nvidia"):
        lower = lower[len("nvidia") :]
    slug = re.sub(r"[^a-z0-9]+", "-", lower).strip("-")
    return slug or "unknown"


def _file_name_part(text: str) -> str:
    part = re.sub(r"[^A-Za-z0-9._-]", "_", text)
    return part or "unknown"


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _reference_json(reference: Reference) -> dict[str, Any]:
    out: dict[str, Any] = {"name": reference.name, "value": _finite_or_none(float(reference.value))}
    if reference.unit:
        out["unit"] = reference.unit
    return out


def _figure_json(figure: Figure) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": figure.name,
        "unit": figure.unit,
        "better": figure.better,
        "value": _finite_or_none(float(figure.value)),
        "reps": figure.reps,
    }
    if figure.spread is not None:
        s = figure.spread
        ends = (("min", s.min), ("p25", s.p25), ("p75", s.p75), ("max", s.max))
        out["spread"] = {key: _finite_or_none(float(v)) for key, v in ends}
    if figure.samples:
        out["samples"] = [_finite_or_none(float(v)) for v in figure.samples]
    if figure.warmup is not None:
        out["warmup"] = {"runs": figure.warmup.runs, "ms": _finite_or_none(float(figure.warmup.ms))}
    if figure.baseline is not None:
        out["baseline"] = _reference_json(figure.baseline)
        out["ratio"] = figure.ratio()
    if figure.ceiling is not None:
        out["ceiling"] = _reference_json(figure.ceiling)
    return out


def _sanitize(value: Any) -> Any:
    """Params may hold floats that are not finite: JSON has no spelling for them."""
    if isinstance(value, dict):
        return {str(k): _sanitize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sanitize(v) for v in value]
    return _finite_or_none(value)


def _case_json(case: Case) -> dict[str, Any]:
    out: dict[str, Any] = {"name": case.name, "status": case.status}
    if case.note:
        out["note"] = case.note
    out["params"] = _sanitize(case.params)
    out["figures"] = [_figure_json(f) for f in case.figures]
    return out


@dataclass
class Result:
    run: RunInfo
    config: dict[str, Any] = field(default_factory=dict)
    cases: list[Case] = field(default_factory=list)
    # The file write_result claimed for this result on its first write; later writes replace it.
    path: Optional[Path] = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "benchmark": self.run.benchmark,
            "run_id": self.run.run_id,
            "device": self.run.device,
            "num_gpus": self.run.num_gpus,
            "sm_count": self.run.sm_count,
            "commit": self.run.commit,
            "date": self.run.date,
            "config": _sanitize(self.config),
            "cases": [_case_json(c) for c in self.cases],
        }


def result_file_name(run: RunInfo) -> str:
    return (
        f"{_file_name_part(run.benchmark)}-{device_slug(run.device)}-{run.num_gpus}gpu-"
        f"{_file_name_part(_compact_date(run.date))}-{_file_name_part(run.commit)}.json"
    )


def default_out_dir() -> Path:
    """MOK_BENCH_OUT_DIR, else bench/results of this source tree."""
    from_env = os.environ.get("MOK_BENCH_OUT_DIR")
    return Path(from_env) if from_env else Path(__file__).resolve().parents[1] / "results"


def write_result(result: Result, out_dir: Path) -> Path:
    """Writes the result (atomically: a reader never sees half a file) and returns its path.

    A run never overwrites another's file: where result_file_name exists (two runs of one tree that start in the
    same second), the first free of <stem>-2.json, <stem>-3.json, ... is taken. The text goes to a partial file of
    this process's own, which the first write links under the final name (a link fails if the name exists). The
    baselines write their result again after every case, so that a run cut short keeps what it measured: those
    writes replace the file the first one claimed (result.path), by a rename, which is atomic too.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    name = result_file_name(result.run)
    text = json.dumps(result.to_json(), indent=2, allow_nan=False) + "\n"
    partial = out_dir / f".{name}.{os.getpid()}.partial"
    partial.write_text(text)
    if result.path is not None and result.path.parent == out_dir:
        os.replace(partial, result.path)
        return result.path
    try:
        for number in range(1, _MAX_FILE_VARIANTS + 1):
            path = out_dir / (name if number == 1 else f"{name[: -len('.json')]}-{number}.json")
            try:
                os.link(partial, path)
                result.path = path
                return path
            except FileExistsError:
                continue
        raise RuntimeError(f"cannot write {out_dir / name}: {_MAX_FILE_VARIANTS} files of that name exist")
    finally:
        partial.unlink()


# How many runs may share one result file name before writing gives up.
_MAX_FILE_VARIANTS = 1000


def _format_value(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.4g}"


def format_summary(result: Result) -> str:
    lines = []
    for case in result.cases:
        if case.status != STATUS_OK:
            lines.append(f"{case.name}  {case.status}: {case.note}")
            continue
        for figure in case.figures:
            line = f"{case.name}  {figure.name}  {_format_value(figure.value)} {figure.unit}"
            if figure.baseline is not None:
                baseline = figure.baseline
                line += f"  vs {baseline.name} {_format_value(baseline.value)}: x{_format_value(figure.ratio())}"
            lines.append(line)
    return "\n".join(lines) + ("\n" if lines else "")
