"""Tables and plots of benchmark results (docs/benchmarking.md).

Reads result JSON files (bench/results/*.json by default; files or folders may be named), keeps one run (the
latest, or --run-id; --run-id more than once joins runs of one commit on one machine, such as a sweep whose
baseline was split across calls), and writes:
  - a markdown report: every figure with its spread, baseline and ratio; every mok case next to the baseline
    cases of the same run ('<baseline>/<case>'), with the speedup; where a case reports its memory floor (the
    layer), both floors of its roofline and what fraction of the larger one mok and the baseline reach; skipped
    and failed cases with their reasons;
  - PNG plots, when matplotlib is installed: the speedup over each baseline per case, and the fraction of the
    roofline per case. Only what the JSON holds is drawn.
--summary prints a short table instead (what tools/gpu_runner.sh shows last).

The table part needs only the standard library; plots need matplotlib.

    python3 bench/report.py                                  # latest run in bench/results -> ./bench-report
    python3 bench/report.py --summary results/ --run-id X
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

BASELINE_PREFIX = "baselines-"
# The figures a case is read by (the short summary shows one per case) and the ones compared across files:
# rates and fractions derived from a time would only repeat its ratio.
HEADLINE_FIGURES = ("time", "bandwidth", "bandwidth_each_way")


@dataclass
class Loaded:
    path: Path
    data: dict[str, Any]

    @property
    def benchmark(self) -> str:
        return str(self.data.get("benchmark", "?"))

    @property
    def cases(self) -> list[dict[str, Any]]:
        return list(self.data.get("cases", []))


@dataclass
class Comparison:
    case: str
    figure: str
    unit: str
    value: float
    baseline: str
    baseline_value: float
    speedup: float


def find_files(paths: Iterable[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(path.glob("*.json")))
        elif path.suffix == ".json":
            found.append(path)
    return found


def load(paths: Iterable[Path]) -> list[Loaded]:
    loaded = []
    for path in paths:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            print(f"report: skipping {path}: {error}", file=sys.stderr)
            continue
        if isinstance(data, dict) and "cases" in data and "run_id" in data:
            loaded.append(Loaded(path, data))
    return loaded


def select_run(loaded: list[Loaded], run_ids: Optional[list[str]]) -> list[Loaded]:
    """The files of the runs asked for, or of the run whose newest file is newest. Runs joined must share the
    commit and the device: their ratios are then as good as those of one run."""
    if not loaded:
        return []
    if not run_ids:
        run_ids = [max(loaded, key=lambda item: str(item.data.get("date", ""))).data["run_id"]]
    run = [item for item in loaded if item.data.get("run_id") in run_ids]
    machines = {(item.data.get("commit"), item.data.get("device"), item.data.get("num_gpus")) for item in run}
    if len(machines) > 1:
        raise SystemExit(f"report: the runs {run_ids} differ in commit, device or GPU count: {sorted(machines)}")
    return run


def number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def better_ratio(figure: dict[str, Any], value: float, baseline_value: float) -> Optional[float]:
    if not value or not baseline_value:
        return None
    return baseline_value / value if figure.get("better") == "lower" else value / baseline_value


def baseline_cases_by_name(run: list[Loaded]) -> dict[str, list[dict[str, Any]]]:
    """The run's baseline cases that ran, keyed by the mok case they name ('<baseline>/<case>'), each with its
    baseline's name under 'baseline'."""
    cases: dict[str, list[dict[str, Any]]] = {}
    for item in run:
        if item.benchmark.startswith(BASELINE_PREFIX):
            for case in item.cases:
                baseline, _, rest = str(case.get("name", "")).partition("/")
                if rest and case.get("status") == "ok":
                    cases.setdefault(rest, []).append(dict(case, baseline=baseline))
    return cases


def mok_cases_paired(run: list[Loaded]) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Each mok case that ran, with the same run's baseline cases that name it (baseline_cases_by_name)."""
    baseline_cases = baseline_cases_by_name(run)
    for item in run:
        if item.benchmark.startswith(BASELINE_PREFIX):
            continue
        for case in item.cases:
            if case.get("status") == "ok":
                yield case, baseline_cases.get(case["name"], [])


def comparisons(run: list[Loaded]) -> list[Comparison]:
    """Each mok case against the baseline cases named '<baseline>/<case>' in the same run, figure by figure."""
    found = []
    for case, baselines in mok_cases_paired(run):
        for other in baselines:
            theirs = {f["name"]: f for f in other.get("figures", [])}
            for figure in case.get("figures", []):
                if figure["name"] not in HEADLINE_FIGURES:
                    continue
                match = theirs.get(figure["name"])
                if match is None or match.get("unit") != figure.get("unit"):
                    continue
                speedup = better_ratio(figure, figure.get("value"), match.get("value"))
                if speedup is not None:
                    found.append(
                        Comparison(
                            case["name"],
                            figure["name"],
                            figure.get("unit", ""),
                            figure["value"],
                            other["baseline"],
                            match["value"],
                            speedup,
                        )
                    )
    return found


