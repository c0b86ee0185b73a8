// Balanced routing for the layer benchmark: the padding-free reference point for its uniform routing.
//
// Token g = rank T + t of the global batch takes experts (g k + s) mod E for s < k: k consecutive experts, distinct
// since k <= E, and over the batch every expert is taken R T k / E times (within one where E does not divide R T k).
// Where that count is a multiple of the GEMMs' 128-row tile, no expert's last row tile holds padding and no weight
// gradient's last K block is partial (docs/layer.md, "What the padding costs at EP 2").
#pragma once

#include <cstdint>
#include <vector>

namespace mok::bench::layer {

// Expert ids [tokens, top_k] of rank `rank`; throws std::invalid_argument unless 1 <= top_k <= num_experts,
// tokens >= 0 and rank >= 0.
std::vector<int32_t> balanced_expert_ids(int64_t tokens, int64_t top_k, int64_t num_experts, int rank);

}  // namespace mok::bench::layer
