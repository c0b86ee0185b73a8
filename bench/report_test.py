#!/usr/bin/env python3
"""bench/report.py on made-up result files: the floors table of a layer case against its same-run baseline, and
the summary's fractions."""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPORT = Path(__file__).resolve().parent / "report.py"


def write(folder, name, benchmark, cases):
    doc = {"benchmark": benchmark, "run_id": "r1", "commit": "c0ffee", "device": "GPU", "num_gpus": 1,
           "cases": [{"name": n, "status": "ok", "figures": [{"name": k, "value": v} for k, v in figs.items()]}
                     for n, figs in cases.items()]}
    (folder / name).write_text(json.dumps(doc))


def run(*args):
    return subprocess.run([sys.executable, str(REPORT), *args], capture_output=True, text=True)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        # 10 ms against the baseline's 16; memory floor 6 ms, compute floor 0.4 x 10 = 4 ms: the bound is 6 ms,
        # 0.6 of mok's time and 0.375 of the baseline's. A case without a memory floor gets no row.
        write(folder, "layer.json", "layer", {
            "m/ep1/t4096/uniform/forward": {"time": 10.0, "memory_floor": 6.0, "roofline_fraction": 0.4,
                                            "memory_floor_fraction": 0.6},
            "m/ep1/t4096/uniform/backward": {"time": 20.0, "roofline_fraction": 0.5},
        })
        write(folder, "baselines-layer.json", "baselines-layer", {
            "nccl_pytorch/m/ep1/t4096/uniform/forward": {"time": 16.0},
            "nccl_pytorch/m/ep1/t4096/uniform/backward": {"time": 30.0},
        })
        out = folder / "report"
        result = run(str(folder), "--out", str(out), "--no-plots")
        assert result.returncode == 0, result.stderr
        text = (out / "report.md").read_text()
        assert "## Floors" in text, text
        row = next(l for l in text.splitlines() if l.startswith("| m/ep1/t4096/uniform/forward | 10 ms"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells == ["m/ep1/t4096/uniform/forward", "10 ms", "nccl_pytorch 16 ms", "6 ms", "4 ms", "0.6",
                         "0.375"], cells
        assert not any(l.startswith("| m/ep1/t4096/uniform/backward | 20 ms") for l in text.splitlines()), text

        result = run(str(folder), "--summary")
        assert result.returncode == 0, result.stderr
        line = next(l for l in result.stdout.splitlines() if l.startswith("m/ep1/t4096/uniform/forward"))
        assert "roofline 0.4 memory floor 0.6" in line, line

        # Without memory floors (a GEMM run) there is no floors table.
        other = folder / "gemm"
        other.mkdir()
        write(other, "gemm.json", "gemm", {"x/m128/down": {"time": 1.0, "roofline_fraction": 0.5}})
        result = run(str(other), "--out", str(out), "--no-plots")
        assert result.returncode == 0, result.stderr
        assert "## Floors" not in (out / "report.md").read_text()
    print("report_test: ok")


if __name__ == "__main__":
    main()
