// The CUDA backend against the CPU backend on every model preset's H, I, k and shared experts, at 4 tokens per
// rank on two virtual ranks and with k + 2 experts (a full model's weights would not fit the CPU reference),
// routed with a Zipf skew; fresh gradients through the tolerance model (the accumulate epilogue is checked by
// layer_reference_test's smaller shapes). A binary of its own: the CPU reference of these shapes takes a minute or two.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "layer/layer_runs.hpp"
#include "layer/reference_cases.hpp"

namespace mok::testing {
namespace {

// Each preset's H, I, k and shared experts; 4 tokens per rank at EP 2, and k + 2 experts (rounded to the EP
// degree), a skewed routing over them. Fresh gradients only: the accumulate epilogue is the small cases' job.
std::vector<ReferenceCase> model_cases() {
    std::vector<ReferenceCase> cases;
    for (const ModelPreset& preset : model_presets()) {
        ReferenceCase c;
        c.name = std::string(preset.name);
        std::replace_if(
            c.name.begin(), c.name.end(), [](char ch) { return ch == '-' || ch == '.'; }, '_');
        c.ep_size = 2;
        const int64_t experts = (preset.top_k + 2 + 1) / 2 * 2;
        c.options =
            problem_shape(8, preset.hidden, preset.expert_width, experts, preset.top_k, preset.shared_expert_widths);
        c.options.routing = Routing::kZipf;
        c.modes = {GradMode::kFresh};
        cases.push_back(c);
    }
    return cases;
}

class LayerMatchesCpuAtModelShapes : public ::testing::TestWithParam<ReferenceCase> {};

TEST_P(LayerMatchesCpuAtModelShapes, ForwardAndBackward) {
    MOK_REQUIRE_CUDA_BACKEND();
    expect_matches_cpu(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Presets, LayerMatchesCpuAtModelShapes, ::testing::ValuesIn(model_cases()),
                         [](const ::testing::TestParamInfo<ReferenceCase>& info) { return info.param.name; });

}  // namespace
}  // namespace mok::testing
