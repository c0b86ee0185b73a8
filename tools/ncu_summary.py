#!/usr/bin/env python3
"""One line per profiled kernel launch from an Nsight Compute CSV (ncu --csv): duration, DRAM bytes read, DRAM
and SM throughput, L2 hit rate. tools/gpu_runner.sh --ncu-layer writes the CSV and runs this on it.

    tools/ncu_summary.py ncu-layer.csv
    tools/ncu_summary.py --details ncu-gemm.csv     # then every metric of every launch, one per line
"""
import argparse
import csv
import sys
from collections import OrderedDict

# CSV columns of ncu's --csv output (one row per metric of each launch).
ID, KERNEL, GRID, METRIC, UNIT, VALUE = 0, 4, 8, 12, 13, 14
# Each figure with the metrics that give it, first found first: a section's name, or a raw metric of a --metrics list.
# A launch with none of them shows "-" there; a figure no launch has is left out.
FIGURES = [
    ("time", ("Duration", "gpu__time_duration.sum")),
    ("SM clock", ("sm__cycles_elapsed.avg.per_second",)),
    ("tensor %", ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",)),
    ("DRAM read", ("dram__bytes_read.sum",)),
    ("DRAM write", ("dram__bytes_write.sum",)),
    ("DRAM %", ("DRAM Throughput", "dram__throughput.avg.pct_of_peak_sustained_elapsed")),
    ("L2 %", ("lts__t_sectors.avg.pct_of_peak_sustained_elapsed",)),
    ("SM %", ("Compute (SM) Throughput",)),
    ("L2 hit %", ("L2 Hit Rate",)),
]


def number(text):
    return float(text.replace(",", ""))


def scaled(value, unit):
    if unit in ("nsecond", "ns"):
        return f"{value / 1e6:.3f} ms"
    if unit in ("usecond", "us"):
        return f"{value / 1e3:.3f} ms"
    if unit in ("msecond", "ms"):
        return f"{value:.3f} ms"
    if unit in ("hz", "Hz", "cycle/second"):
        return f"{value / 1e9:.2f} GHz"
    if unit in ("byte", "Kbyte", "Mbyte", "Gbyte"):
        factor = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}[unit]
        return f"{value * factor / 1e9:.2f} GB"
    return f"{value:.1f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", help="ncu --csv output")
    parser.add_argument("--details", action="store_true", help="also list every metric of every launch")
    args = parser.parse_args()
    launches = OrderedDict()
    with open(args.csv, newline="") as f:
        for row in csv.reader(f):
            if len(row) <= VALUE or not row[ID].isdigit():
                continue  # the profiler's own lines and the header
            key = (int(row[ID]), row[KERNEL], row[GRID])
            launches.setdefault(key, {})[row[METRIC]] = (row[VALUE], row[UNIT])
    if not launches:
        print("no profiled launches in", args.csv)
        return 1
    def figure_of(names, metrics):
        return next((metrics[name] for name in names if name in metrics), None)

    figures = [(label, names) for label, names in FIGURES if any(figure_of(names, m) for m in launches.values())]
    print("id  " + "  ".join(f"{label:>10}" for label, _ in figures) + "  grid        kernel")
    for (launch, kernel, grid), metrics in launches.items():
        cells = []
        for _, names in figures:
            found = figure_of(names, metrics)
            if found is not None:
                value, unit = found
                cells.append(f"{scaled(number(value), unit):>10}")
            else:
                cells.append(f"{'-':>10}")
        print(f"{launch:<3} " + "  ".join(cells) + f"  {grid:<11} {kernel}")
    if args.details:
        for (launch, kernel, _), metrics in launches.items():
            print(f"\n{launch} {kernel}")
            for metric, (value, unit) in metrics.items():
                print(f"    {metric:<60} {value} {unit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
