#!/usr/bin/env python3
"""bench/baselines/results.py's write_result: the file it writes holds the result, a second run with the same
name gets a file of its own instead of overwriting the first, and a run that writes its result again after each
case (as the baselines do) keeps one file, which holds its latest cases; a time figure carries every
repetition's time in the order they ran."""
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results  # noqa: E402


def main():
    run = results.RunInfo("layer_baseline", "NVIDIA H200", 2, 132, "abc123", "2026-11-29T20:15:03Z", "run-1")
    first_result = results.Result(run, config={"round": 1})
    second_result = results.Result(run, config={"round": 2})
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        first = results.write_result(first_result, folder)
        second = results.write_result(second_result, folder)
        expected = "layer_baseline-h200-2gpu-20261129T201503Z-abc123"
        assert first.name == f"{expected}.json", first.name
        assert second.name == f"{expected}-2.json", second.name
        assert json.loads(first.read_text())["config"] == {"round": 1}
        assert json.loads(second.read_text())["config"] == {"round": 2}
        # The first run writes again, with a case more: its own file changes, the second run's does not.
        case = results.Case("after-the-first-write")
        case.figures.append(results.time_figure("time", results.summarize([2.0, 4.0, 3.0])))
        first_result.cases.append(case)
        again = results.write_result(first_result, folder)
        assert again == first, again.name
        cases = json.loads(first.read_text())["cases"]
        assert [c["name"] for c in cases] == ["after-the-first-write"]
        time = cases[0]["figures"][0]
        assert time["value"] == 3.0 and time["samples"] == [2.0, 4.0, 3.0], time
        assert time["warmup"] == {"runs": 0, "ms": 0.0}, time
        assert json.loads(second.read_text())["cases"] == []
        leftovers = sorted(p.name for p in folder.iterdir() if p not in (first, second))
        assert not leftovers, f"partial or extra files left behind: {leftovers}"
    check_warmup_runs()
    print("ok")


def check_warmup_runs():
    """The twin of the C++ more_warmup_runs (bench/common/results_test.cpp, WarmUpRunsReachTheDuration)."""
    more = results.more_warmup_runs
    assert more(300.0, 3, 300.0) == 0
    assert more(10.0, 3, 0.0) == 0
    assert more(6.0, 3, 300.0) == 147
    assert more(299.0, 3, 300.0) == 1
    assert more(9.0, 3, 10.0) == 1
    assert more(0.0, 0, 300.0) == 1
    assert more(0.0, 5, 300.0) == results.MAX_WARMUP_RUNS_PER_ROUND
    assert more(1e-6, 1, 300.0) == results.MAX_WARMUP_RUNS_PER_ROUND


if __name__ == "__main__":
    main()
