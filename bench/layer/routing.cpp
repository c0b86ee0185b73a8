#include "bench/layer/routing.hpp"

#include <stdexcept>
#include <string>

namespace mok::bench::layer {

std::vector<int32_t> balanced_expert_ids(int64_t tokens, int64_t top_k, int64_t num_experts, int rank) {
    if (top_k < 1 || top_k > num_experts) {
        throw std::invalid_argument("balanced routing: top_k must be in [1, num_experts = " +
                                    std::to_string(num_experts) + "], got " + std::to_string(top_k));
    }
    if (tokens < 0 || rank < 0) {
        throw std::invalid_argument("balanced routing: tokens and rank must be >= 0, got " + std::to_string(tokens) +
                                    " and " + std::to_string(rank));
    }
    std::vector<int32_t> ids(static_cast<size_t>(tokens * top_k));
    for (int64_t t = 0; t < tokens; ++t) {
        const int64_t global_token = rank * tokens + t;
        for (int64_t s = 0; s < top_k; ++s) {
            ids[t * top_k + s] = static_cast<int32_t>((global_token * top_k + s) % num_experts);
        }
    }
    return ids;
}

}  // namespace mok::bench::layer
