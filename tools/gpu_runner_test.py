#!/usr/bin/env python3
"""tools/gpu_runner.sh --dry-run: the commands it would run for the benchmarks, with --bench-args handing one C++
benchmark its own flags after the runner's and leaving the others alone, and the flag's bad uses refused."""
import subprocess
import sys
import tempfile
from pathlib import Path

RUNNER = Path(__file__).resolve().parent / "gpu_runner.sh"
REPO = RUNNER.parent.parent


def run(*flags, build_dir):
    return subprocess.run(["bash", str(RUNNER), "--dry-run", "--build-dir", build_dir, *flags], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def command_of(output, step):
    """The dry run's command line of `step`, split into words."""
    prefix = f"[dry-run] {step}: "
    lines = [line[len(prefix):] for line in output.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, f"expected one command for {step}, got {lines}"
    return lines[0].split()


def main():
    failures = []

    def expect(condition, what):
        if not condition:
            failures.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        build_dir = str(Path(tmp) / "build")
        done = run("--bench", "gemm,layer", "--quick", "--bench-args", "layer", "--token-groups --tokens 4096",
                   build_dir=build_dir)
        expect(done.returncode == 0, f"a dry run with --bench-args exits 0, not {done.returncode}: {done.stderr}")
        if done.returncode == 0:
            layer = command_of(done.stdout, "bench-layer")
            expect(layer[-4:] == ["--quick", "--token-groups", "--tokens", "4096"],
                   f"the layer's flags follow the runner's: {layer}")
            gemm = command_of(done.stdout, "bench-gemm")
            expect(gemm[-1] == "--quick", f"the gemm benchmark gets no other's flags: {gemm}")

        for flags, why in [(["--bench-args", "baselines-layer", "--tokens 4096"], "a Python baseline"),
                           (["--bench-args", "nope", "--quick"], "an unknown benchmark"),
                           (["--bench-args", "layer"], "no flags after the name")]:
            refused = run("--bench", "layer", *flags, build_dir=build_dir)
            expect(refused.returncode != 0, f"--bench-args with {why} is refused (exit {refused.returncode})")
            expect("--bench-args" in refused.stderr, f"the refusal of {why} names the flag: {refused.stderr!r}")

    for failure in failures:
        print("FAIL:", failure)
    print("gpu_runner_test:", "ok" if not failures else f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
