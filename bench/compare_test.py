#!/usr/bin/env python3
"""bench/compare.py on made-up result files: medians over runs, the speedup over the baseline, the refusal of
a single commit, the list of figures whose repetitions drift, and the list of commits whose runs warmed up
differently."""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

COMPARE = Path(__file__).resolve().parent / "compare.py"


def write(folder, name, commit, times, samples=None, config=None):
    figure = {"name": "time"}
    if samples is not None:
        figure["samples"] = samples
    doc = {"benchmark": "gemm", "commit": commit,
           "cases": [{"name": case, "figures": [dict(figure, value=t)]} for case, t in times.items()]}
    if config is not None:
        doc["config"] = config
    (folder / name).write_text(json.dumps(doc))


def run(*args):
    return subprocess.run([sys.executable, str(COMPARE), *args], capture_output=True, text=True)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        # Baseline a: 2.0 and 4.0 ms (median 3.0) in two rounds; b: 1.5 ms once -> 2.000x.
        write(folder, "a1.json", "aaaaaaaaaaaa", {"x/m128/down": 2.0})
        write(folder, "a2.json", "aaaaaaaaaaaa", {"x/m128/down": 4.0})
        write(folder, "b1.json", "bbbbbbbbbbbb", {"x/m128/down": 1.5})
        result = run(str(folder), "--baseline", "aaaa")
        assert result.returncode == 0, result.stderr
        line = next(l for l in result.stdout.splitlines() if l.startswith("x/m128/down"))
        assert "3.0000 (2.0000..4.0000)" in line, line
        assert "2.000x" in line, line
        # The baseline may be any commit named.
        result = run(str(folder), "--baseline", "bbbb")
        line = next(l for l in result.stdout.splitlines() if l.startswith("x/m128/down"))
        assert "0.500x" in line, line
        # Settled repetitions are not listed; a run whose last third is 10% slower than its first is.
        drift = folder / "drift"
        drift.mkdir()
        write(drift, "settled.json", "aaaaaaaaaaaa", {"x/m128/down": 2.0}, [2.0, 2.02, 1.99, 2.01, 2.0, 2.02])
        write(drift, "warming.json", "bbbbbbbbbbbb", {"x/m128/down": 2.1}, [2.0, 2.0, 2.1, 2.1, 2.2, 2.2])
        result = run(str(drift), "--baseline", "aaaa")
        assert result.returncode == 0, result.stderr
        listed = result.stdout.split("drifting", 1)[1].splitlines()[1:]
        assert [l.split() for l in listed] == [["warming.json", "x/m128/down", "+10.0%"]], result.stdout
        # Runs that warmed up alike are not listed; a commit whose runs warmed up otherwise is, with each warm-up.
        assert "warmed up differently" not in result.stdout, result.stdout
        warm = folder / "warm"
        warm.mkdir()
        write(warm, "a.json", "aaaaaaaaaaaa", {"x/m128/down": 2.0}, config={"warmup": 3, "warmup_ms": 300.0})
        write(warm, "b.json", "bbbbbbbbbbbb", {"x/m128/down": 2.0}, config={"warmup": 3})
        result = run(str(warm), "--baseline", "aaaa")
        assert result.returncode == 0, result.stderr
        listed = result.stdout.split("warmed up differently", 1)[1].splitlines()[1:3]
        expected = [["aaaaaaaaaaaa", "3,", "300.0"], ["bbbbbbbbbbbb", "3,", "None"]]
        assert [l.split() for l in listed] == expected, result.stdout
        # One commit alone is no comparison.
        only_a = folder / "only_a"
        only_a.mkdir()
        write(only_a, "a.json", "aaaaaaaaaaaa", {"x/m128/down": 2.0})
        assert run(str(only_a)).returncode == 2
        assert run(str(folder), "--baseline", "cccc").returncode == 2
    print("compare_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