@dataclass
class Floors:
    """A mok case with both floors of its roofline against the same-run baseline's time."""

    case: str
    time: float
    baseline: str
    baseline_time: float
    memory_floor: float  # ms: the bytes any implementation moves at the one-way DRAM ceilings
    compute_floor: float  # ms: the case's FLOPs at the same-run dense GEMM rate

    @property
    def bound(self) -> float:
        return max(self.memory_floor, self.compute_floor)


def floors(run: list[Loaded]) -> list[Floors]:
    """Each mok case that reports a memory floor and a compute roofline fraction (mok-bench-layer), with every
    baseline case of the same run that names it."""
    found = []
    for case, baselines in mok_cases_paired(run):
        by_name = {f["name"]: f.get("value") for f in case.get("figures", [])}
        time, memory, roofline = by_name.get("time"), by_name.get("memory_floor"), by_name.get("roofline_fraction")
        if not time or memory is None or roofline is None:
            continue
        for other in baselines:
            baseline_time = {f["name"]: f.get("value") for f in other.get("figures", [])}.get("time")
            if baseline_time:
                found.append(Floors(case["name"], time, other["baseline"], baseline_time, memory, roofline * time))
    return found


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


def figure_rows(item: Loaded) -> list[list[str]]:
    rows = []
    for case in item.cases:
        if case.get("status") != "ok":
            continue
        for figure in case.get("figures", []):
            spread = figure.get("spread") or {}
            baseline = figure.get("baseline") or figure.get("ceiling") or {}
            rows.append(
                [
                    case["name"],
                    figure["name"],
                    number(figure.get("value")),
                    f"{number(spread.get('min'))} .. {number(spread.get('max'))}" if spread else "-",
                    figure.get("unit", ""),
                    f"{baseline.get('name')} {number(baseline.get('value'))}" if baseline else "-",
                    number(figure.get("ratio")) if "ratio" in figure else "-",
                ]
            )
    return rows


def markdown(run: list[Loaded]) -> str:
    first = run[0].data
    run_ids = sorted({str(item.data.get("run_id")) for item in run})
    lines = [
        "# mok benchmark report",
        "",
        f"Run{'s' if len(run_ids) > 1 else ''} {', '.join(f'`{r}`' for r in run_ids)} on "
        f"{first.get('num_gpus')} x {first.get('device')}, commit `{first.get('commit')}`.",
        "",
    ]
    found = comparisons(run)
    if found:
        lines += ["## mok against the baselines of the same run", ""]
        rows = [
            [
                c.case,
                c.figure,
                f"{number(c.value)} {c.unit}",
                c.baseline,
                f"{number(c.baseline_value)} {c.unit}",
                f"x{c.speedup:.3g}",
            ]
            for c in found
        ]
        lines += markdown_table(["case", "figure", "mok", "baseline", "baseline value", "speedup"], rows) + [""]
    bounds = floors(run)
    if bounds:
        lines += [
            "## Floors: the roofline of each pass",
            "",
            "The larger of the memory floor (`memory_floor`) and the compute floor (the FLOPs at the same-run GEMM "
            "ceiling) bounds any implementation; each time's fraction of it:",
            "",
        ]
        rows = [
            [
                f.case,
                f"{number(f.time)} ms",
                f"{f.baseline} {number(f.baseline_time)} ms",
                f"{number(f.memory_floor)} ms",
                f"{number(f.compute_floor)} ms",
                number(f.bound / f.time),
                number(f.bound / f.baseline_time),
            ]
            for f in bounds
        ]
        header = ["case", "mok", "baseline", "memory floor", "compute floor", "mok of the bound",
                  "baseline of the bound"]
        lines += markdown_table(header, rows) + [""]
    for item in sorted(run, key=lambda i: i.benchmark):
        lines += [f"## {item.benchmark}", "", f"`{item.path.name}`, {item.data.get('date')}", ""]
        rows = figure_rows(item)
        if rows:
            header = ["case", "figure", "value", "spread (min .. max)", "unit", "baseline / ceiling", "ratio"]
            lines += markdown_table(header, rows) + [""]
        notes = [[c["name"], c.get("status", "?"), c.get("note", "")] for c in item.cases if c.get("status") != "ok"]
        if notes:
            lines += markdown_table(["case", "status", "why"], notes) + [""]
    return "\n".join(lines) + "\n"


