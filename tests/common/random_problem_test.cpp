// The random problems keep the promises the other tests build on: valid routing, the requested skew, idle
// experts, unused slots, both signs and exact zeros among router weights, and the value modes.
#include "common/random_problem.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/bf16.hpp"
#include "common/test_seed.hpp"
#include "plan/routing_plan.hpp"

namespace mok::testing {
namespace {

ProblemOptions base_options() {
    ProblemOptions o;
    o.num_tokens = 256;
    o.hidden = 16;
    o.expert_width = 8;
    o.num_experts = 8;
    o.top_k = 3;
    o.shared_expert_widths = {8, 24};
    return o;
}

std::vector<int64_t> expert_counts(const reference::GlobalBatch& batch) {
    std::vector<int64_t> counts(batch.shape.num_experts, 0);
    for (const int32_t id : batch.expert_ids) {
        if (id != plan::kUnusedSlot) {
            ++counts[id];
        }
    }
    return counts;
}

void expect_valid_routing(const reference::GlobalBatch& batch) {
    const int32_t k = static_cast<int32_t>(batch.shape.top_k);
    for (int64_t t = 0; t < batch.num_tokens; ++t) {
        std::vector<float> weights(k);
        for (int32_t j = 0; j < k; ++j) {
            weights[j] = static_cast<float>(batch.router_weights[t * k + j]);
        }
        const plan::TokenCheckResult check = plan::check_token(&batch.expert_ids[t * k], weights.data(), k,
                                                               static_cast<int32_t>(batch.shape.num_experts));
        ASSERT_EQ(check.check, plan::TokenCheck::kOk) << "token " << t << " slot " << check.slot;
    }
}

TEST(RandomProblem, ShapesAndReproducibility) {
    SCOPED_TRACE(replay_hint());
    const ProblemOptions o = base_options();
    const reference::GlobalBatch batch = random_global_batch(o, case_seed(0));
    EXPECT_EQ(batch.x.size(), static_cast<size_t>(o.num_tokens * o.hidden));
    EXPECT_EQ(batch.expert_ids.size(), static_cast<size_t>(o.num_tokens * o.top_k));
    EXPECT_EQ(batch.experts.gate.size(), static_cast<size_t>(o.num_experts * o.expert_width * o.hidden));
    EXPECT_EQ(batch.experts.down.size(), static_cast<size_t>(o.num_experts * o.hidden * o.expert_width));
    ASSERT_EQ(batch.shared.size(), 2u);
    EXPECT_EQ(batch.shared[1].up.size(), static_cast<size_t>(24 * o.hidden));
    expect_valid_routing(batch);
    const reference::GlobalBatch again = random_global_batch(o, case_seed(0));
    EXPECT_EQ(again.x, batch.x);
    EXPECT_EQ(again.expert_ids, batch.expert_ids);
    EXPECT_NE(random_global_batch(o, case_seed(1)).x, batch.x);
}

TEST(RandomProblem, IdleExpertsAndUnusedSlots) {
    SCOPED_TRACE(replay_hint());
    ProblemOptions o = base_options();
    o.idle_experts = {2, 6};
    o.unused_slot_fraction = 0.5;
    const reference::GlobalBatch batch = random_global_batch(o, case_seed(2));
    expect_valid_routing(batch);
    const std::vector<int64_t> counts = expert_counts(batch);
    EXPECT_EQ(counts[2], 0);
    EXPECT_EQ(counts[6], 0);
    const auto unused = std::count(batch.expert_ids.begin(), batch.expert_ids.end(), plan::kUnusedSlot);
    // 768 slots each unused with probability 1/2: far from both 0 and all of them.
    EXPECT_GT(unused, static_cast<int64_t>(batch.expert_ids.size()) / 4);
    EXPECT_LT(unused, static_cast<int64_t>(batch.expert_ids.size()) * 3 / 4);
}

TEST(RandomProblem, HotRangeTakesEverySlot) {
    SCOPED_TRACE(replay_hint());
    ProblemOptions o = base_options();
    o.routing = Routing::kHotRange;
    o.hot_first_expert = 4;
    o.num_hot_experts = 2;  // fewer than k: the third slot of every token stays unused
    const reference::GlobalBatch batch = random_global_batch(o, case_seed(3));
    expect_valid_routing(batch);
    const std::vector<int64_t> counts = expert_counts(batch);
    for (int32_t e = 0; e < o.num_experts; ++e) {
        EXPECT_EQ(counts[e], e == 4 || e == 5 ? o.num_tokens : 0) << "expert " << e;
    }
}

TEST(RandomProblem, ZipfSkewsPopularity) {
    SCOPED_TRACE(replay_hint());
    ProblemOptions o = base_options();
    o.top_k = 1;
    o.routing = Routing::kZipf;
    o.zipf_exponent = 1.2;
    const reference::GlobalBatch batch = random_global_batch(o, case_seed(4));
    const std::vector<int64_t> counts = expert_counts(batch);
    // The favourite's expected share is 1 / sum_p (p + 1)^-1.2 ~ 0.38 of 256 tokens, against 32 for uniform.
    EXPECT_GT(*std::max_element(counts.begin(), counts.end()), 2 * o.num_tokens / o.num_experts);
}

TEST(RandomProblem, RouterWeightsHaveBothSignsAndZeros) {
    SCOPED_TRACE(replay_hint());
    const reference::GlobalBatch batch = random_global_batch(base_options(), case_seed(5));
    const auto& w = batch.router_weights;
    // 768 weights, each zero with probability 1/8 and otherwise of either sign with equal odds.
    EXPECT_GT(std::count(w.begin(), w.end(), 0.0), 0);
    EXPECT_GT(std::count_if(w.begin(), w.end(), [](double v) { return v < 0.0; }), 0);
    EXPECT_GT(std::count_if(w.begin(), w.end(), [](double v) { return v > 0.0; }), 0);
    for (const double v : w) {
        EXPECT_EQ(static_cast<double>(static_cast<float>(v)), v) << "router weights are fp32 values";
    }
}

bool is_bf16(double v) {
    return round_to_bf16(static_cast<float>(v)) == v;
}

TEST(RandomProblem, RandomBf16ValuesAreScaledBf16) {
    SCOPED_TRACE(replay_hint());
    const ProblemOptions o = base_options();
    const reference::GlobalBatch batch = random_global_batch(o, case_seed(6));
    const double gate_scale = 1.0 / std::sqrt(static_cast<double>(o.hidden));
    const double down_scale = 1.0 / std::sqrt(static_cast<double>(o.expert_width));
    EXPECT_TRUE(std::all_of(batch.x.begin(), batch.x.end(), is_bf16));
    EXPECT_TRUE(std::any_of(batch.x.begin(), batch.x.end(), [](double v) { return v != 0.0; }));
    for (const double v : batch.experts.gate) {
        ASSERT_TRUE(is_bf16(v) && std::abs(v) <= gate_scale) << v;
    }
    for (const double v : batch.experts.down) {
        ASSERT_TRUE(is_bf16(v) && std::abs(v) <= down_scale) << v;
    }
    const std::vector<double> dy = random_output_grad(o.num_tokens, o.hidden, o.values, case_seed(7));
    EXPECT_TRUE(std::all_of(dy.begin(), dy.end(), is_bf16));
}

// Exact mode: every value is n / 2^s with |n| <= 8 (s = 2 for x and router weights, 4 for the weights, 3 for dy).
TEST(RandomProblem, ExactValuesAreSmallDyadics) {
    SCOPED_TRACE(replay_hint());
    ProblemOptions o = base_options();
    o.values = Values::kExactArithmetic;
    const reference::GlobalBatch batch = random_global_batch(o, case_seed(8));
    const auto expect_dyadic = [](const char* what, const std::vector<double>& values, int scale_log2) {
        for (const double v : values) {
            const double n = std::ldexp(v, scale_log2);
            ASSERT_TRUE(n == std::floor(n) && std::abs(n) <= 8.0) << what << " value " << v;
        }
        EXPECT_TRUE(std::any_of(values.begin(), values.end(), [](double v) { return v != 0.0; })) << what;
    };
    expect_dyadic("x", batch.x, 2);
    expect_dyadic("router_weights", batch.router_weights, 2);
    expect_dyadic("gate", batch.experts.gate, 4);
    expect_dyadic("up", batch.experts.up, 4);
    expect_dyadic("down", batch.experts.down, 4);
    expect_dyadic("shared down", batch.shared[0].down, 4);
    expect_dyadic("dy", random_output_grad(o.num_tokens, o.hidden, o.values, case_seed(9)), 3);
}

TEST(RandomProblem, SplitAndConcatAreInverse) {
    const std::vector<double> global = {1, 2, 3, 4, 5, 6, 7, 8};
    const std::vector<std::vector<double>> parts = split_rows(global, 4);
    ASSERT_EQ(parts.size(), 4u);
    EXPECT_EQ(parts[2], (std::vector<double>{5, 6}));
    EXPECT_EQ(concat_ranks(parts), global);
}

}  // namespace
}  // namespace mok::testing
