// One rank's grouped GEMMs in a step: the routed experts over the plan's row space, and each shared expert
// over the rank's T tokens as a one-expert row space. Nothing here waits on a peer; layer_steps.cpp decides
// which stream each group runs on.
#pragma once

#include <cstdint>
#include <vector>

#include "device/gemm/grouped_gemm.hpp"
#include "host/cuda/layer_buffers.hpp"
#include "host/cuda/stage_timeline.hpp"
#include "mok/layer.hpp"

namespace mok::cuda {

struct RankGemms {
    gemm::LaunchConfig launch;           // the stream, the rank's DeviceStatus, its EP rank, the peer timeout
    gemm::GroupedRowSpace routed;        // the plan's rows as the row gate left them (none after a failure)
    gemm::GroupedRowSpace shared;        // T token rows as one expert, always (LayerConstants' counts)
    gemm::GroupedRowSpace shared_gated;  // the same rows as the row gate left them (none after a failure)
    int32_t hidden = 0;
    int32_t width = 0;
    std::vector<int64_t> shared_widths;
    ContextBuffers context;
    ScratchBuffers scratch;
    const float* shared_row_weight = nullptr;  // [T_pad] ones
    StageTimeline* timeline = nullptr;         // marks each GEMM's end (stage_timeline.hpp)
};

// gate/up + SwiGLU of the routed experts into the context; with `outputs`, the down projection too (into
// scratch.out_rows by owner row). Stream-ordered after the dispatch and the row gate.
Status routed_forward_gemms(const RankGemms& g, const RankInputs& in, bool outputs);

// The same for each shared expert (into its context buffers and scratch.shared_out[s]). It reads only the
// staged scratch.dense_x, so it may run as soon as x is staged.
Status shared_forward_gemms(const RankGemms& g, const RankInputs& in, bool outputs);

// dgrad through down and SwiGLU, router-weight gradients, the dx rows and the weight gradients of the routed
// experts (dy rows in scratch.grad_rows). Stream-ordered after the dispatch and the row gate.
Status routed_backward_gemms(const RankGemms& g, const RankInputs& in, const BackwardArgs& args);

// Each shared expert's dgrads: dg|du into scratch.shared_dgu[s] and its dx rows into scratch.shared_out[s]. It
// reads only the staged scratch.dense_dy and the context, so it may run as soon as dy is staged.
Status shared_backward_dgrads(const RankGemms& g, const RankInputs& in);

// Each shared expert's weight gradients, over the gated rows (nothing after a failed step): after
// shared_backward_dgrads and the row gate.
Status shared_weight_grads(const RankGemms& g, const BackwardArgs& args);

}  // namespace mok::cuda
