#include "mok/models.hpp"

#include <string>

namespace mok {
namespace {

// From the models' published configurations: routed experts, hidden size, expert width, top-k, and one shared
// expert of the routed width where the model has one.
std::vector<ModelPreset> make_presets() {
    return {
        {"kimi-k2.7-code", "Kimi K2.7 Code", 384, 7168, 2048, 8, {2048}},
        {"glm-5.2", "GLM-5.2", 256, 6144, 2048, 8, {2048}},
        {"qwen3.5-397b-a17b", "Qwen3.5-397B-A17B", 512, 4096, 1024, 10, {1024}},
        {"deepseek-v4-pro", "DeepSeek-V4-Pro", 384, 7168, 3072, 6, {3072}},
        {"deepseek-v3", "DeepSeek-V3", 256, 7168, 2048, 8, {2048}},
        {"qwen3-235b-a22b", "Qwen3-235B-A22B", 128, 4096, 1536, 8, {}},
    };
}

}  // namespace

LayerShape ModelPreset::layer_shape(int64_t tokens_per_rank) const {
    LayerShape shape;
    shape.tokens_per_rank = tokens_per_rank;
    shape.hidden = hidden;
    shape.expert_width = expert_width;
    shape.num_experts = num_experts;
    shape.top_k = top_k;
    shape.shared_expert_widths = shared_expert_widths;
    return shape;
}

std::span<const ModelPreset> model_presets() {
    static const std::vector<ModelPreset> presets = make_presets();
    return presets;
}

const ModelPreset* find_model_preset(std::string_view name) {
    for (const ModelPreset& preset : model_presets()) {
        if (preset.name == name) {
            return &preset;
        }
    }
    return nullptr;
}

Status lookup_model_preset(std::string_view name, const ModelPreset** out) {
    if (out == nullptr) {
        return Status::invalid_argument("out", "a non-null pointer");
    }
    *out = find_model_preset(name);
    if (*out != nullptr) {
        return Status::ok();
    }
    std::string known;
    for (const ModelPreset& preset : model_presets()) {
        known += (known.empty() ? "" : ", ") + std::string(preset.name);
    }
    return Status::invalid_argument("model", "one of " + known + "; got '" + std::string(name) + "'");
}

}  // namespace mok
