// One rank's grouped GEMMs in a step: the routed experts over the plan's row space, then each shared expert
// over the rank's T tokens as a one-expert row space. Stream-ordered after the dispatch and the row gate, before
// the push; nothing here waits on a peer.
#pragma once

#include <cstdint>
#include <vector>

#include "device/gemm/grouped_gemm.hpp"
#include "host/cuda/layer_buffers.hpp"
#include "host/cuda/stage_timeline.hpp"
#include "mok/layer.hpp"

namespace mok::cuda {

struct RankGemms {
    gemm::LaunchConfig launch;     // the stream, the rank's DeviceStatus, its EP rank, the peer timeout
    gemm::GroupedRowSpace routed;  // the plan's rows as the row gate left them (none after a failure)
    gemm::GroupedRowSpace shared;  // T token rows as one expert (none after a failure)
    int32_t hidden = 0;
    int32_t width = 0;
    std::vector<int64_t> shared_widths;
    ContextBuffers context;
    ScratchBuffers scratch;
    const float* shared_row_weight = nullptr;  // [T_pad] ones
    StageTimeline* timeline = nullptr;         // marks each GEMM's end (stage_timeline.hpp)
};

// gate/up + SwiGLU of the routed and shared experts into the context; with `outputs`, the down projections too
// (the routed rows into scratch.out_rows by owner row, each shared expert's into scratch.shared_out[s]).
Status forward_gemms(const RankGemms& g, const RankInputs& in, bool outputs);

// dgrad through down and SwiGLU, router-weight gradients, the dx rows and every weight gradient, for the routed
// experts (dy rows in scratch.grad_rows) and then each shared expert (dy in scratch.dense_dy, x in
// scratch.dense_x).
Status backward_gemms(const RankGemms& g, const RankInputs& in, const BackwardArgs& args);

}  // namespace mok::cuda
