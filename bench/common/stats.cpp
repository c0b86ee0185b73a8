#include "bench/common/stats.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace mok::bench {
namespace {

constexpr double kFirstQuartile = 0.25;
constexpr double kMedian = 0.5;
constexpr double kThirdQuartile = 0.75;

// The q-quantile of sorted values, interpolating linearly between the two nearest order statistics
// (numpy's default "linear" method, so bench/report.py and the Python baselines agree with these figures).
double quantile(const std::vector<double>& sorted, double q) {
    const double position = q * static_cast<double>(sorted.size() - 1);
    const size_t below = static_cast<size_t>(position);
    const size_t above = std::min(below + 1, sorted.size() - 1);
    const double weight = position - static_cast<double>(below);
    return sorted[below] + weight * (sorted[above] - sorted[below]);
}

}  // namespace

TimingStats summarize(std::vector<double> samples_ms) {
    TimingStats stats;
    stats.samples_ms = samples_ms;
    if (samples_ms.empty()) {
        return stats;
    }
    std::sort(samples_ms.begin(), samples_ms.end());
    stats.min_ms = samples_ms.front();
    stats.max_ms = samples_ms.back();
    stats.median_ms = quantile(samples_ms, kMedian);
    stats.p25_ms = quantile(samples_ms, kFirstQuartile);
    stats.p75_ms = quantile(samples_ms, kThirdQuartile);
    return stats;
}

std::vector<double> max_over_ranks(const std::vector<std::vector<double>>& per_rank_samples_ms) {
    if (per_rank_samples_ms.empty()) {
        return {};
    }
    std::vector<double> slowest = per_rank_samples_ms.front();
    for (const auto& samples : per_rank_samples_ms) {
        if (samples.size() != slowest.size()) {
            throw std::invalid_argument("max_over_ranks: every rank must hold the same number of samples");
        }
        for (size_t i = 0; i < samples.size(); ++i) {
            slowest[i] = std::max(slowest[i], samples[i]);
        }
    }
    return slowest;
}

int more_warmup_runs(double elapsed_ms, int runs_so_far, double min_warmup_ms) {
    if (elapsed_ms >= min_warmup_ms) {
        return 0;
    }
    if (runs_so_far <= 0 || elapsed_ms <= 0.0) {
        return runs_so_far <= 0 ? 1 : kMaxWarmupRunsPerRound;
    }
    const double per_run_ms = elapsed_ms / runs_so_far;
    const double needed = std::ceil((min_warmup_ms - elapsed_ms) / per_run_ms);
    return static_cast<int>(std::clamp(needed, 1.0, static_cast<double>(kMaxWarmupRunsPerRound)));
}

}  // namespace mok::bench
