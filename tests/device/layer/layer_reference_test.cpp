// The CUDA backend against the CPU backend on odd shapes -- T = 65, H = 136, padded activation rows, k = 1, half
// the slots unused, idle experts, every token on one expert, several tiles in every GEMM dimension, EP 1 to 8 --
// in both gradient modes through the tolerance model, and on exact-arithmetic problems bit for bit. The model
// presets' shapes are layer_model_test's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/api_problem.hpp"
#include "common/test_seed.hpp"
#include "layer/device_problem.hpp"
#include "layer/layer_runs.hpp"
#include "layer/reference_cases.hpp"

namespace mok::testing {
namespace {

std::vector<ReferenceCase> odd_cases() {
    std::vector<ReferenceCase> cases;
    cases.push_back({"OneRankNoShared", problem_shape(40, 16, 16, 4, 2, {}), 1});
    ReferenceCase zipf{"TwoRanksZipfUnusedSlotsPaddedRows", problem_shape(96, 32, 24, 8, 3, {8}), 2, 8};
    zipf.options.routing = Routing::kZipf;
    zipf.options.unused_slot_fraction = 0.2;
    cases.push_back(zipf);
    ReferenceCase hot{"FourRanksHotExpertsIdleRest", problem_shape(144, 24, 40, 8, 2, {24, 8}), 4};
    hot.options.routing = Routing::kHotRange;
    hot.options.hot_first_expert = 2;
    hot.options.num_hot_experts = 2;
    cases.push_back(hot);
    // T = 65: a partial last tile of tokens and of every expert; H and I not multiples of 64.
    cases.push_back({"TopOneOddSizes", problem_shape(130, 136, 72, 6, 1, {40}), 2, 16});
    ReferenceCase sparse{"EightRanksHalfTheSlotsUnused", problem_shape(64, 64, 32, 16, 4, {16}), 8};
    sparse.options.unused_slot_fraction = 0.5;
    sparse.options.idle_experts = {0, 1, 2, 3, 9};
    cases.push_back(sparse);
    // Several M tiles per expert and several N tiles per GEMM.
    cases.push_back({"ManyTiles", problem_shape(600, 512, 384, 4, 2, {256}), 2});
    // T = 256 per rank, whole row tiles: the shared experts read the caller's x and dy in place (no dense copies).
    cases.push_back({"WholeRowTilesSharedInPlace", problem_shape(512, 136, 72, 8, 2, {40, 64}), 2});
    ReferenceCase one{"EveryTokenOnOneExpert", problem_shape(200, 48, 32, 8, 1, {}), 2};
    one.options.routing = Routing::kHotRange;
    one.options.hot_first_expert = 5;
    one.options.num_hot_experts = 1;
    cases.push_back(one);
    return cases;
}

std::vector<ReferenceCase> exact_cases() {
    std::vector<ReferenceCase> cases;
    cases.push_back({"ExactTwoRanks", problem_shape(64, 0, 0, 8, 2, {8}), 2, 0, true});
    ReferenceCase hot{"ExactTopOneHotRank", problem_shape(64, 0, 0, 4, 1, {16, 8}), 4, 8, true};
    hot.options.routing = Routing::kHotRange;
    hot.options.hot_first_expert = 1;
    hot.options.num_hot_experts = 1;
    cases.push_back(hot);
    ReferenceCase unused{"ExactOneRankUnusedSlotsIdleExpert", problem_shape(48, 0, 0, 6, 3, {}), 1, 0, true};
    unused.options.unused_slot_fraction = 0.3;
    unused.options.idle_experts = {2};
    cases.push_back(unused);
    ReferenceCase zipf{"ExactEightRanksZipf", problem_shape(64, 0, 0, 8, 2, {8}), 8, 0, true};
    zipf.options.routing = Routing::kZipf;
    cases.push_back(zipf);
    return cases;
}

class LayerMatchesCpu : public ::testing::TestWithParam<ReferenceCase> {};

TEST_P(LayerMatchesCpu, ForwardAndBackward) {
    MOK_REQUIRE_CUDA_BACKEND();
    expect_matches_cpu(GetParam());
}

INSTANTIATE_TEST_SUITE_P(OddShapes, LayerMatchesCpu, ::testing::ValuesIn(odd_cases()),
                         [](const ::testing::TestParamInfo<ReferenceCase>& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(ExactArithmetic, LayerMatchesCpu, ::testing::ValuesIn(exact_cases()),
                         [](const ::testing::TestParamInfo<ReferenceCase>& info) { return info.param.name; });

// The routing statistics the context reads back from the device equal the CPU backend's.
TEST(LayerStats, EqualTheCpuBackends) {
    MOK_REQUIRE_CUDA_BACKEND();
    ProblemOptions options = problem_shape(96, 16, 16, 8, 3, {});
    options.routing = Routing::kZipf;
    options.unused_slot_fraction = 0.1;
    const RandomCase c = random_case(options, 4, case_seed(1000));
    SCOPED_TRACE(replay_hint() + "; " + c.description);
    ApiProblem host(c.problem, c.dy);
    host.prepare_outputs(case_seed(1001));

    LayerUnderTest cpu;
    ASSERT_TRUE(make_layer(host.options(), &cpu).is_ok());
    ASSERT_TRUE(cpu.layer->forward(host.forward_args(), cpu.context.get()).is_ok());

    DeviceProblem device(host, kDevice);
    LayerUnderTest gpu;
    ASSERT_TRUE(make_layer(device.options(), &gpu).is_ok());
    TestStream stream;
    const Status forward = gpu.layer->forward(device.forward_args(), gpu.context.get(), stream.get());
    ASSERT_TRUE(forward.is_ok()) << forward.to_string();
    const Status synced = gpu.layer->synchronize(stream.get());
    ASSERT_TRUE(synced.is_ok()) << synced.to_string();
    for (int r = 0; r < 4; ++r) {
        const RoutingStats& want = cpu.context->stats(r);
        const RoutingStats& got = gpu.context->stats(r);
        EXPECT_EQ(got.rows_per_local_expert, want.rows_per_local_expert) << "rank " << r;
        EXPECT_EQ(got.rows_from_rank, want.rows_from_rank) << "rank " << r;
        EXPECT_EQ(got.padded_rows, want.padded_rows) << "rank " << r;
    }
}

}  // namespace
}  // namespace mok::testing
