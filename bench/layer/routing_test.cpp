// Balanced routing (routing.hpp): distinct experts per token, and every expert the same rows over the global batch.
#include "bench/layer/routing.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>

namespace mok::bench::layer {
namespace {

// Rows each expert receives from ranks 0..num_ranks-1, with the distinctness of each token's experts checked.
std::vector<int64_t> rows_per_expert(int64_t tokens, int64_t top_k, int64_t num_experts, int num_ranks) {
    std::vector<int64_t> rows(num_experts, 0);
    for (int rank = 0; rank < num_ranks; ++rank) {
        const std::vector<int32_t> ids = balanced_expert_ids(tokens, top_k, num_experts, rank);
        EXPECT_EQ(ids.size(), static_cast<size_t>(tokens * top_k));
        for (int64_t t = 0; t < tokens; ++t) {
            const std::set<int32_t> experts(ids.begin() + t * top_k, ids.begin() + (t + 1) * top_k);
            EXPECT_EQ(experts.size(), static_cast<size_t>(top_k)) << "token " << t << " of rank " << rank;
            for (const int32_t e : experts) {
                EXPECT_GE(e, 0);
                EXPECT_LT(e, num_experts);
                ++rows[e];
            }
        }
    }
    return rows;
}

TEST(BalancedRouting, EveryExpertGetsTheSameRowsWhereTheyDivide) {
    // DeepSeek-V3 (E = 256, k = 8): 8192 tokens on one rank and 4096 on each of two give 256 rows per expert.
    for (const auto& [tokens, ranks] : {std::pair<int64_t, int>{8192, 1}, {4096, 2}}) {
        const std::vector<int64_t> rows = rows_per_expert(tokens, 8, 256, ranks);
        EXPECT_TRUE(std::all_of(rows.begin(), rows.end(), [](int64_t r) { return r == 256; }))
            << tokens << " tokens on " << ranks << " ranks";
    }
}

TEST(BalancedRouting, RowsDifferByAtMostOneOtherwise) {
    // Kimi-K2.7 (E = 384, k = 8) at 4096 tokens on two ranks: 65536 rows over 384 experts, 170 or 171 each.
    const std::vector<int64_t> rows = rows_per_expert(4096, 8, 384, 2);
    const auto [low, high] = std::minmax_element(rows.begin(), rows.end());
    EXPECT_EQ(*low, 170);
    EXPECT_EQ(*high, 171);
}

TEST(BalancedRouting, RefusesTopKOutsideTheExperts) {
    EXPECT_THROW(balanced_expert_ids(4, 0, 8, 0), std::invalid_argument);
    EXPECT_THROW(balanced_expert_ids(4, 9, 8, 0), std::invalid_argument);
    EXPECT_THROW(balanced_expert_ids(-1, 2, 8, 0), std::invalid_argument);
}

}  // namespace
}  // namespace mok::bench::layer