def headline(case: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The figure a case is read by: its first time or bandwidth figure, else its first figure."""
    figures = case.get("figures", [])
    for figure in figures:
        if figure["name"] in HEADLINE_FIGURES:
            return figure
    return figures[0] if figures else None


def summary(run: list[Loaded]) -> str:
    """One line per case: its headline figure, its roofline fractions (compute; memory where the case has its
    floor), its ratio to a same-run baseline."""
    rows = []
    for item in sorted(run, key=lambda i: i.benchmark):
        for case in item.cases:
            if case.get("status") != "ok":
                rows.append([case["name"], case.get("status", "?"), case.get("note", "")[:100], ""])
                continue
            figure = headline(case)
            if figure is None:
                rows.append([case["name"], "ok", "", ""])
                continue
            by_name = {f["name"]: f for f in case.get("figures", [])}
            roofline = by_name.get("roofline_fraction")
            memory_floor = by_name.get("memory_floor_fraction")
            baseline = figure.get("baseline")
            rows.append(
                [
                    case["name"],
                    f"{figure['name']} {number(figure.get('value'))} {figure.get('unit', '')}",
                    " ".join(
                        filter(
                            None,
                            (
                                f"roofline {number(roofline.get('value'))}" if roofline else "",
                                f"memory floor {number(memory_floor.get('value'))}" if memory_floor else "",
                            ),
                        )
                    ),
                    (
                        f"x{number(figure.get('ratio'))} vs {baseline['name']} {number(baseline.get('value'))}"
                        if baseline
                        else ""
                    ),
                ]
            )
    for c in comparisons(run):
        rows.append(
            [
                c.case,
                f"{c.figure} {number(c.value)} {c.unit}",
                "",
                f"x{c.speedup:.3g} vs {c.baseline} {number(c.baseline_value)}",
            ]
        )
    if not rows:
        return "no results\n"
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() + "\n" for row in rows)


def plot(run: list[Loaded], out_dir: Path) -> list[Path]:
    """Speedup and roofline-fraction bar charts; nothing when matplotlib is missing or there is nothing to draw."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report: matplotlib is not installed; no plots", file=sys.stderr)
        return []
    written = []
    speedups = [(f"{c.case} ({c.figure})", c.baseline, c.speedup) for c in comparisons(run)]
    for item in run:
        for case in item.cases:
            for figure in case.get("figures", []) if case.get("status") == "ok" else []:
                if figure.get("ratio") is not None and "baseline" in figure:
                    speedups.append((f"{case['name']} ({figure['name']})", figure["baseline"]["name"], figure["ratio"]))
    fractions = [
        (case["name"], figure["value"])
        for item in run
        for case in item.cases
        if case.get("status") == "ok"
        for figure in case.get("figures", [])
        if figure["name"] == "roofline_fraction" and figure.get("value") is not None
    ]
    charts = [
        (
            "speedup.png",
            "speedup over the baseline (x, > 1 is faster)",
            [(f"{label} vs {b}", v) for label, b, v in speedups],
            1.0,
        ),
        ("roofline.png", "fraction of the same-run GEMM ceiling", fractions, None),
    ]
    for name, title, bars, reference_line in charts:
        if not bars:
            continue
        height = max(2.5, 0.28 * len(bars) + 1.0)
        fig, ax = plt.subplots(figsize=(12, height))
        labels = [label for label, _ in bars]
        drawn = ax.barh(range(len(bars)), [value for _, value in bars])
        ax.bar_label(drawn, fmt="%.3g", fontsize=7, padding=2)
        ax.set_yticks(range(len(bars)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_title(title)
        if reference_line is not None:
            ax.axvline(reference_line, color="black", linewidth=0.8)
        fig.tight_layout()
        path = out_dir / name
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    default_results = Path(__file__).resolve().parent / "results"
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=Path, default=[default_results], help="JSON files or folders")
    parser.add_argument("--run-id", action="append",
                        help="the run to report (default: the latest); repeat to join runs of one commit and machine")
    parser.add_argument("--out", type=Path, default=Path("bench-report"), help="folder for report.md and the plots")
    parser.add_argument("--summary", action="store_true", help="print a short table and write nothing")
    parser.add_argument("--no-plots", action="store_true", help="tables only")
    args = parser.parse_args(argv)

    run = select_run(load(find_files(args.paths)), args.run_id)
    if not run:
        print("report: no results found", file=sys.stderr)
        return 1
    if args.summary:
        print(summary(run), end="")
        return 0
    out_dir = args.out
    out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / "report.md"
    report.write_text(markdown(run))
    print(f"wrote {report}")
    if not args.no_plots:
        for path in plot(run, out_dir):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
