#!/usr/bin/env python3
"""Compiles one CUDA source of the build again with ptxas's report on, and fails if ptxas says it serialised
wgmma instructions, injected more than one wait for GMMA registers into a kernel, or spilled registers.

ptxas serialises a kernel's wgmma when it cannot keep them pipelined (an accumulator touched between a wgmma and
its wait, GMMA registers needed on a divergent path, ...). It says so only as "info" (C7510, C7515, C7518,
C7520: "wgmma.mma_async instructions are serialized"), which no build flag turns into an error, and the kernel
then runs at a fraction of its rate with every test passing. docs/gemm.md ("Register budget and what the
compiler told us") lists the causes met so far. The command is the build's own, from compile_commands.json.

    tools/check_ptxas.py --compile-commands build/compile_commands.json --source src/device/gemm/grouped_gemm.cu
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

SERIALISED = re.compile(r"\(C75(10|15|18|20)\)|wgmma\.mma_async instructions are serialized")
SPILLED = re.compile(r"[1-9][0-9]* bytes spill (stores|loads)")
# "warpgroup.wait is injected ... in function 'NAME'": a wait ptxas added before a use of GMMA registers.
INJECTED_WAIT = re.compile(r"\(C7517\).*in function '([^']+)'")
# Each GEMM kernel has one such wait, on the bounded wait's timeout path, which runs only when a stage is late
# (docs/gemm.md). A second one is a wait inside the K loop: the mainloop then no longer overlaps its wgmma.
MAX_INJECTED_WAITS_PER_KERNEL = 1


def find_command(compile_commands, source):
    with open(compile_commands) as f:
        entries = json.load(f)
    for entry in entries:
        if os.path.normpath(entry["file"]).endswith(os.path.normpath(source)):
            return entry
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compile-commands", required=True, help="the build's compile_commands.json")
    parser.add_argument("--source", required=True, help="the source, as its path ends")
    args = parser.parse_args()
    entry = find_command(args.compile_commands, args.source)
    if entry is None:
        print(f"check_ptxas: no compile command for {args.source} in {args.compile_commands}")
        return 1
    argv = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "check.o")
        rebuilt = []
        skip = False
        for arg in argv:
            if skip:
                skip = False
                continue
            if arg in ("-o", "-MF", "-MT"):
                skip = True
                continue
            if arg == "-MD":
                continue
            rebuilt.append(arg)
        rebuilt += ["-Xptxas=-v", "-o", out]
        result = subprocess.run(rebuilt, cwd=entry["directory"], capture_output=True, text=True)
    report = (result.stdout + result.stderr).splitlines()
    if result.returncode != 0:
        print("\n".join(report[-40:]))
        print(f"check_ptxas: compiling {args.source} failed ({result.returncode})")
        return 1
    bad = [line for line in report if SERIALISED.search(line) or SPILLED.search(line)]
    injected = {}
    for line in report:
        match = INJECTED_WAIT.search(line)
        if match:
            injected[match.group(1)] = injected.get(match.group(1), 0) + 1
    bad += [f"{count} injected warpgroup.wait in {kernel} (at most {MAX_INJECTED_WAITS_PER_KERNEL} expected)"
            for kernel, count in injected.items() if count > MAX_INJECTED_WAITS_PER_KERNEL]
    kernels = sum(1 for line in report if "Compiling entry function" in line)
    if kernels == 0:
        print(f"check_ptxas: ptxas reported no kernel for {args.source}; is this a CUDA source of the build?")
        return 1
    if bad:
        print("\n".join(bad))
        print(f"check_ptxas: {len(bad)} line(s) above: serialised wgmma, extra injected waits or spills in "
              f"{args.source}")
        return 1
    print(f"check_ptxas: {kernels} kernels of {args.source}: no serialised wgmma, no extra injected wait, no spills")
    return 0


if __name__ == "__main__":
    sys.exit(main())
