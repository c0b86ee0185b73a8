#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's source page: the stall samples per SASS instruction that

    ncu --import REPORT.ncu-rep --page source --print-source sass --csv > source.csv

prints (the report taken with the WarpStateStats and SourceCounters sections, the build with -lineinfo). Prints the
samples' total, their stall reasons, and the instructions with the most samples. A barrier wait is a loop of an
mbarrier try-wait (SYNCS.PHASECHK...TRYWAIT) and a branch back to it, and its samples fall on the branch: for each
such branch the try-wait before it is printed too, whose shared-memory operand names the barrier (the kernel's
shared storage says which barrier sits at that offset).

    tools/ncu_stalls.py source.csv [--top 20] [--roles]

--roles also splits the samples by warp role, for the warp-specialised GEMM kernels: their code divides at each
`setmaxnreg` (SASS `SETMAXREG`), where a warpgroup takes its role's register budget, so each stretch between two of
them runs one role. A stretch that issues wgmma (`HGMMA`) is the consumers'; the others belong to the producer
warpgroup, whose load thread and epilogue warps share one budget and so one stretch (the code before the first
`setmaxnreg` runs before the roles split).
"""
import argparse
import csv
import sys
from collections import Counter

SAMPLES = "Warp Stall Sampling (All Samples)"
STALL_PREFIX = "stall_"
NOT_ISSUED = "(Not Issued)"
TRY_WAIT = "TRYWAIT"
# How far back from a branch the try-wait it closes may sit (a YIELD or an address computation may come between).
TRY_WAIT_LOOKBACK = 4


def number(text):
    text = text.replace(",", "").strip()
    return int(float(text)) if text else 0


def read_source_page(path):
    """The page's instructions, in address order: (address, source, samples, {stall reason: samples})."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header_at = next((i for i, row in enumerate(rows) if SAMPLES in row), None)
    if header_at is None:
        raise ValueError(f"{path}: no '{SAMPLES}' column (a source page exported with --csv?)")
    header = rows[header_at]
    column = {name: i for i, name in enumerate(header)}
    reasons = [name for name in header if name.startswith(STALL_PREFIX) and NOT_ISSUED not in name]
    instructions = []
    for row in rows[header_at + 1 :]:
        if len(row) < len(header):
            continue
        stalls = {name[len(STALL_PREFIX) :]: number(row[column[name]]) for name in reasons}
        instructions.append((row[column["Address"]], row[column["Source"]].strip(), number(row[column[SAMPLES]]), stalls))
    return instructions


def closing_try_wait(instructions, index):
    """The try-wait that the branch at `index` loops back to, or None."""
    for back in range(1, TRY_WAIT_LOOKBACK + 1):
        if index - back < 0:
            break
        source = instructions[index - back][1]
        if TRY_WAIT in source:
            return source
    return None


def summarise(instructions, top):
    total = sum(samples for _, _, samples, _ in instructions)
    lines = [f"{total} samples over {len(instructions)} instructions"]
    if total == 0:
        return lines
    reasons = Counter()
    for _, _, _, stalls in instructions:
        reasons.update(stalls)
    lines.append("stall reasons: " + ", ".join(f"{name} {count / total:.1%}" for name, count in reasons.most_common(8)))
    lines.append("instructions with the most samples:")
    order = sorted(range(len(instructions)), key=lambda i: -instructions[i][2])
    for i in order[:top]:
        address, source, samples, stalls = instructions[i]
        main = ", ".join(f"{name} {count}" for name, count in Counter(stalls).most_common(2) if count)
        lines.append(f"  {samples / total:6.1%}  {address[-6:]:>6}  {source[:72]:<72}  {main}")
        if "BRA" in source.split():
            wait = closing_try_wait(instructions, i)
            if wait is not None:
                lines.append(f"{'':18}loops on: {wait}")
    return lines


REGISTER_SPLIT = "SETMAXREG"
WGMMA = "HGMMA"


def role_stretches(instructions):
    """The instructions split at each SETMAXREG: a list of (role, instructions), in address order."""
    stretches = [[]]
    for instruction in instructions:
        if REGISTER_SPLIT in instruction[1] and stretches[-1]:
            stretches.append([])
        stretches[-1].append(instruction)
    named = []
    for index, stretch in enumerate(stretches):
        if index == 0 and not any(REGISTER_SPLIT in i[1] for i in stretch):
            role = "before the split"
        elif any(WGMMA in i[1] for i in stretch):
            role = "consumers"
        else:
            role = "producer warpgroup"
        named.append((role, stretch))
    return named


def summarise_roles(instructions):
    """One line per role: its share of the samples and its stall reasons."""
    total = sum(samples for _, _, samples, _ in instructions)
    samples_of = Counter()
    reasons_of = {}
    for role, stretch in role_stretches(instructions):
        reasons = reasons_of.setdefault(role, Counter())
        for _, _, samples, stalls in stretch:
            samples_of[role] += samples
            reasons.update(stalls)
    lines = []
    for role, reasons in reasons_of.items():
        samples = samples_of[role]
        if samples == 0:
            continue
        top = ", ".join(f"{name} {count / samples:.0%}" for name, count in reasons.most_common(7) if count)
        lines.append(f"{role}: {samples} samples ({samples / total:.0%}); {top}")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", help="ncu --page source --print-source sass --csv output")
    parser.add_argument("--top", type=int, default=20, help="instructions to list")
    parser.add_argument("--roles", action="store_true", help="also split the samples by warp role")
    args = parser.parse_args()
    instructions = read_source_page(args.csv)
    print("\n".join(summarise(instructions, args.top)))
    if args.roles:
        print("\n".join(summarise_roles(instructions)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
