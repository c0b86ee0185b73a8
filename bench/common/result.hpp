// A benchmark run's result: who ran what where (RunInfo), the configuration, and a list of cases, each with
// figures. Written as one JSON file per run (schema in docs/benchmarking.md); bench/baselines/results.py
// writes the same schema from Python.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "bench/common/json.hpp"
#include "bench/common/stats.hpp"

namespace mok::bench {

// Version of the JSON layout below; bump it when a field changes meaning or goes away.
inline constexpr int kSchemaVersion = 1;

enum class Better { kLower, kHigher };

// Spread of a figure over the repetitions, in the figure's unit.
struct Spread {
    double min = 0.0;
    double p25 = 0.0;
    double p75 = 0.0;
    double max = 0.0;
};

// A same-run competitor (the baseline a speedup is taken against), or a same-run ceiling (what a fraction of
// the roofline is taken of).
struct Reference {
    std::string name;
    double value = 0.0;
    std::string unit;
};

// The untimed runs before a timed figure's repetitions, and their device time.
struct WarmUp {
    int runs = 0;
    double ms = 0.0;
};

struct Figure {
    std::string name;  // "time", "bandwidth", "tflops", "roofline_fraction", "peak_memory", ...
    std::string unit;  // "ms", "us", "GB/s", "TFLOP/s", "fraction", "GiB"
    Better better = Better::kLower;
    double value = 0.0;  // the median over the repetitions for timed figures
    std::optional<Spread> spread;
    int num_reps = 0;                   // repetitions behind value and spread; 0 for derived or single values
    std::vector<double> samples;        // timed figures: each repetition's value, in the order they ran
    std::optional<WarmUp> warmup;       // time figures: what ran before the repetitions
    std::optional<Reference> baseline;  // same unit as the figure
    std::optional<Reference> ceiling;   // for fractions: the ceiling divided by

    // Times better than the baseline: baseline / value for lower-is-better figures, value / baseline for
    // higher-is-better ones, so > 1 always means this figure beats its baseline. NaN without a baseline.
    double ratio() const;

    // Sets the baseline (same unit as this figure); returns *this so it chains after a constructor.
    Figure& against(std::string baseline_name, double baseline_value);
};

// Median time, its spread and every repetition's time, in milliseconds, and the warm-up before them.
Figure time_figure(std::string name, const TimingStats& stats);
// A rate `amount_per_run / time` from timed runs, e.g. GB/s with amount in GB or TFLOP/s with amount in TFLOP.
// The slowest repetition gives the smallest rate, so the spread's ends swap relative to the times.
Figure rate_figure(std::string name, std::string unit, double amount_per_run, const TimingStats& stats);
// A single value (a memory size, a count); no spread.
Figure value_figure(std::string name, std::string unit, Better better, double value);
// rate.value / ceiling_value as a "fraction" figure (spread scaled alike) naming the ceiling it divides by.
Figure fraction_figure(std::string name, const Figure& rate, std::string ceiling_name, double ceiling_value);

enum class CaseStatus { kOk, kSkipped, kFailed };

struct Case {
    // Names a configuration, path-like: "deepseek-v3/ep2/t4096/uniform/forward". A mok case and its baseline
    // case in another benchmark of the same run share a name (docs/benchmarking.md lists the conventions).
    std::string name;
    Json params = Json::object();  // the case's configuration: shapes, routing, SMs used, ...
    std::vector<Figure> figures;
    CaseStatus status = CaseStatus::kOk;
    std::string note;  // why a case was skipped or failed; any caveat worth reading next to the figures
};

// The value of `c`'s figure `name`, or NaN where it has none (a ceiling that failed).
double figure_value(const Case& c, const std::string& name);

struct RunInfo {
    std::string benchmark;  // "ceilings", "gemm", "transport", "layer", "baselines-layer", ...
    std::string device;     // the CUDA device name, e.g. "NVIDIA H200"
    int num_gpus = 0;       // GPUs the benchmark used
    int sm_count = 0;
    std::string commit;  // git commit of the code measured ("unknown" when nobody said)
    std::string date;    // UTC, ISO 8601: "2026-11-29T20:15:03Z"
    std::string run_id;  // shared by every benchmark of one runner invocation; pairs mok with its baselines
};

// The commit measured: the environment's MOK_COMMIT, else the commit CMake saw at configure time, else
// "unknown".
std::string current_commit();
// Now, in UTC, ISO 8601 to the second.
std::string utc_now();
// MOK_BENCH_RUN_ID from the environment, else "<date>-<commit>" (a run of its own).
std::string run_id_for(const std::string& date, const std::string& commit);
// "NVIDIA H200" -> "h200": lower case, vendor dropped, every other character run becomes one '-'.
std::string device_slug(const std::string& device_name);

struct Result {
    RunInfo run;
    Json config = Json::object();  // benchmark-wide settings: repetitions, flush policy, library versions
    std::vector<Case> cases;

    Json to_json() const;
};

// "<benchmark>-<device slug>-<n>gpu-<yyyymmddThhmmssZ>-<commit>.json"
std::string result_file_name(const RunInfo& run);
// The output folder: MOK_BENCH_OUT_DIR from the environment, else the source tree's bench/results.
std::filesystem::path default_out_dir();
// Writes `result` into `out_dir` (created if missing) under result_file_name, or, where a file of that name exists,
// under <stem>-2.json, <stem>-3.json, ...: it never overwrites one. Returns the path. Throws std::runtime_error if
// the file cannot be written.
std::filesystem::path write_result(const Result& result, const std::filesystem::path& out_dir);
// One line per figure, "case  figure  value unit  [vs baseline: ratio]", for a program's standard output.
std::string format_summary(const Result& result);
// The end of every benchmark program: writes `result`, prints its summary and the file written, and returns the
// program's exit status (1 if any case failed, else 0).
int finish_run(const Result& result, const std::filesystem::path& out_dir);

}  // namespace mok::bench
