// The checks behind MoeLayer: the layer's options, and every argument of forward, recompute_forward and
// backward, each failure a kInvalidArgument Status naming the argument's path ("args[1].inputs.x") with what
// was expected and what was given.
//
// The shape, dtype, device and stride checks read no tensor data, so every backend runs them (the CUDA
// backend included). check_routing_values reads the expert ids and router weights and so needs them in host
// memory: the CPU backend runs it; the GPU runs the same plan::check_token in its planner.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "mok/layer.hpp"

namespace mok::api {

// What one tensor argument must be.
struct TensorSpec {
    DType dtype = DType::kBF16;
    int rank = 0;
    std::array<int64_t, TensorView::kMaxRank> shape{};
    const char* symbolic_shape = "";  // "[T, H]", to say in the message which sizes were meant
    Device device{};
    // Dense row-major storage required (the [T, k] routing tensors, which the plan indexes as token * k + slot);
    // otherwise rows may be padded as long as each starts 16-byte aligned.
    bool contiguous = false;
    const char* note = "";  // appended to the expectation, e.g. " (GradMode::kAccumulate)"
};

// Defined, of the spec's dtype, device and shape; unit stride in the last dimension; non-overlapping,
// 16-byte aligned rows (or dense, when the spec asks for it); a 16-byte aligned data pointer.
Status check_tensor(const TensorView& view, const std::string& path, const TensorSpec& spec);

// LayerShape, Topology and Config against docs/semantics.md section 1 and config.hpp; backends add their own
// rules on top (devices, local ranks).
Status check_layer_options(const LayerOptions& options);

// One rank's inputs; `path` names them ("args[1].inputs" or "inputs[1]").
Status check_rank_inputs(const LayerOptions& options, const RankInputs& inputs, const std::string& path);

// One entry per local rank, each checked as above, plus y.
Status check_forward_args(const LayerOptions& options, std::span<const ForwardArgs> args);
Status check_recompute_args(const LayerOptions& options, std::span<const RankInputs> inputs);
// The inputs as for recompute_forward; dy, dx, d_router_weights and every weight gradient in the dtype of the
// call's GradMode, the same GradMode on every rank.
Status check_backward_args(const LayerOptions& options, std::span<const RankInputs> inputs,
                           std::span<const BackwardArgs> args);

// Every token's ids and router weights through plan::check_token: ids in [-1, E), no expert twice in a token,
// finite weights in used slots. The tensors must be in host memory and have passed check_rank_inputs.
Status check_routing_values(const LayerOptions& options, const RankInputs& inputs, const std::string& path);

}  // namespace mok::api
