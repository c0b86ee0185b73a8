// The tensors of one mok-run step for every local rank, in host memory: random inputs and weights, a routing
// of the requested kind, and the outputs and gradients the layer writes. Views over them are the API's
// arguments.
#pragma once

#include <cstdint>
#include <vector>

#include "mok/mok.hpp"
#include "run_options.hpp"

namespace mok::run {

struct ExpertBuffers {
    std::vector<uint16_t> gate;  // bf16 bits: [n, I, H] (or [I_s, H])
    std::vector<uint16_t> up;
    std::vector<uint16_t> down;  // [n, H, I] (or [H, I_s])
};

struct RankBuffers {
    std::vector<uint16_t> x;            // [T, H] bf16
    std::vector<int32_t> expert_ids;    // [T, k]
    std::vector<float> router_weights;  // [T, k]
    ExpertBuffers experts;              // E/R local experts
    std::vector<ExpertBuffers> shared;  // one per shared expert
    std::vector<uint16_t> dy;           // [T, H] bf16
    std::vector<uint16_t> y;            // outputs, written by the layer
    std::vector<uint16_t> dx;
    std::vector<float> d_router_weights;
    ExpertBuffers d_experts;  // bf16 (GradMode::kFresh)
    std::vector<ExpertBuffers> d_shared;
};

class LayerData {
  public:
    LayerData(const LayerShape& shape, int ep_size, const RunOptions& options);

    std::vector<ForwardArgs> forward_args();
    std::vector<RankInputs> inputs();
    std::vector<BackwardArgs> backward_args();
    const std::vector<RankBuffers>& ranks() const { return ranks_; }
    // For a run whose tensors live elsewhere (the GPU): the host copies it reads inputs from and writes results to.
    std::vector<RankBuffers>& ranks() { return ranks_; }
    const LayerShape& shape() const { return shape_; }

  private:
    RankInputs rank_inputs(RankBuffers& rank);

    LayerShape shape_;
    std::vector<RankBuffers> ranks_;  // [R]
};

}  // namespace mok::run
