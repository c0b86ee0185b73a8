// Layer shapes of public MoE models, for benchmarks, examples and the main job (mok-run --model NAME).
//
// A preset fixes the routed experts (E, H, I, k) and the shared experts; the token count and the EP degree are
// the caller's. Shapes are the published model configurations.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "mok/config.hpp"
#include "mok/status.hpp"

namespace mok {

struct ModelPreset {
    std::string_view name;          // lower-case lookup key, e.g. "deepseek-v3"
    std::string_view display_name;  // e.g. "DeepSeek-V3"
    int64_t num_experts = 0;        // E
    int64_t hidden = 0;             // H
    int64_t expert_width = 0;       // I
    int64_t top_k = 0;              // k
    std::vector<int64_t> shared_expert_widths;

    // The layer's shape with T tokens on each rank.
    LayerShape layer_shape(int64_t tokens_per_rank) const;
};

// Every preset, in a fixed order.
std::span<const ModelPreset> model_presets();

// The preset called `name` (as in ModelPreset::name), or nullptr.
const ModelPreset* find_model_preset(std::string_view name);

// Like find_model_preset, but an unknown name is a kInvalidArgument Status that lists the known names.
Status lookup_model_preset(std::string_view name, const ModelPreset** out);

}  // namespace mok
