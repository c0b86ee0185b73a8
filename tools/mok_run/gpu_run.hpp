// mok-run on the CUDA backend: the layer's tensors copied to GPU 0, one warm-up step, then timed steps (CUDA events
// around each pass on the run's stream), the results copied back for the report's checksums.
#pragma once

#include "layer_data.hpp"
#include "mok/mok.hpp"

namespace mok::run {

// Runs `iterations` timed forward + backward steps of `layer_options` (Backend::kCuda) on `data`, printing the
// time per pass and the routing, and leaves the last step's outputs in `data`.
Status run_on_gpu(const LayerOptions& layer_options, int iterations, LayerData& data);

}  // namespace mok::run
