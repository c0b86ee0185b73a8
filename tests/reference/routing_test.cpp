// The plan-driven simulation against the formulas evaluated token by token (tests/reference/direct_formula),
// over uniform, skewed and degenerate routings; the overflow and malformed-input failures.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "common/random_problem.hpp"
#include "common/test_seed.hpp"
#include "reference/direct_formula.hpp"
#include "reference/reference.hpp"
#include "reference/tolerance.hpp"

namespace mok::reference {
namespace {

using mok::testing::ProblemOptions;
using mok::testing::Routing;

// The oracle and the direct formulas compute the same fp64 sums, mostly in the same order; where they differ
// (the router-weight gradient as <W_d^T dy, h> or <dy, W_d h>; dh scaled before or after the sum) each sum
// of at most a few hundred terms of order one is reassociated, a relative change of ~ 100 * 2^-53 ~ 1e-14.
// 1e-12 leaves a factor of 100; a row placed wrongly changes a result by order one.
constexpr double kFp64ReassociationBound = 1e-12;

struct RoutingCase {
    const char* name;
    int ep_size;
    ProblemOptions options;
};

void PrintTo(const RoutingCase& c, std::ostream* os) {
    *os << c.name;
}

ProblemOptions routing_options(int64_t top_k, Routing routing) {
    ProblemOptions o;
    o.num_tokens = 48;
    o.hidden = 24;
    o.expert_width = 16;
    o.num_experts = 8;
    o.top_k = top_k;
    o.shared_expert_widths = {8, 32};
    o.routing = routing;
    return o;
}

RoutingCase one_expert_case() {
    RoutingCase c{"all_tokens_one_expert", 4, routing_options(1, Routing::kHotRange)};
    c.options.hot_first_expert = 5;
    c.options.num_hot_experts = 1;
    return c;
}

RoutingCase one_rank_case() {
    // At R = 4, rank 2 owns experts 4 and 5: every token's two slots go there.
    RoutingCase c{"all_tokens_one_rank", 4, routing_options(2, Routing::kHotRange)};
    c.options.hot_first_expert = 4;
    c.options.num_hot_experts = 2;
    return c;
}

RoutingCase sparse_case() {
    RoutingCase c{"half_unused_three_idle", 2, routing_options(3, Routing::kZipf)};
    c.options.unused_slot_fraction = 0.5;
    c.options.idle_experts = {0, 3, 7};
    return c;
}

RoutingCase no_shared_case() {
    RoutingCase c{"k1_no_shared_R8", 8, routing_options(1, Routing::kUniform)};
    c.options.shared_expert_widths.clear();
    return c;
}

class Routings : public ::testing::TestWithParam<RoutingCase> {};

void expect_close(const std::string& what, const std::vector<double>& got, const std::vector<double>& want) {
    EXPECT_LE(tolerance::relative_error(got, want), kFp64ReassociationBound) << what;
}

TEST_P(Routings, OracleMatchesDirectFormulas) {
    const RoutingCase& c = GetParam();
    const uint64_t seed = mok::testing::case_seed(std::hash<std::string>{}(c.name));
    SCOPED_TRACE(mok::testing::replay_hint() + "; " + c.options.describe() + ", R " + std::to_string(c.ep_size));
    const Problem problem = partition(mok::testing::random_global_batch(c.options, seed), c.ep_size);
    const std::vector<std::vector<double>> dy = mok::testing::split_rows(
        mok::testing::random_output_grad(c.options.num_tokens, c.options.hidden, c.options.values, seed + 1),
        c.ep_size);
    std::vector<RankForward> forward_out;
    std::vector<RankGrads> grads;
    std::string error;
    ASSERT_TRUE(forward(problem, Precision::kOracle, &forward_out, &error)) << error;
    ASSERT_TRUE(backward(problem, dy, Precision::kOracle, &grads, &error)) << error;
    const mok::testing::DirectResult direct = mok::testing::direct_formula(problem, dy);
    for (int r = 0; r < c.ep_size; ++r) {
        const std::string rank = "rank " + std::to_string(r) + " ";
        expect_close(rank + "y", forward_out[r].y, direct.y[r]);
        expect_close(rank + "dx", grads[r].dx, direct.grads[r].dx);
        expect_close(rank + "d_router_weights", grads[r].d_router_weights, direct.grads[r].d_router_weights);
        expect_close(rank + "d_experts.gate", grads[r].d_experts.gate, direct.grads[r].d_experts.gate);
        expect_close(rank + "d_experts.up", grads[r].d_experts.up, direct.grads[r].d_experts.up);
        expect_close(rank + "d_experts.down", grads[r].d_experts.down, direct.grads[r].d_experts.down);
        for (size_t s = 0; s < grads[r].d_shared.size(); ++s) {
            const std::string shared = rank + "d_shared[" + std::to_string(s) + "].";
            expect_close(shared + "gate", grads[r].d_shared[s].gate, direct.grads[r].d_shared[s].gate);
            expect_close(shared + "up", grads[r].d_shared[s].up, direct.grads[r].d_shared[s].up);
            expect_close(shared + "down", grads[r].d_shared[s].down, direct.grads[r].d_shared[s].down);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Reference, Routings,
                         ::testing::Values(RoutingCase{"uniform_R1", 1, routing_options(2, Routing::kUniform)},
                                           RoutingCase{"uniform_R4", 4, routing_options(3, Routing::kUniform)},
                                           RoutingCase{"zipf_R2", 2, routing_options(2, Routing::kZipf)},
                                           one_expert_case(), one_rank_case(), sparse_case(), no_shared_case()),
                         [](const ::testing::TestParamInfo<RoutingCase>& info) {
                             return std::string(info.param.name);
                         });

// Every token on one expert, with the capacity of half the balanced load: at R = 8 with one expert per rank
// and T = 40, the owner needs round_up(8 * 40, 128) = 384 rows and holds round_up(20, 128) + 128 = 256.
// Forward and backward both refuse, naming that rank and the numbers.
TEST(RoutingOverflow, FailsNamingTheRank) {
    constexpr int kEpSize = 8;
    constexpr int32_t kHotExpert = 5;  // owned by rank 5
    ProblemOptions o;
    o.num_tokens = 320;
    o.hidden = 16;
    o.expert_width = 8;
    o.num_experts = kEpSize;
    o.top_k = 1;
    o.routing = Routing::kHotRange;
    o.hot_first_expert = kHotExpert;
    o.num_hot_experts = 1;
    SCOPED_TRACE(mok::testing::replay_hint());
    Config config;
    config.schedule_capacity_factor = 0.5;
    const Problem problem =
        partition(mok::testing::random_global_batch(o, mok::testing::case_seed(1)), kEpSize, config);
    const int64_t capacity = plan_shape(problem, kHotExpert).capacity_rows;
    const int64_t needed = plan::round_up(o.num_tokens, plan::kExpertRowAlignment);
    ASSERT_LT(capacity, needed) << "the case no longer overflows";
    std::vector<RankForward> forward_out;
    std::string error;
    EXPECT_FALSE(forward(problem, Precision::kDevice, &forward_out, &error));
    EXPECT_NE(error.find("rank 5"), std::string::npos) << error;
    EXPECT_NE(error.find(std::to_string(needed) + " padded rows"), std::string::npos) << error;
    EXPECT_NE(error.find(std::to_string(capacity) + " rows"), std::string::npos) << error;
    std::vector<RankGrads> grads;
    error.clear();
    const std::vector<std::vector<double>> dy(kEpSize, std::vector<double>(problem.ranks[0].x.size(), 1.0));
    EXPECT_FALSE(backward(problem, dy, Precision::kOracle, &grads, &error));
    EXPECT_NE(error.find("rank 5"), std::string::npos) << error;
    // The same routing fits the default (worst-case) capacity.
    Problem fitting = problem;
    fitting.config = Config{};
    EXPECT_TRUE(forward(fitting, Precision::kDevice, &forward_out, &error)) << error;
}

// The capacity the contract derives from the factor: the balanced load times the factor, padded, plus a tile
// per local expert; the worst case for 0 and never more than it.
TEST(RoutingOverflow, CapacityFollowsTheFactor) {
    Problem problem;
    problem.shape.tokens_per_rank = 1000;
    problem.shape.top_k = 4;
    problem.shape.num_experts = 16;
    problem.ep_size = 4;
    const int64_t worst = plan::worst_case_rows(4, 1000, 4, 4);
    problem.config.schedule_capacity_factor = 0.0;
    EXPECT_EQ(plan_shape(problem, 1).capacity_rows, worst);
    problem.config.schedule_capacity_factor = 1.5;
    EXPECT_EQ(plan_shape(problem, 1).capacity_rows, plan::round_up(6000, 128) + 4 * 128);
    problem.config.schedule_capacity_factor = 100.0;
    EXPECT_EQ(plan_shape(problem, 1).capacity_rows, worst);
}

TEST(MalformedProblem, FailsNamingTheInput) {
    ProblemOptions o = routing_options(2, Routing::kUniform);
    const Problem good = partition(mok::testing::random_global_batch(o, mok::testing::case_seed(2)), 2);
    std::vector<RankForward> out;
    std::string error;
    ASSERT_TRUE(forward(good, Precision::kDevice, &out, &error)) << error;

    Problem short_x = good;
    short_x.ranks[1].x.pop_back();
    EXPECT_FALSE(forward(short_x, Precision::kDevice, &out, &error));
    EXPECT_NE(error.find("ranks[1].x"), std::string::npos) << error;

    Problem repeated = good;
    repeated.ranks[0].expert_ids[3 * o.top_k + 1] = repeated.ranks[0].expert_ids[3 * o.top_k] =
        static_cast<int32_t>(o.num_experts - 1);
    EXPECT_FALSE(forward(repeated, Precision::kOracle, &out, &error));
    EXPECT_NE(error.find("token 3"), std::string::npos) << error;

    Problem out_of_range = good;
    out_of_range.ranks[1].expert_ids[0] = static_cast<int32_t>(o.num_experts);
    EXPECT_FALSE(forward(out_of_range, Precision::kOracle, &out, &error));
    EXPECT_NE(error.find("ranks[1]"), std::string::npos) << error;

    std::vector<RankGrads> grads;
    const std::vector<std::vector<double>> short_dy(1, std::vector<double>(good.ranks[0].x.size(), 1.0));
    EXPECT_FALSE(backward(good, short_dy, Precision::kOracle, &grads, &error));
    EXPECT_NE(error.find("dy"), std::string::npos) << error;
}

}  // namespace
}  // namespace mok::reference
