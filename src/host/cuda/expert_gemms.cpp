#include "host/cuda/expert_gemms.hpp"

#include <utility>

namespace mok::cuda {
namespace {

const __nv_bfloat16* bf16(const TensorView& view) {
    return static_cast<const __nv_bfloat16*>(view.data);
}

// Marks the end of a GEMM's enqueue on the stage timeline as `stage`.
Status timed(const RankGemms& g, const char* stage, Status enqueued) {
    return g.timeline->record(stage, g.launch.stream, std::move(enqueued));
}

gemm::WeightGradMode weight_grad_mode(const BackwardArgs& args) {
    return args.grad_mode == GradMode::kFresh ? gemm::WeightGradMode::kFresh : gemm::WeightGradMode::kAccumulate;
}

// A weight gradient's launch: fresh mode splits its epilogue like the row forms; accumulate mode, whose fp32 slice
// does not fit a hand-off buffer, runs cooperatively.
gemm::LaunchConfig weight_grad_launch(const RankGemms& g, gemm::WeightGradMode mode) {
    return mode == gemm::WeightGradMode::kFresh ? g.split_epilogue_launch() : g.launch;
}

}  // namespace

Status routed_gate_up(const RankGemms& g, const RankInputs& in) {
    const ContextBuffers& c = g.context;
    return timed(g, "gate_up_swiglu",
                 gemm::gate_up_swiglu(
                     {g.routed, c.x_rows, bf16(in.experts.gate), bf16(in.experts.up), c.gu, c.h, g.hidden, g.width},
                     g.split_epilogue_launch()));
}

Status routed_down(const RankGemms& g, const RankInputs& in) {
    return timed(g, "down",
                 gemm::down_projection({g.routed, g.context.h, bf16(in.experts.down), g.scratch.out_rows, g.hidden,
                                        nullptr, g.hidden, g.width, g.publish, g.to_sources},
                                       g.split_epilogue_launch()));
}

Status shared_forward_gemms(const RankGemms& g, const RankInputs& in, bool outputs) {
    const ContextBuffers& c = g.context;
    const ScratchBuffers& s = g.scratch;
    for (size_t e = 0; e < g.shared_widths.size(); ++e) {
        const SharedExpertWeights& w = in.shared[e];
        const auto width = static_cast<int32_t>(g.shared_widths[e]);
        MOK_RETURN_IF_ERROR(timed(g, "shared_gate_up_swiglu",
                                  gemm::gate_up_swiglu({g.shared, g.shared_x, bf16(w.gate), bf16(w.up), c.shared_gu[e],
                                                        c.shared_h[e], g.hidden, width},
                                                       g.split_epilogue_launch())));
        if (outputs) {
            MOK_RETURN_IF_ERROR(timed(g, "shared_down",
                                      gemm::down_projection({g.shared, c.shared_h[e], bf16(w.down), s.shared_out[e],
                                                             g.hidden, nullptr, g.hidden, width},
                                                            g.split_epilogue_launch())));
        }
    }
    return Status::ok();
}

Status routed_dgrad_down(const RankGemms& g, const RankInputs& in) {
    const ContextBuffers& c = g.context;
    const ScratchBuffers& s = g.scratch;
    return timed(g, "dgrad_down",
                 gemm::dgrad_down({g.routed, s.grad_rows, bf16(in.experts.down), c.gu, c.row_weight, s.dgu, s.partials,
                                   g.hidden, g.width, g.routed_dgrad_down_consumer_rows},
                                  g.dgrad_down_launch()));
}

Status routed_backward_to_dx(const RankGemms& g, const RankInputs& in) {
    const ScratchBuffers& s = g.scratch;
    const cudaStream_t stream = g.launch.stream;
    MOK_RETURN_IF_ERROR(timed(g, "reduce_router_partials",
                              gemm::reduce_router_partials(g.routed, s.partials, gemm::router_partial_tiles(g.width),
                                                           s.d_row_weight, stream)));
    return timed(g, "dgrad_gate_up",
                 gemm::dgrad_gate_up({g.routed, s.dgu, bf16(in.experts.gate), bf16(in.experts.up), s.out_rows, g.hidden,
                                      nullptr, g.hidden, g.width},
                                     g.split_epilogue_launch()));
}

Status routed_weight_grad_down(const RankGemms& g, const BackwardArgs& args) {
    const ContextBuffers& c = g.context;
    const ScratchBuffers& s = g.scratch;
    const gemm::WeightGradMode mode = weight_grad_mode(args);
    // In place: each element of a dy row is read and then overwritten by the thread that scales it, and the dy rows
    // are not read again (routed_dgrad_down has run), so dW_down needs no buffer of its own.
    MOK_RETURN_IF_ERROR(
        timed(g, "scale_rows",
              gemm::scale_rows(g.routed, s.grad_rows, c.row_weight, s.grad_rows, g.hidden, g.launch.stream)));
    return timed(g, "weight_grad_down",
                 gemm::weight_grad_down({g.routed, s.grad_rows, c.h, args.d_experts.down.data, mode, g.hidden, g.width,
                                         g.routed_main_grad_update},
                                        weight_grad_launch(g, mode)));
}

Status routed_weight_grad_gate_up(const RankGemms& g, const BackwardArgs& args) {
    return timed(g, "weight_grad_gate_up",
                 gemm::weight_grad_gate_up(
                     {g.routed, g.scratch.dgu, g.context.x_rows, args.d_experts.gate.data, args.d_experts.up.data,
                      weight_grad_mode(args), g.hidden, g.width, g.routed_main_grad_update},
                     weight_grad_launch(g, weight_grad_mode(args))));
}

// Shared experts, router weight 1: their scaled dy is dy itself (bf16(1 * v) = v), so dW_down reads dy.
Status shared_backward_dgrads(const RankGemms& g, const RankInputs& in) {
    const ContextBuffers& c = g.context;
    const ScratchBuffers& s = g.scratch;
    for (size_t e = 0; e < g.shared_widths.size(); ++e) {
        const SharedExpertWeights& w = in.shared[e];
        const auto width = static_cast<int32_t>(g.shared_widths[e]);
        MOK_RETURN_IF_ERROR(timed(
            g, "shared_dgrad_down",
            gemm::dgrad_down({g.shared, g.shared_dy, bf16(w.down), c.shared_gu[e], g.shared_row_weight, s.shared_dgu[e],
                              s.shared_partials, g.hidden, width, g.shared_dgrad_down_consumer_rows},
                             g.dgrad_down_launch())));
        MOK_RETURN_IF_ERROR(timed(g, "shared_dgrad_gate_up",
                                  gemm::dgrad_gate_up({g.shared, s.shared_dgu[e], bf16(w.gate), bf16(w.up),
                                                       s.shared_out[e], g.hidden, nullptr, g.hidden, width},
                                                      g.split_epilogue_launch())));
    }
    return Status::ok();
}

Status shared_weight_grads(const RankGemms& g, const BackwardArgs& args) {
    const ContextBuffers& c = g.context;
    const ScratchBuffers& s = g.scratch;
    const gemm::WeightGradMode mode = weight_grad_mode(args);
    for (size_t e = 0; e < g.shared_widths.size(); ++e) {
        const SharedExpertWeightGrads& d = args.d_shared[e];
        const auto width = static_cast<int32_t>(g.shared_widths[e]);
        MOK_RETURN_IF_ERROR(timed(g, "shared_weight_grad_down",
                                  gemm::weight_grad_down({g.shared_gated, g.shared_dy, c.shared_h[e], d.down.data, mode,
                                                          g.hidden, width, g.shared_main_grad_update},
                                                         weight_grad_launch(g, mode))));
        MOK_RETURN_IF_ERROR(
            timed(g, "shared_weight_grad_gate_up",
                  gemm::weight_grad_gate_up({g.shared_gated, s.shared_dgu[e], g.shared_x, d.gate.data, d.up.data, mode,
                                             g.hidden, width, g.shared_main_grad_update},
                                            weight_grad_launch(g, mode))));
    }
    return Status::ok();
}

}  // namespace mok::cuda
