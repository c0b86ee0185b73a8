// The CUDA backend's argument rules, on top of the backend-independent checks of host/api/validate.hpp (which
// every argument has passed by the time these run):
//   - every tensor's data is device memory of options.device: one cudaPointerGetAttributes per tensor, a driver
//     query that enqueues nothing. It is skipped while the call's stream is being captured into a CUDA graph
//     (`check_memory` false), where no query outside the stream's work should run; the eager calls before a
//     capture have checked the same kind of tensors;
//   - weights and weight gradients are dense: the grouped GEMMs address them through tensor maps and stores
//     without a row stride. Activations (x, y, dy, dx) may have padded rows.
// Routing values (ids in range, finite weights) cannot be read on the host without a sync: the GPU planner
// checks them and synchronize() reports a violation as kInvalidArgument.
#pragma once

#include <span>

#include "mok/layer.hpp"

namespace mok::cuda {

Status check_forward_tensors(const LayerOptions& options, std::span<const ForwardArgs> args, bool check_memory);
Status check_recompute_tensors(const LayerOptions& options, std::span<const RankInputs> inputs, bool check_memory);
Status check_backward_tensors(const LayerOptions& options, std::span<const RankInputs> inputs,
                              std::span<const BackwardArgs> args, bool check_memory);

}  // namespace mok::cuda
