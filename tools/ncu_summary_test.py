#!/usr/bin/env python3
"""tools/ncu_summary.py on a made-up ncu --csv file: one column per figure whichever metric gives it, units scaled,
figures no launch has left out."""
import contextlib
import io
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ncu_summary  # noqa: E402

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(launch, kernel, metric, unit, value):
    return f'"{launch}","1","bench","host","{kernel}","1","7","(384, 1, 1)","(132, 1, 1)","0","9.0","s","{metric}","{unit}","{value}"'


CSV = "\n".join([
    HEADER,
    # Launch 0 from a section (Duration, DRAM Throughput), launch 1 from raw metrics: one "time" and one "DRAM %"
    # column for both.
    row(0, "gemm<A>", "Duration", "ms", "3.65"),
    row(0, "gemm<A>", "DRAM Throughput", "%", "60.6"),
    row(1, "gemm<B>", "gpu__time_duration.sum", "nsecond", "6,666,000"),
    row(1, "gemm<B>", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", "64.5"),
    row(1, "gemm<B>", "sm__cycles_elapsed.avg.per_second", "hz", "1,566,989,447.43"),
]) + "\n"


def main():
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ncu.csv"
        path.write_text(CSV)
        out = io.StringIO()
        sys.argv = ["ncu_summary.py", str(path)]
        with contextlib.redirect_stdout(out):
            assert ncu_summary.main() == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:5] == ["id", "time", "SM", "clock", "DRAM"], lines[0]
    assert lines[0].count("time") == 1 and lines[0].count("DRAM %") == 1, lines[0]
    assert "tensor" not in lines[0] and "L2" not in lines[0], lines[0]
    assert lines[1].split()[:6] == ["0", "3.650", "ms", "-", "60.6", "(132,"], lines[1]
    assert lines[2].split()[:7] == ["1", "6.666", "ms", "1.57", "GHz", "64.5", "(132,"], lines[2]
    assert len(lines) == 3, lines
    print("ok")


if __name__ == "__main__":
    main()
