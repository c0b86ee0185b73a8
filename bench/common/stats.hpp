// Summaries of repeated timings: median and spread (min, max and the quartiles) over the repetitions, and the
// per-repetition maximum over ranks that every multi-GPU figure uses (a step is as slow as its slowest rank).
#pragma once

#include <vector>

namespace mok::bench {

struct TimingStats {
    std::vector<double> samples_ms;  // one per timed repetition, in the order they ran
    double median_ms = 0.0;
    double min_ms = 0.0;
    double max_ms = 0.0;
    double p25_ms = 0.0;      // first quartile
    double p75_ms = 0.0;      // third quartile
    int num_warmup_runs = 0;  // untimed runs before the repetitions
    double warmup_ms = 0.0;   // their device time (the slowest stream's); 0 when not measured

    int num_reps() const { return static_cast<int>(samples_ms.size()); }
};

// Median, extremes and quartiles (linear interpolation between order statistics) of `samples_ms`.
// An empty list gives all zeros.
TimingStats summarize(std::vector<double> samples_ms);

// Element i is the largest of per_rank_samples_ms[r][i] over the ranks r. Every rank must hold the same
// number of samples (the same repetitions); a mismatch throws std::invalid_argument.
std::vector<double> max_over_ranks(const std::vector<std::vector<double>>& per_rank_samples_ms);

// Warm-up by duration: after `runs_so_far` warm-up runs that took `elapsed_ms` of device time, how many more runs
// at their mean length bring the warm-up to `min_warmup_ms` (0 once it is there; at least 1 while it is not, and at
// most kMaxWarmupRunsPerRound). A GPU under its power cap takes a time, not a number of runs, to reach the clock it
// keeps (docs/benchmarking.md, "Warm-up to the steady clock"): a count of runs covers that for long runs and not for
// short ones, a duration for both.
inline constexpr int kMaxWarmupRunsPerRound = 100000;
int more_warmup_runs(double elapsed_ms, int runs_so_far, double min_warmup_ms);

}  // namespace mok::bench
