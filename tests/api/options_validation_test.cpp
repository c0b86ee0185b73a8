// MoeLayer::validate: every rule of docs/semantics.md section 1 and config.hpp, one case per rule, each naming
// the offending option.
#include <cmath>
#include <functional>
#include <limits>
#include <ostream>
#include <string>

#include <gtest/gtest.h>

#include "api/status_matchers.hpp"
#include "mok/mok.hpp"

namespace mok::testing {
namespace {

// A small valid layer: two ranks of four experts each, two shared experts.
LayerOptions valid_options() {
    LayerOptions o;
    o.shape.tokens_per_rank = 40;
    o.shape.hidden = 32;
    o.shape.expert_width = 16;
    o.shape.num_experts = 8;
    o.shape.top_k = 3;
    o.shape.shared_expert_widths = {8, 24};
    o.topology = {2, 0, 2};
    o.config.minibatch_rows = 256;
    o.config.ring_rows = 1024;
    return o;
}

struct OptionsCase {
    const char* name;
    std::function<void(LayerOptions&)> mutate;
    const char* path;
    const char* fragment;
};

// gtest prints a failing case's parameter: its name says which.
void PrintTo(const OptionsCase& c, std::ostream* os) {
    *os << c.name;
}

class OptionsValidation : public ::testing::TestWithParam<OptionsCase> {};

TEST_P(OptionsValidation, NamesTheOption) {
    LayerOptions options = valid_options();
    ASSERT_TRUE(MoeLayer::validate(options).is_ok());
    GetParam().mutate(options);
    EXPECT_TRUE(is_invalid_argument(MoeLayer::validate(options), GetParam().path, GetParam().fragment));
    size_t bytes = 0;
    EXPECT_TRUE(is_invalid_argument(MoeLayer::workspace_bytes(options, &bytes), GetParam().path, GetParam().fragment));
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const OptionsCase kOptionsCases[] = {
    {"NoTokens", [](LayerOptions& o) { o.shape.tokens_per_rank = 0; }, "options.shape.tokens_per_rank", "got 0"},
    {"HiddenNotMultipleOf8", [](LayerOptions& o) { o.shape.hidden = 36; }, "options.shape.hidden", "multiple of 8"},
    {"HiddenZero", [](LayerOptions& o) { o.shape.hidden = 0; }, "options.shape.hidden", "got 0"},
    {"WidthBelow8", [](LayerOptions& o) { o.shape.expert_width = 4; }, "options.shape.expert_width", "got 4"},
    {"WidthNegative", [](LayerOptions& o) { o.shape.expert_width = -16; }, "options.shape.expert_width", "got -16"},
    {"ExpertsNotMultipleOfRanks", [](LayerOptions& o) { o.shape.num_experts = 9; }, "options.shape.num_experts",
     "multiple of topology.ep_size (2)"},
    {"NoExperts", [](LayerOptions& o) { o.shape.num_experts = 0; }, "options.shape.num_experts", "got 0"},
    {"TopKZero", [](LayerOptions& o) { o.shape.top_k = 0; }, "options.shape.top_k", "got 0"},
    {"TopKAboveExperts", [](LayerOptions& o) { o.shape.top_k = 9; }, "options.shape.top_k", "num_experts (8), got 9"},
    {"SharedWidthNotMultipleOf8", [](LayerOptions& o) { o.shape.shared_expert_widths[1] = 20; },
     "options.shape.shared_expert_widths[1]", "got 20"},
    {"SlotsBeyond32Bits", [](LayerOptions& o) { o.shape.tokens_per_rank = int64_t{1} << 30; },
     "options.shape.tokens_per_rank", "below 2^31"},
    {"NoRanks",
     [](LayerOptions& o) {
         o.topology = {0, 0, 0};
     },
     "options.topology.ep_size", "got 0"},
    {"FirstLocalRankOutside", [](LayerOptions& o) { o.topology.first_local_rank = 2; },
     "options.topology.first_local_rank", "[0, 2), got 2"},
    {"NegativeFirstLocalRank", [](LayerOptions& o) { o.topology.first_local_rank = -1; },
     "options.topology.first_local_rank", "got -1"},
    {"NoLocalRanks", [](LayerOptions& o) { o.topology.num_local_ranks = 0; }, "options.topology.num_local_ranks",
     "got 0"},
    {"LocalRanksPastTheGroup",
     [](LayerOptions& o) {
         o.topology = {2, 1, 2};
     },
     "options.topology.num_local_ranks", "got 2"},
    {"NegativeForwardCommSms", [](LayerOptions& o) { o.config.num_comm_sms_forward = -1; },
     "options.config.num_comm_sms_forward", "got -1"},
    {"NegativeBackwardCommSms", [](LayerOptions& o) { o.config.num_comm_sms_backward = -4; },
     "options.config.num_comm_sms_backward", "got -4"},
    {"MinibatchZero", [](LayerOptions& o) { o.config.minibatch_rows = 0; }, "options.config.minibatch_rows",
     "multiple of 128"},
    {"MinibatchNotMultipleOf128", [](LayerOptions& o) { o.config.minibatch_rows = 200; },
     "options.config.minibatch_rows", "got 200"},
    {"MinibatchNegative", [](LayerOptions& o) { o.config.minibatch_rows = -256; }, "options.config.minibatch_rows",
     "got -256"},
    {"RingSmallerThanMinibatch", [](LayerOptions& o) { o.config.ring_rows = 128; }, "options.config.ring_rows",
     "multiple of minibatch_rows (256), got 128"},
    {"RingNotMultipleOfMinibatch", [](LayerOptions& o) { o.config.ring_rows = 640; }, "options.config.ring_rows",
     "got 640"},
    {"RingZero", [](LayerOptions& o) { o.config.ring_rows = 0; }, "options.config.ring_rows", "got 0"},
    {"NegativeCapacityFactor", [](LayerOptions& o) { o.config.schedule_capacity_factor = -0.5; },
     "options.config.schedule_capacity_factor", ">= 0"},
    {"NaNCapacityFactor", [](LayerOptions& o) { o.config.schedule_capacity_factor = kNaN; },
     "options.config.schedule_capacity_factor", "finite"},
    {"InfiniteCapacityFactor", [](LayerOptions& o) { o.config.schedule_capacity_factor = kInf; },
     "options.config.schedule_capacity_factor", "finite"},
    {"ZeroTimeout", [](LayerOptions& o) { o.config.peer_timeout_ms = 0; }, "options.config.peer_timeout_ms", "got 0"},
    {"NegativeTimeout", [](LayerOptions& o) { o.config.peer_timeout_ms = -5; }, "options.config.peer_timeout_ms",
     "got -5"},
    {"UnknownForwardCombine", [](LayerOptions& o) { o.config.forward_combine = static_cast<ForwardCombine>(3); },
     "options.config.forward_combine", "got 3"},
    {"UnknownBackend", [](LayerOptions& o) { o.backend = static_cast<Backend>(7); }, "options.backend", "got 7"},
    {"CpuBackendOnGpuDevice", [](LayerOptions& o) { o.device = Device::cuda(0); }, "options.device",
     "cpu for Backend::kCpuReference, got cuda:0"},
};

INSTANTIATE_TEST_SUITE_P(EveryRule, OptionsValidation, ::testing::ValuesIn(kOptionsCases),
                         [](const ::testing::TestParamInfo<OptionsCase>& info) { return info.param.name; });

TEST(OptionsValidation, AcceptsValidOptionsAndEveryModelPresetAtEp8) {
    EXPECT_TRUE(MoeLayer::validate(valid_options()).is_ok());
    for (const ModelPreset& preset : model_presets()) {
        LayerOptions o;
        o.shape = preset.layer_shape(4096);
        o.topology = {8, 0, 8};
        EXPECT_TRUE(MoeLayer::validate(o).is_ok()) << preset.name << ": " << MoeLayer::validate(o).to_string();
    }
}

// Without the CUDA backend in the build, Backend::kCuda is not supported. With it, a machine without an sm_90
// GPU still gets kNotSupported naming the backend (the CPU suite runs on such machines), and one with a GPU
// accepts the options; a CPU device is refused either way once the backend is built in.
TEST(OptionsValidation, CudaBackendNeedsItsBuildAndAHopperGpu) {
    LayerOptions o = valid_options();
    o.backend = Backend::kCuda;
    o.device = Device::cuda(0);
    const Status status = MoeLayer::validate(o);
    std::shared_ptr<Workspace> workspace;
#if MOK_TEST_WITH_CUDA
    if (!status.is_ok()) {
        EXPECT_TRUE(has_code(status, StatusCode::kNotSupported, "Backend::kCuda")) << status.to_string();
        EXPECT_TRUE(has_code(Workspace::create(Backend::kCuda, Device::cuda(0), 1024, &workspace),
                             StatusCode::kNotSupported, "Backend::kCuda"));
    }
    o.device = Device::cpu();
    EXPECT_TRUE(is_invalid_argument(MoeLayer::validate(o), "options.device", "a CUDA device for Backend::kCuda"));
#else
    EXPECT_TRUE(has_code(status, StatusCode::kNotSupported, "not built in"));
    EXPECT_TRUE(has_code(Workspace::create(Backend::kCuda, Device::cuda(0), 1024, &workspace),
                         StatusCode::kNotSupported, "not built in"));
#endif
}

TEST(OptionsValidation, CpuBackendNeedsEveryRankLocal) {
    LayerOptions o = valid_options();
    o.topology = {2, 1, 1};
    EXPECT_TRUE(has_code(MoeLayer::validate(o), StatusCode::kNotSupported, "num_local_ranks"));
}

TEST(OptionsValidation, NullOutputPointersAreNamed) {
    EXPECT_TRUE(is_invalid_argument(MoeLayer::workspace_bytes(valid_options(), nullptr), "bytes", "non-null"));
    EXPECT_TRUE(
        is_invalid_argument(Workspace::create(Backend::kCpuReference, Device::cpu(), 0, nullptr), "out", "non-null"));
    std::shared_ptr<Workspace> workspace;
    ASSERT_TRUE(Workspace::create(Backend::kCpuReference, Device::cpu(), 0, &workspace).is_ok());
    EXPECT_TRUE(is_invalid_argument(MoeLayer::create(valid_options(), workspace, nullptr), "out", "non-null"));
}

TEST(OptionsValidation, CreateChecksTheWorkspace) {
    const LayerOptions options = valid_options();
    std::unique_ptr<MoeLayer> layer;
    EXPECT_TRUE(is_invalid_argument(MoeLayer::create(options, nullptr, &layer), "workspace", "got null"));
    std::shared_ptr<Workspace> workspace;
    EXPECT_TRUE(is_invalid_argument(Workspace::create(Backend::kCpuReference, Device::cuda(1), 64, &workspace),
                                    "device", "got cuda:1"));
    ASSERT_TRUE(Workspace::create(Backend::kCpuReference, Device::cpu(), 4096, &workspace).is_ok());
    EXPECT_EQ(workspace->bytes(), 4096u);
    EXPECT_EQ(workspace->backend(), Backend::kCpuReference);
    EXPECT_EQ(workspace->device(), Device::cpu());
    ASSERT_NE(workspace->data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(workspace->data()) % 16, 0u);
    EXPECT_TRUE(MoeLayer::create(options, workspace, &layer).is_ok());
    ASSERT_NE(layer, nullptr);
    EXPECT_EQ(layer->options().shape.hidden, options.shape.hidden);
    LayerOptions invalid = options;
    invalid.shape.top_k = 0;
    EXPECT_TRUE(is_invalid_argument(MoeLayer::create(invalid, workspace, &layer), "options.shape.top_k", "got 0"));
}

// The names the Python binding and the benchmarks take: each value's name parses back to it, others do not parse.
TEST(ForwardCombineNames, RoundTripAndRejectOthers) {
    for (const ForwardCombine c : {ForwardCombine::kAuto, ForwardCombine::kPush, ForwardCombine::kDownStores}) {
        ForwardCombine parsed = c == ForwardCombine::kAuto ? ForwardCombine::kPush : ForwardCombine::kAuto;
        EXPECT_TRUE(parse_forward_combine(to_string(c), &parsed)) << to_string(c);
        EXPECT_EQ(parsed, c);
    }
    ForwardCombine untouched = ForwardCombine::kPush;
    EXPECT_FALSE(parse_forward_combine("pull", &untouched));
    EXPECT_FALSE(parse_forward_combine("", &untouched));
    EXPECT_EQ(untouched, ForwardCombine::kPush);
}

}  // namespace
}  // namespace mok::testing
