// Per-call argument validation of forward, recompute_forward and backward: one case per rule, each asserting
// the code, that the message names the argument's path, and that no output was written.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <vector>

#include <gtest/gtest.h>

#include "api/api_problem.hpp"
#include "api/status_matchers.hpp"
#include "common/test_seed.hpp"
#include "mok/mok.hpp"

namespace mok::testing {
namespace {

// Two ranks of four experts, k = 3, one shared expert; T = 24 so that tokens 3, 5 and 7 exist on every rank.
constexpr int kRanks = 2;
constexpr int64_t kTopK = 3;
constexpr int32_t kExperts = 8;

ProblemOptions small_problem() {
    ProblemOptions o;
    o.num_tokens = 48;
    o.hidden = 16;
    o.expert_width = 16;
    o.num_experts = kExperts;
    o.top_k = kTopK;
    o.shared_expert_widths = {8};
    return o;
}

void set_token(ApiProblem& p, int rank, int64_t token, std::initializer_list<int32_t> ids) {
    int64_t slot = 0;
    for (int32_t id : ids) {
        p.rank(rank).expert_ids.set(token * kTopK + slot++, id);
    }
}

bool all_poisoned(const HostTensor& t) {
    for (int64_t n = 0; n < t.numel(); ++n) {
        if (!std::isnan(t.get(n))) {
            return false;
        }
    }
    return true;
}

class ValidationFixture {
  protected:
    ValidationFixture() : case_(random_case(small_problem(), kRanks, case_seed(0))), problem_(case_.problem, case_.dy) {
        std::shared_ptr<Workspace> workspace;
        EXPECT_TRUE(Workspace::create(Backend::kCpuReference, Device::cpu(), 0, &workspace).is_ok());
        EXPECT_TRUE(MoeLayer::create(problem_.options(), workspace, &layer_).is_ok());
        EXPECT_TRUE(layer_->create_context(&context_).is_ok());
        problem_.prepare_outputs(case_seed(1));
    }

