// The model presets: the published shapes, found by name.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "api/status_matchers.hpp"
#include "mok/models.hpp"

namespace mok::testing {
namespace {

struct PublishedShape {
    const char* name;
    int64_t experts, hidden, width, top_k;
    std::vector<int64_t> shared;
};

// The models' published configurations.
const PublishedShape kPublished[] = {
    {"kimi-k2.7-code", 384, 7168, 2048, 8, {2048}},     {"glm-5.2", 256, 6144, 2048, 8, {2048}},
    {"qwen3.5-397b-a17b", 512, 4096, 1024, 10, {1024}}, {"deepseek-v4-pro", 384, 7168, 3072, 6, {3072}},
    {"deepseek-v3", 256, 7168, 2048, 8, {2048}},        {"qwen3-235b-a22b", 128, 4096, 1536, 8, {}},
};

TEST(ModelPresets, EveryPublishedShapeIsFoundByName) {
    EXPECT_EQ(model_presets().size(), std::size(kPublished));
    for (const PublishedShape& want : kPublished) {
        const ModelPreset* preset = find_model_preset(want.name);
        ASSERT_NE(preset, nullptr) << want.name;
        EXPECT_EQ(preset->name, want.name);
        const LayerShape shape = preset->layer_shape(1234);
        EXPECT_EQ(shape.tokens_per_rank, 1234);
        EXPECT_EQ(shape.num_experts, want.experts) << want.name;
        EXPECT_EQ(shape.hidden, want.hidden) << want.name;
        EXPECT_EQ(shape.expert_width, want.width) << want.name;
        EXPECT_EQ(shape.top_k, want.top_k) << want.name;
        EXPECT_EQ(shape.shared_expert_widths, want.shared) << want.name;
    }
}

TEST(ModelPresets, NamesAreUniqueAndDisplayNamesSet) {
    std::set<std::string_view> names;
    for (const ModelPreset& preset : model_presets()) {
        EXPECT_TRUE(names.insert(preset.name).second) << preset.name;
        EXPECT_FALSE(preset.display_name.empty()) << preset.name;
    }
}

TEST(ModelPresets, AnUnknownNameListsTheKnownOnes) {
    EXPECT_EQ(find_model_preset("deepseek-v2"), nullptr);
    const ModelPreset* preset = nullptr;
    const Status status = lookup_model_preset("deepseek-v2", &preset);
    EXPECT_TRUE(is_invalid_argument(status, "model", "got 'deepseek-v2'"));
    for (const ModelPreset& known : model_presets()) {
        EXPECT_NE(status.message().find(known.name), std::string::npos) << known.name;
    }
    EXPECT_TRUE(lookup_model_preset("glm-5.2", &preset).is_ok());
    ASSERT_NE(preset, nullptr);
    EXPECT_EQ(preset->num_experts, 256);
}

}  // namespace
}  // namespace mok::testing
