#!/usr/bin/env python3
"""Per-case comparison of benchmark results across commits (A/B runs).

Reads result JSON files (files or folders), groups them by benchmark and commit, and prints for every case that
more than one commit measured: each commit's median time over its runs (with the min..max over runs when there
were several), and the speedup of each commit over the baseline commit (the first one named with --baseline, or
the commit of the first file read). Run A and B alternately (tools/ab.sh does) so that a drift of the
machine over the call shows as spread instead of as a difference.

    python3 bench/compare.py results-a/ results-b/ --baseline 765e07fb4b16
    python3 bench/compare.py bench/results/gemm-*765e07fb4b16.json bench/results/gemm-*95f8c7819e0f.json

A time figure that carries its repetitions' times (`samples`) is also checked for drift: where the median of its
last third differs from that of its first third by more than DRIFT_THRESHOLD, the figure was taken before the GPU's
clock settled (docs/benchmarking.md, "Warm-up to the steady clock"), and such figures are listed after the tables.

Commits of one benchmark whose runs warmed up differently (`config.warmup` and `config.warmup_ms`) are listed too:
a GPU warmed up for less time runs the power-limited GEMMs at a higher clock, so their speedup is partly the
warm-up's.

Only the standard library is needed.
"""
import argparse
import json
import statistics
import sys
from pathlib import Path


def result_files(paths):
    for p in map(Path, paths):
        if p.is_dir():
            yield from sorted(p.rglob("*.json"))
        elif p.suffix == ".json":
            yield p


# Relative change between the first and the last third of a figure's repetitions above which it is listed as
# drifting: the run-to-run spread of settled layer figures is about 1%.
DRIFT_THRESHOLD = 0.03


def drift(samples):
    """median(last third) / median(first third) - 1 of the repetitions in the order they ran; None below six."""
    if len(samples) < 6:
        return None
    third = len(samples) // 3
    return statistics.median(samples[-third:]) / statistics.median(samples[:third]) - 1.0


def warmup_of(doc):
    """The run's warm-up as its config states it: (runs, ms); ms is None for runs from before the warm-up by time."""
    config = doc.get("config") or {}
    return (config.get("warmup"), config.get("warmup_ms"))


def load(paths, drifting=None, warmups=None):
    """{(benchmark, commit): {case: [time per run]}}, and the commits in the order first seen. With `drifting`, a
    list, appends (file name, case, drift) for every time figure whose samples drift beyond DRIFT_THRESHOLD. With
    `warmups`, a dict, adds each run's warm-up to the set at (benchmark, commit)."""
    times = {}
    commits = []
    for path in result_files(paths):
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            print(f"compare: skipping {path}: {error}", file=sys.stderr)
            continue
        if not isinstance(doc, dict) or "cases" not in doc:
            continue
        commit = str(doc.get("commit", "unknown"))
        if commit not in commits:
            commits.append(commit)
        cases = times.setdefault((doc.get("benchmark", "?"), commit), {})
        if warmups is not None:
            warmups.setdefault((doc.get("benchmark", "?"), commit), set()).add(warmup_of(doc))
        for case in doc["cases"]:
            for figure in case.get("figures", []):
                if figure.get("name") == "time" and isinstance(figure.get("value"), (int, float)):
                    cases.setdefault(case["name"], []).append(float(figure["value"]))
                    if drifting is None:
                        continue
                    samples = [float(v) for v in figure.get("samples") or [] if isinstance(v, (int, float))]
                    change = drift(samples)
                    if change is not None and abs(change) > DRIFT_THRESHOLD:
                        drifting.append((path.name, case["name"], change))
    return times, commits


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", help="result JSON files or folders")
    parser.add_argument("--baseline", help="commit (or a prefix of it) the others are compared against")
    args = parser.parse_args()

    drifting = []
    warmups = {}
    times, commits = load(args.paths, drifting, warmups)
    if len(commits) < 2:
        print("compare: results of at least two commits are needed", file=sys.stderr)
        return 2
    baseline = commits[0]
    if args.baseline:
        matches = [c for c in commits if c.startswith(args.baseline)]
        if len(matches) != 1:
            print(f"compare: --baseline {args.baseline} names {len(matches)} of the commits {commits}",
                  file=sys.stderr)
            return 2
        baseline = matches[0]
    others = [c for c in commits if c != baseline]

    for benchmark in sorted({b for b, _ in times}):
        base_cases = times.get((benchmark, baseline), {})
        rows = []
        for case, base_runs in base_cases.items():
            cells = [describe(base_runs)]
            for commit in others:
                runs = times.get((benchmark, commit), {}).get(case)
                if runs:
                    speedup = statistics.median(base_runs) / statistics.median(runs)
                    cells.append(f"{describe(runs)} {speedup:6.3f}x")
                else:
                    cells.append("-")
            rows.append((case, cells))
        if not rows:
            continue
        print(f"\n{benchmark}: time in ms, median over runs (min..max); speedup over {baseline[:12]}")
        header = ["case", baseline[:12]] + [c[:12] for c in others]
        width = max(len(case) for case, _ in rows)
        print(f"{header[0]:<{width}}  " + "  ".join(f"{h:>32}" for h in header[1:]))
        for case, cells in rows:
            print(f"{case:<{width}}  " + "  ".join(f"{cell:>32}" for cell in cells))
    for benchmark in sorted({b for b, _ in warmups}):
        seen = {commit: runs for (b, commit), runs in warmups.items() if b == benchmark}
        if len({w for runs in seen.values() for w in runs}) > 1:
            print(f"\n{benchmark}: the runs warmed up differently (warm-up runs, ms; docs/benchmarking.md):")
            for commit in commits:
                if commit in seen:
                    print(f"  {commit[:12]}  " + ", ".join(f"{r}, {m}" for r, m in sorted(seen[commit], key=str)))
    if drifting:
        print(f"\nrepetitions drifting by more than {DRIFT_THRESHOLD:.0%} from the first third to the last "
              "(the clock had not settled; docs/benchmarking.md):")
        for name, case, change in drifting:
            print(f"  {name}  {case}  {change:+.1%}")
    return 0


def describe(runs):
    median = statistics.median(runs)
    if len(runs) == 1:
        return f"{median:.4f}"
    return f"{median:.4f} ({min(runs):.4f}..{max(runs):.4f})"


if __name__ == "__main__":
    sys.exit(main())
