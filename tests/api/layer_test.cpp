// The layer end to end on the CPU reference backend: what the API writes equals the reference called directly,
// bit for bit, in both gradient modes, through recompute_forward, for every Config, at every EP degree, and
// after a schedule overflow.
#include <cmath>
#include <cstdint>
#include <iterator>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "api/api_problem.hpp"
#include "api/status_matchers.hpp"
#include "common/bf16.hpp"
#include "common/bit_compare.hpp"
#include "common/test_seed.hpp"
#include "mok/mok.hpp"

namespace mok::testing {
namespace {

struct Layer {
    std::unique_ptr<MoeLayer> layer;
    std::unique_ptr<ForwardContext> context;
};

Layer make_layer(const LayerOptions& options) {
    Layer l;
    size_t bytes = 0;
    std::shared_ptr<Workspace> workspace;
    EXPECT_TRUE(MoeLayer::workspace_bytes(options, &bytes).is_ok());
    EXPECT_TRUE(Workspace::create(options.backend, options.device, bytes, &workspace).is_ok());
    EXPECT_TRUE(MoeLayer::create(options, workspace, &l.layer).is_ok());
    EXPECT_TRUE(l.layer->create_context(&l.context).is_ok());
    return l;
}

struct ReferenceResults {
    std::vector<reference::RankForward> forward;
    std::vector<reference::RankGrads> grads;
};

ReferenceResults run_reference(const RandomCase& c) {
    ReferenceResults r;
    std::string error;
    EXPECT_TRUE(reference::forward(c.problem, reference::Precision::kDevice, &r.forward, &error)) << error;
    EXPECT_TRUE(reference::backward(c.problem, c.dy, reference::Precision::kDevice, &r.grads, &error)) << error;
    return r;
}

// What the contract says a weight gradient becomes: bf16(sum) fresh, fp32(main_grad + sum) accumulated.
std::vector<double> expected_grad(GradMode mode, const std::vector<double>& sums, const std::vector<double>& before) {
    std::vector<double> out(sums.size());
    for (size_t i = 0; i < sums.size(); ++i) {
        const auto sum = static_cast<float>(sums[i]);
        out[i] = mode == GradMode::kFresh ? round_to_bf16(sum) : static_cast<float>(before[i]) + sum;
    }
    return out;
}

::testing::AssertionResult grads_match(GradMode mode, const std::string& what, const WeightTensors& got,
                                       const reference::ExpertParams& sums, const WeightTensors& before) {
    for (auto [name, tensor, sum, prior] :
         {std::tuple{".gate", &got.gate, &sums.gate, &before.gate}, std::tuple{".up", &got.up, &sums.up, &before.up},
          std::tuple{".down", &got.down, &sums.down, &before.down}}) {
        const std::vector<double> want = expected_grad(mode, *sum, prior->values());
        if (auto result = same_bits(what + name, tensor->values(), want); !result) {
            return result;
        }
    }
    return ::testing::AssertionSuccess();
}

// A copy of every main_grad before the backward adds to it.
struct MainGrads {
    std::vector<WeightTensors> experts;
    std::vector<std::vector<WeightTensors>> shared;
};

WeightTensors copy_of(const WeightTensors& w) {
    const TensorView g = w.gate.view();
    const TensorView d = w.down.view();
    WeightTensors c{HostTensor(g.dtype, std::vector<int64_t>(g.shape.begin(), g.shape.begin() + g.rank)),
                    HostTensor(g.dtype, std::vector<int64_t>(g.shape.begin(), g.shape.begin() + g.rank)),
                    HostTensor(d.dtype, std::vector<int64_t>(d.shape.begin(), d.shape.begin() + d.rank))};
    c.gate.assign(w.gate.values());
    c.up.assign(w.up.values());
    c.down.assign(w.down.values());
    return c;
}

MainGrads snapshot_main_grads(const ApiProblem& api) {
    MainGrads m;
    for (int r = 0; r < api.ep_size(); ++r) {
        m.experts.push_back(copy_of(api.rank(r).d_experts_main));
        m.shared.emplace_back();
        for (const WeightTensors& w : api.rank(r).d_shared_main) {
            m.shared.back().push_back(copy_of(w));
        }
    }
    return m;
}

::testing::AssertionResult backward_matches(GradMode mode, const ApiProblem& api, const ReferenceResults& ref,
                                            const MainGrads& before) {
    for (int r = 0; r < api.ep_size(); ++r) {
        const ApiRank& rank = api.rank(r);
        const reference::RankGrads& g = ref.grads[r];
        const std::string where = "rank " + std::to_string(r) + " ";
        const bool fresh = mode == GradMode::kFresh;
        if (auto result = same_bits(where + "dx", rank.dx.values(), g.dx); !result) {
            return result;
        }
        if (auto result = same_bits(where + "d_router_weights", rank.d_router_weights.values(), g.d_router_weights);
            !result) {
            return result;
        }
        const WeightTensors& experts = fresh ? rank.d_experts_fresh : rank.d_experts_main;
        if (auto result = grads_match(mode, where + "d_experts", experts, g.d_experts, before.experts[r]); !result) {
            return result;
        }
        for (size_t s = 0; s < g.d_shared.size(); ++s) {
            const WeightTensors& shared = fresh ? rank.d_shared_fresh[s] : rank.d_shared_main[s];
            const std::string name = where + "d_shared[" + std::to_string(s) + "]";
            if (auto result = grads_match(mode, name, shared, g.d_shared[s], before.shared[r][s]); !result) {
                return result;
            }
        }
    }
    return ::testing::AssertionSuccess();
}

// Row counts of each rank's stats against the reference's plan and a direct count of the ids.
::testing::AssertionResult stats_match(const ForwardContext& context, const RandomCase& c,
                                       const ReferenceResults& ref) {
    const int num_ranks = c.problem.ep_size;
    const int64_t num_local = c.problem.shape.num_experts / num_ranks;
    for (int r = 0; r < num_ranks; ++r) {
        const RoutingStats& stats = context.stats(r);
        const plan::HostPlan& plan = ref.forward[r].plan;
        if (stats.padded_rows != plan.padded_rows() ||
            static_cast<int64_t>(stats.rows_per_local_expert.size()) != num_local) {
            return ::testing::AssertionFailure() << "rank " << r << " padded rows or expert count differ";
        }
        for (int32_t l = 0; l < num_local; ++l) {
            if (stats.rows_per_local_expert[l] != plan.local_expert_rows(l)) {
                return ::testing::AssertionFailure()
                       << "rank " << r << " local expert " << l << ": " << stats.rows_per_local_expert[l]
                       << " rows, plan says " << plan.local_expert_rows(l);
            }
        }
        for (int src = 0; src < num_ranks; ++src) {
            int64_t rows = 0;
            for (int32_t id : c.problem.ranks[src].expert_ids) {
                rows += id >= 0 && id / num_local == r ? 1 : 0;
            }
            if (stats.rows_from_rank.at(src) != rows) {
                return ::testing::AssertionFailure() << "rank " << r << " got " << stats.rows_from_rank[src]
                                                     << " rows from rank " << src << ", the ids say " << rows;
            }
        }
    }
    return ::testing::AssertionSuccess();
}

struct LayerCase {
    const char* name;
    ProblemOptions options;
    int ep_size;
    int64_t row_padding;
};

std::vector<LayerCase> layer_cases() {
    std::vector<LayerCase> cases;
    cases.push_back({"OneRankNoShared", problem_shape(40, 16, 16, 4, 2, {}), 1, 0});
    LayerCase zipf{"TwoRanksZipfUnusedSlotsPaddedRows", problem_shape(96, 32, 16, 8, 3, {8}), 2, 8};
    zipf.options.routing = Routing::kZipf;
    zipf.options.unused_slot_fraction = 0.2;
    cases.push_back(zipf);
    LayerCase hot{"FourRanksOneHotRankIdleExperts", problem_shape(144, 16, 24, 8, 2, {24, 8}), 4, 0};
    hot.options.routing = Routing::kHotRange;
    hot.options.hot_first_expert = 2;
    hot.options.num_hot_experts = 2;
    cases.push_back(hot);
    // T = 70 per rank: a partial last plan chunk.
    LayerCase odd{"TwoRanksPartialChunk", problem_shape(140, 24, 8, 6, 6, {16}), 2, 0};
    odd.options.idle_experts = {1};
    cases.push_back(odd);
    return cases;
}

// gtest prints a failing case's parameter: its name says which.
void PrintTo(const LayerCase& c, std::ostream* os) {
    *os << c.name;
}

class LayerEndToEnd : public ::testing::TestWithParam<LayerCase> {};

TEST_P(LayerEndToEnd, ForwardAndBackwardEqualTheReferenceInBothGradModes) {
    const LayerCase& param = GetParam();
    const RandomCase c = random_case(param.options, param.ep_size, case_seed(0));
    SCOPED_TRACE(replay_hint() + "; " + c.description);
    const ReferenceResults ref = run_reference(c);
    ApiProblem api(c.problem, c.dy, param.row_padding);
    Layer l = make_layer(api.options());

    for (GradMode mode : {GradMode::kFresh, GradMode::kAccumulate}) {
        api.prepare_outputs(case_seed(1));
        ASSERT_TRUE(l.layer->forward(api.forward_args(), l.context.get()).is_ok());
        ASSERT_TRUE(l.context->ready());
        for (int r = 0; r < param.ep_size; ++r) {
            ASSERT_TRUE(same_bits("rank " + std::to_string(r) + " y", api.rank(r).y.values(), ref.forward[r].y));
        }
        ASSERT_TRUE(stats_match(*l.context, c, ref));
        const MainGrads before = snapshot_main_grads(api);
        const Status status = l.layer->backward(api.inputs(), api.backward_args(mode), *l.context);
        ASSERT_TRUE(status.is_ok()) << status.to_string();
        ASSERT_TRUE(backward_matches(mode, api, ref, before)) << (mode == GradMode::kFresh ? "fresh" : "accumulate");
    }
}

TEST_P(LayerEndToEnd, RecomputeThenBackwardEqualsForwardThenBackward) {
    const LayerCase& param = GetParam();
    const RandomCase c = random_case(param.options, param.ep_size, case_seed(2));
    SCOPED_TRACE(replay_hint() + "; " + c.description);
    ApiProblem first(c.problem, c.dy, param.row_padding);
    ApiProblem second(c.problem, c.dy, param.row_padding);
    first.prepare_outputs(case_seed(3));
    second.prepare_outputs(case_seed(3));
    Layer l = make_layer(first.options());

    ASSERT_TRUE(l.layer->forward(first.forward_args(), l.context.get()).is_ok());
    ASSERT_TRUE(l.layer->backward(first.inputs(), first.backward_args(GradMode::kAccumulate), *l.context).is_ok());
    std::unique_ptr<ForwardContext> recomputed;
    ASSERT_TRUE(l.layer->create_context(&recomputed).is_ok());
    ASSERT_TRUE(l.layer->recompute_forward(second.inputs(), recomputed.get()).is_ok());
    ASSERT_TRUE(recomputed->ready());
    ASSERT_TRUE(l.layer->backward(second.inputs(), second.backward_args(GradMode::kAccumulate), *recomputed).is_ok());

    for (int r = 0; r < param.ep_size; ++r) {
        const std::string where = "rank " + std::to_string(r) + " ";
        const ApiRank& a = first.rank(r);
        const ApiRank& b = second.rank(r);
        EXPECT_TRUE(same_bits(where + "dx", b.dx.values(), a.dx.values()));
        EXPECT_TRUE(same_bits(where + "d_router_weights", b.d_router_weights.values(), a.d_router_weights.values()));
        EXPECT_TRUE(
            same_bits(where + "d_experts.gate", b.d_experts_main.gate.values(), a.d_experts_main.gate.values()));
        EXPECT_TRUE(
            same_bits(where + "d_experts.down", b.d_experts_main.down.values(), a.d_experts_main.down.values()));
        EXPECT_EQ(recomputed->stats(r).rows_from_rank, l.context->stats(r).rows_from_rank);
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LayerEndToEnd, ::testing::ValuesIn(layer_cases()),
                         [](const ::testing::TestParamInfo<LayerCase>& info) { return info.param.name; });

// The determinism promise through the API: the same bits for every value of every Config field.
TEST(LayerDeterminism, EveryConfigGivesTheSameBits) {
    ProblemOptions options = problem_shape(96, 16, 16, 8, 3, {8});
    options.routing = Routing::kZipf;
    const RandomCase c = random_case(options, 2, case_seed(4));
    SCOPED_TRACE(replay_hint() + "; " + c.description);
    std::vector<Config> configs(4);
    configs[1].minibatch_rows = 128;
    configs[1].ring_rows = 256;
    configs[2].schedule_capacity_factor = 8.0;
    configs[2].num_comm_sms_forward = 3;
    configs[2].num_comm_sms_backward = 5;
    configs[3].peer_timeout_ms = 1;
    configs[3].minibatch_rows = 384;
    configs[3].ring_rows = 384 * 3;

    std::vector<std::vector<double>> first;
    for (const Config& config : configs) {
        ApiProblem api(c.problem, c.dy);
        LayerOptions layer_options = api.options();
        layer_options.config = config;
        Layer l = make_layer(layer_options);
        api.prepare_outputs(case_seed(5));
        ASSERT_TRUE(l.layer->forward(api.forward_args(), l.context.get()).is_ok());
        ASSERT_TRUE(l.layer->backward(api.inputs(), api.backward_args(GradMode::kFresh), *l.context).is_ok());
        std::vector<std::vector<double>> results;
        for (int r = 0; r < api.ep_size(); ++r) {
            results.push_back(api.rank(r).y.values());
            results.push_back(api.rank(r).dx.values());
            results.push_back(api.rank(r).d_router_weights.values());
            results.push_back(api.rank(r).d_experts_fresh.up.values());
        }
        if (first.empty()) {
            first = results;
            continue;
        }
        for (size_t i = 0; i < results.size(); ++i) {
            EXPECT_TRUE(same_bits("result " + std::to_string(i), results[i], first[i]));
        }
    }
}

// The same global batch at EP 1, 2 and 4 gives the same y, dx and router-weight gradients.
TEST(LayerDeterminism, EveryEpDegreeGivesTheSameBits) {
    ProblemOptions options = problem_shape(64, 16, 8, 8, 2, {8});
    options.unused_slot_fraction = 0.1;
    const uint64_t seed = case_seed(6);
    const char* const names[] = {"y", "dx", "d_router_weights"};
    std::vector<std::vector<double>> first;
    for (int ep_size : {1, 2, 4}) {
        const RandomCase c = random_case(options, ep_size, seed);
        SCOPED_TRACE(replay_hint() + "; " + c.description);
        ApiProblem api(c.problem, c.dy);
        Layer l = make_layer(api.options());
        api.prepare_outputs(case_seed(7));
        ASSERT_TRUE(l.layer->forward(api.forward_args(), l.context.get()).is_ok());
        ASSERT_TRUE(l.layer->backward(api.inputs(), api.backward_args(GradMode::kFresh), *l.context).is_ok());
        // Each result in global token order: the ranks' blocks one after another.
        std::vector<std::vector<double>> global(std::size(names));
        for (int r = 0; r < ep_size; ++r) {
            const HostTensor* parts[] = {&api.rank(r).y, &api.rank(r).dx, &api.rank(r).d_router_weights};
            for (size_t p = 0; p < std::size(parts); ++p) {
                const std::vector<double> values = parts[p]->values();
                global[p].insert(global[p].end(), values.begin(), values.end());
            }
        }
        if (first.empty()) {
            first = global;
            continue;
        }
        for (size_t p = 0; p < global.size(); ++p) {
            EXPECT_TRUE(same_bits(std::string(names[p]) + " at EP " + std::to_string(ep_size), global[p], first[p]));
        }
    }
}

// Routing that needs more rows than the schedule holds fails with kScheduleOverflow naming the rank, writes
// nothing, and leaves the layer fit for the next step.
TEST(LayerOverflow, NamesTheRankAndTheNextStepRuns) {
    // Capacity factor 1: T k rows per rank plus a tile per local expert. Every token on rank 1's four experts
    // needs three times that; a uniform routing fits.
    ProblemOptions hot = problem_shape(400, 16, 8, 8, 3, {8});
    hot.routing = Routing::kHotRange;
    hot.hot_first_expert = 4;
    hot.num_hot_experts = 4;
    Config config;
    config.schedule_capacity_factor = 1.0;
    const RandomCase overflowing = random_case(hot, 2, case_seed(8), config);
    SCOPED_TRACE(replay_hint() + "; " + overflowing.description);
    ApiProblem api(overflowing.problem, overflowing.dy);
    Layer l = make_layer(api.options());
    api.prepare_outputs(case_seed(9));

    EXPECT_TRUE(
        has_code(l.layer->forward(api.forward_args(), l.context.get()), StatusCode::kScheduleOverflow, "rank 1"));
    EXPECT_FALSE(l.context->ready());
    for (int64_t n = 0; n < api.rank(0).y.numel(); ++n) {
        ASSERT_TRUE(std::isnan(api.rank(0).y.get(n))) << "y[" << n << "] was written";
    }
    EXPECT_TRUE(
        has_code(l.layer->recompute_forward(api.inputs(), l.context.get()), StatusCode::kScheduleOverflow, "rank 1"));
    EXPECT_TRUE(is_invalid_argument(l.layer->backward(api.inputs(), api.backward_args(GradMode::kFresh), *l.context),
                                    "context", "empty"));

    ProblemOptions uniform = hot;
    uniform.routing = Routing::kUniform;
    const RandomCase fitting = random_case(uniform, 2, case_seed(10), config);
    const ReferenceResults ref = run_reference(fitting);
    ApiProblem next(fitting.problem, fitting.dy);
    next.prepare_outputs(case_seed(11));
    ASSERT_TRUE(l.layer->forward(next.forward_args(), l.context.get()).is_ok());
    const MainGrads before = snapshot_main_grads(next);
    ASSERT_TRUE(l.layer->backward(next.inputs(), next.backward_args(GradMode::kFresh), *l.context).is_ok());
    for (int r = 0; r < 2; ++r) {
        EXPECT_TRUE(same_bits("rank " + std::to_string(r) + " y", next.rank(r).y.values(), ref.forward[r].y));
    }
    EXPECT_TRUE(backward_matches(GradMode::kFresh, next, ref, before));
}

}  // namespace
}  // namespace mok::testing
