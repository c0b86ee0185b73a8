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
    double p25_ms = 0.0;  // first quartile
    double p75_ms = 0.0;  // third quartile

    int num_reps() const { return static_cast<int>(samples_ms.size()); }
};

// Median, extremes and quartiles (linear interpolation between order statistics) of `samples_ms`.
// An empty list gives all zeros.
TimingStats summarize(std::vector<double> samples_ms);

// Element i is the largest of per_rank_samples_ms[r][i] over the ranks r. Every rank must hold the same
// number of samples (the same repetitions); a mismatch throws std::invalid_argument.
std::vector<double> max_over_ranks(const std::vector<std::vector<double>>& per_rank_samples_ms);

}  // namespace mok::bench
