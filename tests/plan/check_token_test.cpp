// check_token: the per-token routing validation shared by the API (on the CPU) and the device planner.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/test_seed.hpp"
#include "plan/routing_plan.hpp"

namespace mok::plan::testing {
namespace {

constexpr int kNumRandomTokens = 2000;
constexpr int32_t kMaxExperts = 64;
constexpr int32_t kMaxTopK = 10;

struct Token {
    int32_t num_experts = 1;
    std::vector<int32_t> ids;
    std::vector<float> weights;

    int32_t top_k() const { return static_cast<int32_t>(ids.size()); }
    TokenCheckResult check() const { return check_token(ids.data(), weights.data(), top_k(), num_experts); }
};

// A valid token: k distinct experts in random slots, some slots unused, finite weights of either sign.
Token random_valid_token(std::mt19937_64& rng) {
    Token t;
    t.num_experts = std::uniform_int_distribution<int32_t>(1, kMaxExperts)(rng);
    const int32_t top_k = std::uniform_int_distribution<int32_t>(1, std::min(t.num_experts, kMaxTopK))(rng);
    std::vector<int32_t> experts(t.num_experts);
    std::iota(experts.begin(), experts.end(), 0);
    std::shuffle(experts.begin(), experts.end(), rng);
    t.ids.assign(experts.begin(), experts.begin() + top_k);
    std::bernoulli_distribution unused(0.2);
    std::uniform_real_distribution<float> weight(-2.0f, 2.0f);
    for (int32_t j = 0; j < top_k; ++j) {
        if (unused(rng)) {
            t.ids[j] = kUnusedSlot;
        }
        t.weights.push_back(weight(rng));
    }
    return t;
}

int32_t random_slot(std::mt19937_64& rng, const Token& t) {
    return std::uniform_int_distribution<int32_t>(0, t.top_k() - 1)(rng);
}

// The first used slot, or -1.
int32_t first_used_slot(const Token& t) {
    for (int32_t j = 0; j < t.top_k(); ++j) {
        if (t.ids[j] != kUnusedSlot) {
            return j;
        }
    }
    return -1;
}

class CheckToken : public ::testing::Test {
  protected:
    std::mt19937_64 rng_{mok::testing::case_seed(0)};
};

TEST_F(CheckToken, AcceptsValidTokens) {
    for (int i = 0; i < kNumRandomTokens; ++i) {
        const Token t = random_valid_token(rng_);
        const TokenCheckResult r = t.check();
        ASSERT_EQ(r.check, TokenCheck::kOk) << mok::testing::replay_hint() << "; token " << i << ", slot " << r.slot;
        ASSERT_EQ(r.slot, -1);
    }
}

TEST_F(CheckToken, NamesAnExpertOutOfRange) {
    for (int i = 0; i < kNumRandomTokens; ++i) {
        Token t = random_valid_token(rng_);
        const int32_t bad_ids[] = {-2, std::numeric_limits<int32_t>::min(), t.num_experts, t.num_experts + 7,
                                   std::numeric_limits<int32_t>::max()};
        const int32_t slot = random_slot(rng_, t);
        t.ids[slot] = bad_ids[i % std::size(bad_ids)];
        const TokenCheckResult r = t.check();
        ASSERT_EQ(r.check, TokenCheck::kExpertOutOfRange) << mok::testing::replay_hint() << "; id " << t.ids[slot];
        ASSERT_EQ(r.slot, slot);
    }
}

TEST_F(CheckToken, NamesTheSecondSlotOfARepeatedExpert) {
    for (int i = 0; i < kNumRandomTokens; ++i) {
        Token t = random_valid_token(rng_);
        const int32_t first = first_used_slot(t);
        if (first < 0 || first == t.top_k() - 1) {
            continue;
        }
        const int32_t repeat = std::uniform_int_distribution<int32_t>(first + 1, t.top_k() - 1)(rng_);
        t.ids[repeat] = t.ids[first];
        const TokenCheckResult r = t.check();
        ASSERT_EQ(r.check, TokenCheck::kRepeatedExpert) << mok::testing::replay_hint() << "; token " << i;
        ASSERT_EQ(r.slot, repeat);
    }
}

TEST_F(CheckToken, UnusedSlotsMayRepeat) {
    Token t;
    t.num_experts = 4;
    t.ids = {kUnusedSlot, 2, kUnusedSlot, kUnusedSlot};
    t.weights = {0.5f, -1.0f, 0.0f, 3.0f};
    EXPECT_EQ(t.check().check, TokenCheck::kOk);
}

TEST_F(CheckToken, NamesANonFiniteWeightInAUsedSlot) {
    const float bad_weights[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                                 -std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN()};
    for (int i = 0; i < kNumRandomTokens; ++i) {
        Token t = random_valid_token(rng_);
        const int32_t slot = first_used_slot(t);
        if (slot < 0) {
            continue;
        }
        t.weights[slot] = bad_weights[i % std::size(bad_weights)];
        const TokenCheckResult r = t.check();
        ASSERT_EQ(r.check, TokenCheck::kNonFiniteWeight)
            << mok::testing::replay_hint() << "; weight " << t.weights[slot];
        ASSERT_EQ(r.slot, slot);
    }
}

// An unused slot's weight is never read, so it may hold anything.
TEST_F(CheckToken, IgnoresTheWeightOfAnUnusedSlot) {
    for (int i = 0; i < kNumRandomTokens; ++i) {
        Token t = random_valid_token(rng_);
        const int32_t slot = random_slot(rng_, t);
        t.ids[slot] = kUnusedSlot;
        t.weights[slot] = std::numeric_limits<float>::quiet_NaN();
        ASSERT_EQ(t.check().check, TokenCheck::kOk) << mok::testing::replay_hint() << "; token " << i;
    }
}

// Zero and negative weights are valid: the router may produce them and their gradients are still computed.
TEST_F(CheckToken, AcceptsZeroNegativeAndSubnormalWeights) {
    Token t;
    t.num_experts = 8;
    t.ids = {0, 3, 7, 5};
    t.weights = {0.0f, -0.0f, -5.0f, std::numeric_limits<float>::denorm_min()};
    EXPECT_EQ(t.check().check, TokenCheck::kOk);
}

}  // namespace
}  // namespace mok::plan::testing
