// The determinism promise (docs/semantics.md, section 7), checked on the reference itself: the same global
// batch gives identical bits at every EP degree, for every Config, at every thread count and from run to run,
// in both precisions. The GPU tests hold the GPU to the same clauses against these results.
#include <gtest/gtest.h>

#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "common/bit_compare.hpp"
#include "common/random_problem.hpp"
#include "common/test_seed.hpp"
#include "reference/global_run.hpp"
#include "reference/parallel.hpp"
#include "reference/reference.hpp"

namespace mok::reference {
namespace {

using mok::testing::GlobalResult;
using mok::testing::run_global;
using mok::testing::same_bits;

// y, dx, the router-weight gradients and the routed experts' weight gradients: what section 7 promises
// across EP degrees (the shared experts' gradients are per-rank shares and differ by design).
::testing::AssertionResult same_global_bits(const GlobalResult& got, const GlobalResult& want) {
    for (const auto& [name, a, b] : {std::tuple{"y", &got.y, &want.y}, std::tuple{"dx", &got.dx, &want.dx},
                                     std::tuple{"d_router_weights", &got.d_router_weights, &want.d_router_weights},
                                     std::tuple{"d_experts.gate", &got.d_experts.gate, &want.d_experts.gate},
                                     std::tuple{"d_experts.up", &got.d_experts.up, &want.d_experts.up},
                                     std::tuple{"d_experts.down", &got.d_experts.down, &want.d_experts.down}}) {
        ::testing::AssertionResult result = same_bits(name, *a, *b);
        if (!result) {
            return result;
        }
    }
    return ::testing::AssertionSuccess();
}

struct InvarianceCase {
    const char* name;
    Precision precision;
    mok::testing::ProblemOptions options;
};

void PrintTo(const InvarianceCase& c, std::ostream* os) {
    *os << c.name;
}

// N 64 tokens cut 1, 2, 4 or 8 ways (T = 8 at R = 8), E = 8 experts (one per rank at R = 8).
mok::testing::ProblemOptions invariance_options(mok::testing::Routing routing, mok::testing::Values values) {
    mok::testing::ProblemOptions o;
    o.num_tokens = 64;
    o.hidden = 32;
    o.expert_width = 24;
    o.num_experts = 8;
    o.top_k = 3;
    o.shared_expert_widths = {16, 40};
    o.routing = routing;
    o.unused_slot_fraction = 0.1;
    o.idle_experts = {5};
    o.values = values;
    return o;
}

// Every token on experts 4..7: the experts of rank 1 at R = 2, of ranks 2 and 3 at R = 4.
InvarianceCase hot_rank_case() {
    InvarianceCase c{"device_hot_rank", Precision::kDevice,
                     invariance_options(mok::testing::Routing::kHotRange, mok::testing::Values::kRandomBf16)};
    c.options.hot_first_expert = 4;
    c.options.num_hot_experts = 4;
    return c;
}

class Invariance : public ::testing::TestWithParam<InvarianceCase> {
  protected:
    void SetUp() override {
        const InvarianceCase& c = GetParam();
        seed_ = mok::testing::case_seed(std::hash<std::string>{}(c.name));
        batch_ = mok::testing::random_global_batch(c.options, seed_);
        dy_ = mok::testing::random_output_grad(c.options.num_tokens, c.options.hidden, c.options.values, seed_ + 1);
    }

    GlobalResult run(int ep_size, const Config& config) {
        std::string error;
        const std::optional<GlobalResult> result =
            run_global(batch_, dy_, ep_size, GetParam().precision, config, &error);
        EXPECT_TRUE(result.has_value()) << "R " << ep_size << ": " << error;
        return result.value_or(GlobalResult{});
    }

    std::string trace() const { return mok::testing::replay_hint() + "; " + GetParam().options.describe(); }

    uint64_t seed_ = 0;
    GlobalBatch batch_;
    std::vector<double> dy_;
};

TEST_P(Invariance, SameBitsAtEveryEpDegree) {
    SCOPED_TRACE(trace());
    const GlobalResult single_rank = run(1, Config{});
    ASSERT_FALSE(HasFailure());
    for (const int ep_size : {2, 4, 8}) {
        EXPECT_TRUE(same_global_bits(run(ep_size, Config{}), single_rank)) << "R " << ep_size << " vs R 1";
    }
}

// Config shapes only the plan (capacity, minibatches, ring); none of it may reach the numbers.
TEST_P(Invariance, SameBitsForEveryConfig) {
    SCOPED_TRACE(trace());
    constexpr int kEpSize = 4;
    const GlobalResult baseline = run(kEpSize, Config{});
    ASSERT_FALSE(HasFailure());
    Config small_units;
    small_units.minibatch_rows = 128;
    small_units.ring_rows = 128;
    Config odd_ring;
    odd_ring.minibatch_rows = 256;
    odd_ring.ring_rows = 768;
    // A capacity factor of R fits every routing: no owner receives more than R T k rows.
    Config sized_capacity;
    sized_capacity.schedule_capacity_factor = kEpSize;
    Config tuned;
    tuned.num_comm_sms_forward = 3;
    tuned.num_comm_sms_backward = 5;
    tuned.peer_timeout_ms = 1;
    for (const Config& config : {small_units, odd_ring, sized_capacity, tuned}) {
        EXPECT_TRUE(same_global_bits(run(kEpSize, config), baseline))
            << "minibatch " << config.minibatch_rows << ", ring " << config.ring_rows << ", capacity factor "
            << config.schedule_capacity_factor;
    }
}

TEST_P(Invariance, SameBitsAtEveryThreadCountAndRun) {
    SCOPED_TRACE(trace());
    constexpr int kEpSize = 2;
    set_max_threads(1);
    const GlobalResult one_thread = run(kEpSize, Config{});
    // More threads than cores and than some row counts: blocks of uneven sizes.
    set_max_threads(7);
    const GlobalResult seven_threads = run(kEpSize, Config{});
    const GlobalResult seven_threads_again = run(kEpSize, Config{});
    set_max_threads(0);
    ASSERT_FALSE(HasFailure());
    EXPECT_TRUE(same_global_bits(seven_threads, one_thread));
    EXPECT_TRUE(same_global_bits(seven_threads_again, seven_threads));
    for (int r = 0; r < kEpSize; ++r) {
        for (size_t s = 0; s < one_thread.d_shared[r].size(); ++s) {
            EXPECT_TRUE(same_bits("d_shared.gate", seven_threads.d_shared[r][s].gate, one_thread.d_shared[r][s].gate));
            EXPECT_TRUE(same_bits("d_shared.down", seven_threads.d_shared[r][s].down, one_thread.d_shared[r][s].down));
        }
    }
}

using mok::testing::Routing;
using mok::testing::Values;

INSTANTIATE_TEST_SUITE_P(
    Reference, Invariance,
    ::testing::Values(
        InvarianceCase{"oracle_uniform", Precision::kOracle,
                       invariance_options(Routing::kUniform, Values::kRandomBf16)},
        InvarianceCase{"oracle_zipf", Precision::kOracle, invariance_options(Routing::kZipf, Values::kRandomBf16)},
        InvarianceCase{"device_uniform", Precision::kDevice,
                       invariance_options(Routing::kUniform, Values::kRandomBf16)},
        InvarianceCase{"device_zipf", Precision::kDevice, invariance_options(Routing::kZipf, Values::kRandomBf16)},
        InvarianceCase{"device_exact", Precision::kDevice,
                       invariance_options(Routing::kUniform, Values::kExactArithmetic)},
        hot_rank_case()),
    [](const ::testing::TestParamInfo<InvarianceCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mok::reference
