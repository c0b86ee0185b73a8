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
    // The shared experts' A operands, [T_pad, H] each: the caller's x and dy rows, or their copies in scratch
    // (StepsImpl::stage_dense). Set once the pass has staged them.
    const __nv_bfloat16* shared_x = nullptr;
    const __nv_bfloat16* shared_dy = nullptr;
    StageTimeline* timeline = nullptr;  // marks each GEMM's end (stage_timeline.hpp)
    gemm::RowTilePublish publish;       // routed_down's hand-off to the push (pipelined path), or none
    gemm::SourceTargets to_sources;     // routed_down's rows straight to the combine rows, or none
    // The dgrad_down launches' arrangement: the epilogue warps under Config::gemm_epilogue_warps where
    // H >= gemm::kDgradDownEpilogueWarpsMinHidden, otherwise as Config::gemm_pingpong says.
    gemm::Arrangement dgrad_down_arrangement = gemm::Arrangement::kCooperative;
    // Consumer rows for the routed and the shared dgrad_down (gemm::DgradDownArgs::consumer_rows): where their
    // experts' rows average gemm::kDgradDownConsumerRowsMinRowsPerExpert or more, else none.
    int32_t routed_dgrad_down_consumer_rows = 0;
    int32_t shared_dgrad_down_consumer_rows = 0;
    // How the routed and the shared weight gradients add to main_grad in accumulate mode
    // (gemm::WeightGradGateUpArgs::main_grad_update): by reductions where their experts' rows average
    // gemm::kMainGradReductionMinRowsPerExpert or more. The same bits either way.
    gemm::MainGradUpdate routed_main_grad_update = gemm::MainGradUpdate::kLoadAddStore;
    gemm::MainGradUpdate shared_main_grad_update = gemm::MainGradUpdate::kLoadAddStore;

    // The arrangement of the other forms whose epilogue splits -- gate/up, down, dgrad_gate_up and the weight
    // gradients in fresh mode, routed and shared (Config::gemm_epilogue_warps); accumulate-mode weight gradients run
    // cooperatively.
    gemm::Arrangement split_epilogue_arrangement = gemm::Arrangement::kCooperative;

    // `launch` with the dgrad_down launches' arrangement.
    gemm::LaunchConfig dgrad_down_launch() const {
        gemm::LaunchConfig l = launch;
        l.arrangement = dgrad_down_arrangement;
        return l;
    }
    // `launch` with the arrangement of the forms whose epilogue splits.
    gemm::LaunchConfig split_epilogue_launch() const {
        gemm::LaunchConfig l = launch;
        l.arrangement = split_epilogue_arrangement;
        return l;
    }
};

// gate/up + SwiGLU of the routed experts into the context. After the row gate; after the dispatch too, unless
// g.routed.groups.tile_ready makes each row tile wait for its rows (the pipelined path).
Status routed_gate_up(const RankGemms& g, const RankInputs& in);

// The routed experts' down projection into scratch.out_rows by owner row, after routed_gate_up; with
// g.publish set, each finished row tile is published for the push. With g.to_sources set, the rows go straight
// into their tokens' combine rows instead, flagged per row tile there (g.publish's counts and number).
Status routed_down(const RankGemms& g, const RankInputs& in);

// gate/up + SwiGLU of each shared expert into its context buffers and, with `outputs`, its down projection into
// scratch.shared_out[s]. It reads only g.shared_x, so it may run as soon as x is staged.
Status shared_forward_gemms(const RankGemms& g, const RankInputs& in, bool outputs);

// dgrad through down and the SwiGLU backward of the routed experts (dy rows in scratch.grad_rows), with the
// router-gradient partials. After the row gate; after the dispatch too, unless g.routed.groups.tile_ready makes
// each row tile wait for its rows (the pipelined path).
Status routed_dgrad_down(const RankGemms& g, const RankInputs& in);

// The routed experts' backward from routed_dgrad_down (and the dispatch) to the dx rows: router-weight
// gradients, and dgrad through gate/up into scratch.out_rows.
Status routed_backward_to_dx(const RankGemms& g, const RankInputs& in);

// dW_down of the routed experts, after routed_dgrad_down: bf16(w dy) in place of the dy rows in
// scratch.grad_rows, which nothing reads after routed_dgrad_down, then dW_down from them and the h rows. It reads
// neither dg|du nor the dx rows, so it may run beside routed_backward_to_dx's dgrad and beside the push.
Status routed_weight_grad_down(const RankGemms& g, const BackwardArgs& args);

// dW_gate and dW_up of the routed experts, after routed_dgrad_down; it reads dg|du and the x rows, not the dx
// rows, so the push may run beside it.
Status routed_weight_grad_gate_up(const RankGemms& g, const BackwardArgs& args);

// Each shared expert's dgrads: dg|du into scratch.shared_dgu[s] and its dx rows into scratch.shared_out[s]. It
// reads only g.shared_dy and the context, so it may run as soon as dy is staged.
Status shared_backward_dgrads(const RankGemms& g, const RankInputs& in);

// Each shared expert's weight gradients, over the gated rows (nothing after a failed step): after
// shared_backward_dgrads and the row gate.
Status shared_weight_grads(const RankGemms& g, const BackwardArgs& args);

}  // namespace mok::cuda
