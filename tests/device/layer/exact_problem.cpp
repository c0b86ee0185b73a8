#include "layer/exact_problem.hpp"

#include <random>
#include <stdexcept>

namespace mok::testing {
namespace {

double pick(std::mt19937_64& rng, std::initializer_list<double> values) {
    std::uniform_int_distribution<size_t> index(0, values.size() - 1);
    return *(values.begin() + index(rng));
}

double signed_pick(std::mt19937_64& rng, std::initializer_list<double> magnitudes) {
    std::bernoulli_distribution negative(0.5);
    const double v = pick(rng, magnitudes);
    return negative(rng) ? -v : v;
}

void exact_experts(reference::ExpertParams& p, std::mt19937_64& rng) {
    for (double& v : p.gate) {
        v = pick(rng, {6.0, 8.0});
    }
    for (double& v : p.up) {
        v = signed_pick(rng, {0.0625, 0.125});
    }
    for (double& v : p.down) {
        v = signed_pick(rng, {0.0625, 0.125});
    }
}

}  // namespace

RandomCase exact_case(ProblemOptions options, int ep_size, uint64_t seed, const Config& config) {
    options.hidden = kExactHidden;
    options.expert_width = kExactWidth;
    options.values = Values::kExactArithmetic;
    for (int64_t width : options.shared_expert_widths) {
        if (width > 2 * kExactWidth) {
            throw std::invalid_argument("exact problems take shared widths of at most 16");
        }
    }
    if (options.num_tokens > kExactMaxTokens) {
        throw std::invalid_argument("exact problems take at most 64 tokens");
    }
    // The routing (ids, which slots are unused, which weights are zero) comes from the shared generator; the
    // values are replaced.
    reference::GlobalBatch batch = random_global_batch(options, seed);
    std::mt19937_64 rng(seed ^ 0x5eedf00dull);
    for (double& v : batch.x) {
        v = pick(rng, {0.25, 0.5});
    }
    for (double& w : batch.router_weights) {
        if (w != 0.0) {
            w = signed_pick(rng, {0.25, 0.5, 1.0});
        }
    }
    exact_experts(batch.experts, rng);
    for (reference::ExpertParams& shared : batch.shared) {
        exact_experts(shared, rng);
    }
    std::vector<double> dy(static_cast<size_t>(options.num_tokens * options.hidden));
    for (double& v : dy) {
        v = signed_pick(rng, {0.125, 0.25, 0.5});
    }
    RandomCase c;
    c.problem = reference::partition(batch, ep_size, config);
    c.dy = split_rows(dy, ep_size);
    c.description = options.describe() + " (SwiGLU-linear exact values), R " + std::to_string(ep_size) + ", seed " +
                    std::to_string(seed);
    return c;
}

}  // namespace mok::testing