    RandomCase case_;
    ApiProblem problem_;
    std::unique_ptr<MoeLayer> layer_;
    std::unique_ptr<ForwardContext> context_;
};

// ---- forward ----

struct ForwardCase {
    const char* name;
    std::function<void(ApiProblem&, std::vector<ForwardArgs>&)> mutate;
    const char* path;
    const char* fragment;
};

// gtest prints a failing case's parameter: its name says which.
void PrintTo(const ForwardCase& c, std::ostream* os) {
    *os << c.name;
}

class ForwardValidation : public ValidationFixture, public ::testing::TestWithParam<ForwardCase> {};

TEST_P(ForwardValidation, NamesTheArgumentAndWritesNothing) {
    std::vector<ForwardArgs> args = problem_.forward_args();
    GetParam().mutate(problem_, args);
    EXPECT_TRUE(is_invalid_argument(layer_->forward(args, context_.get()), GetParam().path, GetParam().fragment))
        << replay_hint();
    for (int r = 0; r < kRanks; ++r) {
        EXPECT_TRUE(all_poisoned(problem_.rank(r).y)) << "rank " << r << " y was written";
    }
    EXPECT_FALSE(context_->ready());
}

const ForwardCase kForwardCases[] = {
    {"TooFewRanks", [](ApiProblem&, std::vector<ForwardArgs>& a) { a.pop_back(); }, "args",
     "2 entries (one per local rank), got 1"},
    {"UndefinedX", [](ApiProblem&, std::vector<ForwardArgs>& a) { a[0].inputs.x.data = nullptr; }, "args[0].inputs.x",
     "undefined"},
    {"XShapeDiffersOnOneRank", [](ApiProblem&, std::vector<ForwardArgs>& a) { a[1].inputs.x.shape[0] -= 1; },
     "args[1].inputs.x", "shape [24, 16] [T, H], got [23, 16]"},
    {"XOfRankOne", [](ApiProblem&, std::vector<ForwardArgs>& a) { a[0].inputs.x.rank = 1; }, "args[0].inputs.x",
     "shape [24, 16]"},
    {"XNotBf16", [](ApiProblem&, std::vector<ForwardArgs>& a) { a[0].inputs.x.dtype = DType::kF32; },
     "args[0].inputs.x", "dtype bf16"},
    {"XOnAnotherDevice", [](ApiProblem&, std::vector<ForwardArgs>& a) { a[1].inputs.x.device = Device::cuda(0); },
     "args[1].inputs.x", "on cpu, got [24, 16] bf16 cuda:0"},
    {"XLastStrideNotUnit", [](ApiProblem&, std::vector<ForwardArgs>& a) { a[0].inputs.x.stride[1] = 2; },
     "args[0].inputs.x", "unit stride in the last dimension"},
    {"XRowsMisaligned", [](ApiProblem&, std::vector<ForwardArgs>& a) { a[0].inputs.x.stride[0] = 20; },
     "args[0].inputs.x", "16-byte aligned"},
    {"XRowsOverlap", [](ApiProblem&, std::vector<ForwardArgs>& a) { a[0].inputs.x.stride[0] = 8; }, "args[0].inputs.x",
     "must not overlap"},
    {"XDataMisaligned",
     [](ApiProblem&, std::vector<ForwardArgs>& a) { a[1].inputs.x.data = a[1].inputs.x.data_as<uint16_t>() + 1; },
     "args[1].inputs.x", "16-byte aligned data pointer"},
    {"ExpertIdsNotInt32", [](ApiProblem&, std::vector<ForwardArgs>& a) { a[0].inputs.expert_ids.dtype = DType::kF32; },
     "args[0].inputs.expert_ids", "dtype int32"},
    {"ExpertIdsPadded", [](ApiProblem&, std::vector<ForwardArgs>& a) { a[0].inputs.expert_ids.stride[0] = 4; },
     "args[0].inputs.expert_ids", "dense row-major"},
    {"ExpertIdsOfWrongK", [](ApiProblem&, std::vector<ForwardArgs>& a) { a[1].inputs.expert_ids.shape[1] = 2; },
     "args[1].inputs.expert_ids", "[24, 3] [T, k]"},
    {"RouterWeightsNotFp32",
     [](ApiProblem&, std::vector<ForwardArgs>& a) { a[1].inputs.router_weights.dtype = DType::kBF16; },
     "args[1].inputs.router_weights", "dtype fp32"},
    {"ExpertIdAtE",
     [](ApiProblem& p, std::vector<ForwardArgs>&) {
         set_token(p, 1, 7, {0, 3, kExperts});
     },
     "args[1].inputs.expert_ids[7][2]", "[0, 8) or -1 for an unused slot, got 8"},
    {"ExpertIdBelowMinusOne",
     [](ApiProblem& p, std::vector<ForwardArgs>&) {
         set_token(p, 0, 7, {-2, 1, 2});
     },
     "args[0].inputs.expert_ids[7][0]", "got -2"},
    {"ExpertRepeatedInAToken",
     [](ApiProblem& p, std::vector<ForwardArgs>&) {
         set_token(p, 0, 3, {2, 2, 5});
     },
     "args[0].inputs.expert_ids[3][1]", "got expert 2, already in slot 0"},
    {"NaNRouterWeight",
     [](ApiProblem& p, std::vector<ForwardArgs>&) {
         set_token(p, 1, 5, {1, 4, -1});
         p.rank(1).router_weights.set(5 * kTopK, std::numeric_limits<double>::quiet_NaN());
     },
     "args[1].inputs.router_weights[5][0]", "finite router weight"},
    {"InfiniteRouterWeight",
     [](ApiProblem& p, std::vector<ForwardArgs>&) {
         set_token(p, 0, 5, {1, 4, 6});
         p.rank(0).router_weights.set(5 * kTopK + 2, -std::numeric_limits<double>::infinity());
     },
     "args[0].inputs.router_weights[5][2]", "got -inf"},
    {"TooManyLocalExperts", [](ApiProblem&, std::vector<ForwardArgs>& a) { a[0].inputs.experts.gate.shape[0] = 5; },
     "args[0].inputs.experts.gate", "[4, 16, 16] [E/R, I, H]"},
    {"UpNotBf16", [](ApiProblem&, std::vector<ForwardArgs>& a) { a[1].inputs.experts.up.dtype = DType::kF32; },
     "args[1].inputs.experts.up", "dtype bf16"},
    {"DownOfWrongWidth",
     [](ApiProblem&, std::vector<ForwardArgs>& a) {
         TensorView& down = a[0].inputs.experts.down;
         down = TensorView::contiguous(down.data, DType::kBF16, {4, 16, 8});
     },
     "args[0].inputs.experts.down", "[4, 16, 16] [E/R, H, I]"},
    {"MissingSharedExpert", [](ApiProblem&, std::vector<ForwardArgs>& a) { a[1].inputs.shared.clear(); },
     "args[1].inputs.shared", "1 shared experts (one per LayerShape::shared_expert_widths entry), got 0"},
    {"SharedUpOfWrongWidth", [](ApiProblem&, std::vector<ForwardArgs>& a) { a[0].inputs.shared[0].up.shape[0] = 16; },
     "args[0].inputs.shared[0].up", "[8, 16] [I_s, H]"},
    {"SharedDownUndefined", [](ApiProblem&, std::vector<ForwardArgs>& a) { a[1].inputs.shared[0].down = {}; },
     "args[1].inputs.shared[0].down", "undefined"},
    {"YNotBf16", [](ApiProblem&, std::vector<ForwardArgs>& a) { a[0].y.dtype = DType::kF32; }, "args[0].y",
     "dtype bf16"},
    {"YOfWrongShape", [](ApiProblem&, std::vector<ForwardArgs>& a) { a[1].y.shape[1] = 8; }, "args[1].y",
     "[24, 16] [T, H]"},
};

INSTANTIATE_TEST_SUITE_P(EveryRule, ForwardValidation, ::testing::ValuesIn(kForwardCases),
                         [](const ::testing::TestParamInfo<ForwardCase>& info) { return info.param.name; });

// ---- recompute_forward ----

struct RecomputeCase {
    const char* name;
    std::function<void(ApiProblem&, std::vector<RankInputs>&)> mutate;
    const char* path;
    const char* fragment;
};

void PrintTo(const RecomputeCase& c, std::ostream* os) {
    *os << c.name;
}

class RecomputeValidation : public ValidationFixture, public ::testing::TestWithParam<RecomputeCase> {};

TEST_P(RecomputeValidation, NamesTheArgument) {
    std::vector<RankInputs> inputs = problem_.inputs();
    GetParam().mutate(problem_, inputs);
    EXPECT_TRUE(
        is_invalid_argument(layer_->recompute_forward(inputs, context_.get()), GetParam().path, GetParam().fragment))
        << replay_hint();
    EXPECT_FALSE(context_->ready());
}

const RecomputeCase kRecomputeCases[] = {
    {"TooManyRanks", [](ApiProblem&, std::vector<RankInputs>& in) { in.push_back(in[0]); }, "inputs",
     "2 entries (one per local rank), got 3"},
    {"XOfWrongShape", [](ApiProblem&, std::vector<RankInputs>& in) { in[1].x.shape[1] = 24; }, "inputs[1].x",
     "got [24, 24]"},
    {"ExpertIdOutOfRange",
     [](ApiProblem& p, std::vector<RankInputs>&) {
         set_token(p, 0, 7, {0, 9, 1});
     },
     "inputs[0].expert_ids[7][1]", "got 9"},
    {"RepeatedExpert",
     [](ApiProblem& p, std::vector<RankInputs>&) {
         set_token(p, 1, 3, {6, -1, 6});
     },
     "inputs[1].expert_ids[3][2]", "already in slot 0"},
};

INSTANTIATE_TEST_SUITE_P(EveryRule, RecomputeValidation, ::testing::ValuesIn(kRecomputeCases),
                         [](const ::testing::TestParamInfo<RecomputeCase>& info) { return info.param.name; });

// ---- backward ----

struct BackwardCase {
    const char* name;
    GradMode mode;
    std::function<void(ApiProblem&, std::vector<RankInputs>&, std::vector<BackwardArgs>&)> mutate;
    const char* path;
    const char* fragment;
};

void PrintTo(const BackwardCase& c, std::ostream* os) {
    *os << c.name;
}

class BackwardValidation : public ValidationFixture, public ::testing::TestWithParam<BackwardCase> {};

TEST_P(BackwardValidation, NamesTheArgumentAndWritesNothing) {
    ASSERT_TRUE(layer_->forward(problem_.forward_args(), context_.get()).is_ok());
    std::vector<RankInputs> inputs = problem_.inputs();
    std::vector<BackwardArgs> args = problem_.backward_args(GetParam().mode);
    GetParam().mutate(problem_, inputs, args);
    EXPECT_TRUE(is_invalid_argument(layer_->backward(inputs, args, *context_), GetParam().path, GetParam().fragment))
        << replay_hint();
    for (int r = 0; r < kRanks; ++r) {
        EXPECT_TRUE(all_poisoned(problem_.rank(r).dx)) << "rank " << r << " dx was written";
        EXPECT_TRUE(all_poisoned(problem_.rank(r).d_router_weights)) << "rank " << r << " d_router_weights written";
        EXPECT_TRUE(all_poisoned(problem_.rank(r).d_experts_fresh.gate)) << "rank " << r << " d_experts written";
    }
}

using Inputs = std::vector<RankInputs>;
using Args = std::vector<BackwardArgs>;

const BackwardCase kBackwardCases[] = {
    {"TooFewArgs", GradMode::kFresh, [](ApiProblem&, Inputs&, Args& a) { a.pop_back(); }, "args",
     "2 entries (one per local rank), got 1"},
    {"TooFewInputs", GradMode::kFresh, [](ApiProblem&, Inputs& in, Args&) { in.pop_back(); }, "inputs",
     "2 entries (one per local rank), got 1"},
    {"InputXOfWrongDtype", GradMode::kFresh, [](ApiProblem&, Inputs& in, Args&) { in[0].x.dtype = DType::kI32; },
     "inputs[0].x", "dtype bf16"},
    {"DyOfWrongShape", GradMode::kFresh, [](ApiProblem&, Inputs&, Args& a) { a[0].dy.shape[0] = 25; }, "args[0].dy",
     "got [25, 16]"},
    {"DxNotBf16", GradMode::kFresh, [](ApiProblem&, Inputs&, Args& a) { a[1].dx.dtype = DType::kF32; }, "args[1].dx",
     "dtype bf16"},
    {"DRouterWeightsNotFp32", GradMode::kAccumulate,
     [](ApiProblem&, Inputs&, Args& a) { a[0].d_router_weights.dtype = DType::kBF16; }, "args[0].d_router_weights",
     "dtype fp32"},
    {"FreshGradsInFp32", GradMode::kFresh,
     [](ApiProblem& p, Inputs&, Args& a) { a[0].d_experts.gate = p.rank(0).d_experts_main.gate.view(); },
     "args[0].d_experts.gate", "dtype bf16 (GradMode::kFresh)"},
    {"AccumulatedGradsInBf16", GradMode::kAccumulate,
     [](ApiProblem& p, Inputs&, Args& a) { a[1].d_experts.up = p.rank(1).d_experts_fresh.up.view(); },
     "args[1].d_experts.up", "dtype fp32 (GradMode::kAccumulate)"},
    {"SharedGradInWrongDtype", GradMode::kAccumulate,
     [](ApiProblem& p, Inputs&, Args& a) { a[0].d_shared[0].down = p.rank(0).d_shared_fresh[0].down.view(); },
     "args[0].d_shared[0].down", "dtype fp32 (GradMode::kAccumulate)"},
    {"DownGradOfWrongShape", GradMode::kFresh, [](ApiProblem&, Inputs&, Args& a) { a[1].d_experts.down.shape[2] = 8; },
     "args[1].d_experts.down", "[4, 16, 16] [E/R, H, I]"},
    {"MissingSharedGrads", GradMode::kFresh, [](ApiProblem&, Inputs&, Args& a) { a[1].d_shared.clear(); },
     "args[1].d_shared", "got 0"},
    {"GradModesDifferBetweenRanks", GradMode::kFresh,
     [](ApiProblem& p, Inputs&, Args& a) { a[1] = p.backward_args(GradMode::kAccumulate)[1]; }, "args[1].grad_mode",
     "the GradMode of args[0]"},
    {"UnknownGradMode", GradMode::kFresh, [](ApiProblem&, Inputs&, Args& a) { a[0].grad_mode = GradMode{9}; },
     "args[0].grad_mode", "got 9"},
    {"InputIdOutOfRange", GradMode::kFresh,
     [](ApiProblem& p, Inputs&, Args&) {
         set_token(p, 1, 7, {kExperts + 3, -1, 0});
     },
     "inputs[1].expert_ids[7][0]", "got 11"},
    // Every slot of the problem is used, so an all-unused token differs from the context's.
    {"InputsNotTheContexts", GradMode::kFresh,
     [](ApiProblem& p, Inputs&, Args&) {
         set_token(p, 0, 3, {-1, -1, -1});
     },
     "inputs[0].expert_ids", "the expert ids the context was made from"},
};

INSTANTIATE_TEST_SUITE_P(EveryRule, BackwardValidation, ::testing::ValuesIn(kBackwardCases),
                         [](const ::testing::TestParamInfo<BackwardCase>& info) { return info.param.name; });

// ---- the context ----

class ContextValidation : public ValidationFixture, public ::testing::Test {};

TEST_F(ContextValidation, RejectsANullContext) {
    EXPECT_TRUE(is_invalid_argument(layer_->forward(problem_.forward_args(), nullptr), "context", "got null"));
    EXPECT_TRUE(is_invalid_argument(layer_->recompute_forward(problem_.inputs(), nullptr), "context", "got null"));
}

TEST_F(ContextValidation, RejectsAnotherLayersContext) {
    std::shared_ptr<Workspace> workspace;
    ASSERT_TRUE(Workspace::create(Backend::kCpuReference, Device::cpu(), 0, &workspace).is_ok());
    std::unique_ptr<MoeLayer> other;
    ASSERT_TRUE(MoeLayer::create(problem_.options(), workspace, &other).is_ok());
    std::unique_ptr<ForwardContext> foreign;
    ASSERT_TRUE(other->create_context(&foreign).is_ok());
    ASSERT_TRUE(other->forward(problem_.forward_args(), foreign.get()).is_ok());
    EXPECT_TRUE(
        is_invalid_argument(layer_->forward(problem_.forward_args(), foreign.get()), "context", "another layer's"));
    EXPECT_TRUE(
        is_invalid_argument(layer_->backward(problem_.inputs(), problem_.backward_args(GradMode::kFresh), *foreign),
                            "context", "another layer's"));
}

TEST_F(ContextValidation, BackwardNeedsAFilledContext) {
    EXPECT_FALSE(context_->ready());
    EXPECT_TRUE(
        is_invalid_argument(layer_->backward(problem_.inputs(), problem_.backward_args(GradMode::kFresh), *context_),
                            "context", "got an empty one"));
}

TEST_F(ContextValidation, CreateContextNeedsAnOutput) {
    EXPECT_TRUE(is_invalid_argument(layer_->create_context(nullptr), "out", "non-null"));
}

}  // namespace
}  // namespace mok::testing
