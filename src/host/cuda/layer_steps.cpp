#include "host/cuda/layer_steps.hpp"

#include <optional>
#include <span>
#include <string>
#include <utility>

#include "device/comm/transport_launch.hpp"
#include "device/layer/row_gate.hpp"
#include "host/comm/transport_memory.hpp"
#include "host/cuda/cuda_status.hpp"
#include "host/cuda/expert_gemms.hpp"
#include "host/cuda/layer_buffers.hpp"

namespace mok::cuda {
namespace {

using layout::RingId;
using layout::TransportPass;

// Dispatch and push blocks per rank when Config leaves it to mok: the copy kernels fill NVLink at 12-16 SMs.
constexpr int32_t kDefaultCommBlocks = 16;
// GEMMs run on the side stream beside the transport only when they keep at least 1 / kMinOverlapSmShare of the
// SMs: with fewer (many virtual ranks' copy blocks on one GPU) they would be slower than running in order.
constexpr int32_t kMinOverlapSmShare = 2;
constexpr uint64_t kNanosPerMilli = 1'000'000;
constexpr int64_t kBf16Bytes = 2;

int32_t comm_blocks(int configured) {
    return configured > 0 ? configured : kDefaultCommBlocks;
}

using host::cuda_status;

// Elements between rows of a [rows, cols] view; a one-row view's stride is free (never stepped), so its width.
int64_t row_stride(const TensorView& view) {
    return view.shape[0] > 1 ? view.stride[0] : view.shape[1];
}

template <typename T>
T* as(const TensorView& view) {
    return static_cast<T*>(view.data);
}

template <typename Peers>
class StepsImpl final : public LayerSteps {
  public:
    StepsImpl(const StepsSetup& setup, std::vector<Peers> peers);

    Status forward(std::span<const RankInputs* const> inputs, std::span<const TensorView* const> y,
                   const CudaContext& context, cudaStream_t stream) override;
    Status backward(std::span<const RankInputs> inputs, std::span<const BackwardArgs> args, const CudaContext& context,
                    cudaStream_t stream) override;
    std::vector<DeviceStatus*> status_records() const override;

  private:
    int32_t num_ranks() const { return dims_.num_local_ranks; }
    int32_t rank_of(int32_t local) const { return dims_.first_local_rank + local; }
    char* window(int32_t local) const { return base_ + layout_.window_offset(local); }
    uint64_t timeout_ns() const { return static_cast<uint64_t>(config_.peer_timeout_ms) * kNanosPerMilli; }
    // Whether the forward's down projection stores its rows at their sources (ForwardCombine::kDownStores).
    bool down_stores() const {
        return config_.forward_combine == ForwardCombine::kDownStores ||
               (config_.forward_combine == ForwardCombine::kAuto && dims_.width >= kDownStoresMinWidth);
    }

    comm::LaunchGroup<Peers> launch_group(const CudaContext& context) const;
    // The row gate's launch. With `ready_pass` it also hands the pipelined GEMM the number the dispatch's ring
    // flags carry in that pass (RowGateRank::ready_sequence).
    layer::RowGateLaunch row_gate(const CudaContext& context, bool gather_weights,
                                  std::optional<TransportPass> ready_pass) const;
    RankGemms rank_gemms(int32_t local, const CudaContext& context, cudaStream_t stream) const;
    // A rank's GEMMs on the side stream with `num_sms` SMs; with `ring`, the routed row tiles wait for that ring's
    // readiness flags (the pipelined path: the rows are still arriving).
    RankGemms side_gemms(int32_t local, const CudaContext& context, int32_t num_sms, std::optional<RingId> ring) const;
    // Pushes each rank's output rows (forward: expert outputs; backward: dx rows with the d router weight per
    // row) and combines them into out[local] (and, backward, d_weights[local]); `d_weights` empty in a forward.
    // With `per_tile`, the push waits for each row tile's out_ready flag (the pipelined forward); without, the
    // whole output is already written (stream order).
    Status push_and_combine(const comm::LaunchGroup<Peers>& group, TransportPass pass,
                            std::span<const comm::RankRouting> routing, std::span<const TensorView* const> out,
                            std::span<const TensorView* const> d_weights, int32_t blocks, bool per_tile,
                            cudaStream_t stream);
    // The combine alone: push_and_combine's second half, after a down projection that stored its rows straight
    // into the combine rows (Config::forward_combine).
    Status combine(const comm::LaunchGroup<Peers>& group, TransportPass pass,
                   std::span<const comm::RankRouting> routing, std::span<const TensorView* const> out,
                   std::span<const TensorView* const> d_weights, cudaStream_t stream);
    // `g` with its routed down projection storing each row into its token's combine row and flagging it, once
    // its row tile is complete, with the row gate's number (Config::forward_combine).
    RankGemms to_sources(RankGemms g, int32_t local) const;
    // Copies each rank's own [T, H] rows into its window.
    Status stage_window(comm::SourceRows which, std::span<const TensorView* const> rows, cudaStream_t stream) const;
    // With shared experts: makes each rank's own [T, H] rows (x or dy; with `with_x`, x as well for the backward's
    // shared weight gradients) the shared experts' GEMM operands -- the caller's tensor itself where its rows are a
    // whole number of row tiles, dense and 16-byte aligned (shared_operand), otherwise a copy in the rank's dense
    // scratch -- and records which for rank_gemms. They need nothing else of the step's transport, so the pipelined
    // order makes any copies on the side stream, beside the window copy and the exchange on the main stream.
    // `written`, empty or one per rank: an output the pass writes before the shared experts' last read (the
    // backward's dx, before their weight gradients), which an operand read in place must not overlap.
    Status stage_dense(comm::SourceRows which, std::span<const TensorView* const> rows,
                       std::span<const RankInputs> with_x, std::span<const TensorView* const> written,
                       cudaStream_t stream);
    // `rows` as the shared experts' GEMMs can read it in place, or nullptr: a TMA operand of T_pad rows needs the
    // padding rows to exist (T a multiple of the row tile), rows one after another, and a 16-byte aligned start;
    // and no byte of it may be in `written` (nullptr: nothing).
    const __nv_bfloat16* shared_operand(const TensorView& rows, const TensorView* written) const;
    // SMs the side stream's GEMMs get while the transport's `comm_blocks` per rank copy, or 0 for the in-order
    // path: too few SMs would be left (many virtual ranks' copy blocks on one GPU), or stage times are recorded,
    // which charge each stage its own time only in one stream.
    int32_t overlap_sms(int32_t comm_blocks) const;
    // Forks the side stream from `stream`, runs body() (which enqueues on both streams and may fork again), and
    // joins the side stream back -- even when an enqueue failed, so that a capture of `stream` never ends with
    // the side stream's work unjoined.
    template <typename Body>
    Status with_side_stream(cudaStream_t stream, Body&& body);

    LayerDims dims_;
    Config config_;
    WorkspaceLayout layout_;
    layout::LocalLayout local_layout_;  // the plan shape the transport's launches read; its buffers are bound
                                        // per call (plan in the context, rings and flags in the workspace)
    char* base_;
    const LayerConstants* constants_;
    StageTimeline* timeline_;
    SideStream* side_stream_;
    int32_t num_sms_;
    std::vector<Peers> peers_;
    std::vector<layout::LocalBuffers> state_;  // per rank: its persistent local block (RankStateLayout)
    std::vector<uint64_t*> out_ready_;         // per rank: RankStateLayout::out_ready
    std::vector<ScratchBuffers> scratch_;
    // Per rank, the shared experts' x and dy operands of the current pass (stage_dense): the caller's rows or their
    // copies in scratch.
    std::vector<const __nv_bfloat16*> shared_x_;
    std::vector<const __nv_bfloat16*> shared_dy_;
};

template <typename Peers>
StepsImpl<Peers>::StepsImpl(const StepsSetup& setup, std::vector<Peers> peers)
    : dims_(setup.dims),
      config_(setup.config),
      layout_(setup.layout),
      local_layout_(layout::LocalLayout::make(
          setup.dims.plan_shape(setup.dims.first_local_rank, setup.config.minibatch_rows), setup.dims.hidden)),
      base_(setup.workspace->base()),
      constants_(setup.constants),
      timeline_(setup.timeline),
      side_stream_(setup.side_stream),
      num_sms_(setup.num_sms),
      peers_(std::move(peers)),
      shared_x_(static_cast<size_t>(num_ranks()), nullptr),
      shared_dy_(static_cast<size_t>(num_ranks()), nullptr) {
    for (int32_t local = 0; local < num_ranks(); ++local) {
        state_.push_back(layout::LocalBuffers::bind(layout_.state.local, base_ + layout_.state_offset(local)));
        out_ready_.push_back(
            reinterpret_cast<uint64_t*>(base_ + layout_.state_offset(local) + layout_.state.out_ready.offset));
        scratch_.push_back(ScratchBuffers::bind(layout_.scratch, base_ + layout_.scratch_offset(local)));
    }
}

template <typename Peers>
comm::LaunchGroup<Peers> StepsImpl<Peers>::launch_group(const CudaContext& context) const {
    comm::LaunchGroup<Peers> g;
    g.window = layout_.window;
    g.local = local_layout_;
    g.timeout_ns = timeout_ns();
    g.dispatch_pull = config_.dispatch_token_groups ? comm::DispatchPull::kTokenGroups : comm::DispatchPull::kEveryRow;
    g.num_ranks = num_ranks();
    for (int32_t local = 0; local < num_ranks(); ++local) {
        // The rank's persistent block, with the plan and the x rows in the context (the backward needs them after
        // other layers have used the workspace) and the dy rows in the scratch.
        layout::LocalBuffers b = state_[local];
        const ContextBuffers c = context.buffers(local);
        b.plan = c.plan;
        b.ring_rows[static_cast<int32_t>(RingId::kTokens)] = reinterpret_cast<uint16_t*>(c.x_rows);
        b.ring_rows[static_cast<int32_t>(RingId::kGrads)] = reinterpret_cast<uint16_t*>(scratch_[local].grad_rows);
        g.ranks[local] = comm::RankEndpoint<Peers>{peers_[local], window(local), b};
    }
    return g;
}

template <typename Peers>
layer::RowGateLaunch StepsImpl<Peers>::row_gate(const CudaContext& context, bool gather_weights,
                                                std::optional<TransportPass> ready_pass) const {
    layer::RowGateLaunch l;
    l.pass = ready_pass.value_or(TransportPass::kForward);
    l.window = layout_.window;
    l.num_local_experts = dims_.num_local_experts;
    l.tokens = dims_.tokens;
    l.padded_tokens = dims_.padded_tokens;
    l.capacity_rows = dims_.capacity_rows;
    l.num_ranks = num_ranks();
    for (int32_t local = 0; local < num_ranks(); ++local) {
        const ContextBuffers c = context.buffers(local);
        const ScratchBuffers& s = scratch_[local];
        layer::RowGateRank& r = l.ranks[local];
        r.status = state_[local].status;
        r.rank = rank_of(local);
        r.owner_padded_rows = c.plan.owner_padded_rows;
        r.expert_rows = c.plan.expert_rows;
        r.routed_rows = s.gate_rows + ScratchLayout::kGateRoutedRows;
        r.routed_segment_rows = s.gate_segment_rows;
        r.shared_rows = s.gate_rows + ScratchLayout::kGateSharedRows;
        r.shared_segment_rows = s.gate_rows + ScratchLayout::kGateSharedSegmentRows;
        r.control = state_[local].control;
        if (ready_pass.has_value()) {
            r.ready_sequence = s.ready_sequence;
        }
        if (gather_weights) {
            r.row_source = c.plan.row_source;
            r.window = window(local);
            r.row_weight = c.row_weight;
        }
    }
    return l;
}

template <typename Peers>
RankGemms StepsImpl<Peers>::rank_gemms(int32_t local, const CudaContext& context, cudaStream_t stream) const {
    const ContextBuffers c = context.buffers(local);
    const ScratchBuffers& s = scratch_[local];
    const int32_t first_expert = rank_of(local) * dims_.num_local_experts;
    RankGemms g;
    g.launch.stream = stream;
    g.launch.status = state_[local].status;
    g.launch.rank = rank_of(local);
    g.launch.timeout_ns = timeout_ns();
    g.launch.wave_counter = s.wave_counters + ScratchLayout::kMainWaveCounter;
    // gate/up's, down's, dgrad_gate_up's and the fresh weight gradients' epilogues run in the producer warpgroup's
    // spare warps, beside the next K loop (docs/gemm.md).
    g.split_epilogue_arrangement =
        config_.gemm_epilogue_warps ? gemm::Arrangement::kEpilogueWarps : gemm::Arrangement::kCooperative;
    // dgrad_down's too where its K loop is long enough to hide them (gemm::kDgradDownEpilogueWarpsMinHidden: every
    // model of the brief).
    // Otherwise dgrad_down, whose SwiGLU-backward epilogue is the longest, is the one form that gains from the
    // ping-pong arrangement (docs/gemm.md); the other forms lose 2-12% in it.
    const bool dgrad_down_split = config_.gemm_epilogue_warps && dims_.hidden >= gemm::kDgradDownEpilogueWarpsMinHidden;
    g.dgrad_down_arrangement = dgrad_down_split        ? gemm::Arrangement::kEpilogueWarps
                               : config_.gemm_pingpong ? gemm::Arrangement::kPingPong
                                                       : gemm::Arrangement::kCooperative;
    // The consumers' share of dgrad_down's rows pays where an expert's rows fill several tiles and costs where they
    // fill about one (gemm::kDgradDownConsumerRows): decided from the routed experts' mean rows (T R k / E) and the
    // shared experts' T.
    const auto consumer_rows_for = [](int64_t rows_per_expert) {
        return rows_per_expert >= gemm::kDgradDownConsumerRowsMinRowsPerExpert ? gemm::kDgradDownConsumerRows : 0;
    };
    const int64_t routed_rows_per_expert = dims_.tokens * dims_.ep_size * dims_.top_k / dims_.num_experts;
    g.routed_dgrad_down_consumer_rows = consumer_rows_for(routed_rows_per_expert);
    g.shared_dgrad_down_consumer_rows = consumer_rows_for(dims_.tokens);
    // Accumulate mode's reductions pay where the weight gradients' K loops (an expert's rows) are long, and cost where
    // main_grad's traffic bounds them (gemm::MainGradUpdate); decided from the same means.
    const auto main_grad_update_for = [](int64_t rows_per_expert) {
        return rows_per_expert >= gemm::kMainGradReductionMinRowsPerExpert ? gemm::MainGradUpdate::kReduction
                                                                           : gemm::MainGradUpdate::kLoadAddStore;
    };
    g.routed_main_grad_update = main_grad_update_for(routed_rows_per_expert);
    g.shared_main_grad_update = main_grad_update_for(dims_.tokens);
    g.routed.groups = {s.gate_rows + ScratchLayout::kGateRoutedRows, c.plan.tile_expert,
                       c.plan.segment_begin + first_expert, s.gate_segment_rows};
    g.routed.capacity_rows = static_cast<int32_t>(dims_.capacity_rows);
    g.routed.num_experts = dims_.num_local_experts;
    g.shared.groups = {constants_->shared_padded_rows(), constants_->shared_tile_expert(),
                       constants_->shared_segment_begin(), constants_->shared_segment_rows()};
    g.shared.capacity_rows = static_cast<int32_t>(dims_.padded_tokens);
    g.shared.num_experts = 1;
    g.shared_gated = g.shared;
    g.shared_gated.groups.num_padded_rows = s.gate_rows + ScratchLayout::kGateSharedRows;
    g.shared_gated.groups.segment_rows = s.gate_rows + ScratchLayout::kGateSharedSegmentRows;
    g.hidden = static_cast<int32_t>(dims_.hidden);
    g.width = static_cast<int32_t>(dims_.width);
    g.shared_widths = dims_.shared_widths;
    g.context = c;
    g.scratch = s;
    g.shared_row_weight = constants_->shared_row_weight();
    g.shared_x = shared_x_[local];
    g.shared_dy = shared_dy_[local];
    g.timeline = timeline_;
    return g;
}

template <typename Peers>
Status StepsImpl<Peers>::stage_window(comm::SourceRows which, std::span<const TensorView* const> rows,
                                      cudaStream_t stream) const {
    for (int32_t local = 0; local < num_ranks(); ++local) {
        const TensorView& view = *rows[local];
        MOK_RETURN_IF_ERROR(
            comm::stage_rows(window(local), layout_.window, which, view.data, row_stride(view), stream));
    }
    return Status::ok();
}

template <typename Peers>
Status StepsImpl<Peers>::stage_dense(comm::SourceRows which, std::span<const TensorView* const> rows,
                                     std::span<const RankInputs> with_x, std::span<const TensorView* const> written,
                                     cudaStream_t stream) {
    if (dims_.num_shared() == 0) {
        return Status::ok();
    }
    // The shared experts' GEMMs read whole 128-row tiles: dense copies in scratch whose tail rows are never used
    // as data (past the one segment's T rows).
    const auto row_bytes = static_cast<size_t>(dims_.hidden * kBf16Bytes);
    const auto num_rows = static_cast<size_t>(dims_.tokens);
    auto copy = [&](void* dense, const TensorView& view, const char* what) {
        // Dense rows are one 1D copy: the 2D copy of the same bytes took 0.02-0.04 ms longer at 4096 x 7168.
        if (row_stride(view) == dims_.hidden) {
            return cuda_status(
                cudaMemcpyAsync(dense, view.data, num_rows * row_bytes, cudaMemcpyDeviceToDevice, stream), what);
        }
        return cuda_status(
            cudaMemcpy2DAsync(dense, row_bytes, view.data, static_cast<size_t>(row_stride(view) * kBf16Bytes),
                              row_bytes, num_rows, cudaMemcpyDeviceToDevice, stream),
            what);
    };
    // The operand in place where it can be, else the copy; `out` records which.
    auto stage = [&](__nv_bfloat16* dense, const TensorView& view, const TensorView* not_in, const __nv_bfloat16** out,
                     const char* what) -> Status {
        *out = shared_operand(view, not_in);
        if (*out != nullptr) {
            return Status::ok();
        }
        *out = dense;
        return copy(dense, view, what);
    };
    for (int32_t local = 0; local < num_ranks(); ++local) {
        const ScratchBuffers& s = scratch_[local];
        const bool tokens = which == comm::SourceRows::kTokens;
        const TensorView* not_in = written.empty() ? nullptr : written[local];
        MOK_RETURN_IF_ERROR(stage(tokens ? s.dense_x : s.dense_dy, *rows[local], not_in,
                                  tokens ? &shared_x_[local] : &shared_dy_[local],
                                  "copying rows for the shared experts"));
        if (!with_x.empty()) {
            // The backward's shared dW_gate|up read x; the window's x rows may be another layer's by now.
            MOK_RETURN_IF_ERROR(
                stage(s.dense_x, with_x[local].x, not_in, &shared_x_[local], "copying x for the shared experts"));
        }
    }
    return Status::ok();
}

template <typename Peers>
const __nv_bfloat16* StepsImpl<Peers>::shared_operand(const TensorView& rows, const TensorView* written) const {
    constexpr uintptr_t kTmaAddressAlignment = 16;
    const bool whole_tiles = dims_.padded_tokens == dims_.tokens;
    const bool dense = row_stride(rows) == dims_.hidden;
    const bool aligned = reinterpret_cast<uintptr_t>(rows.data) % kTmaAddressAlignment == 0;
    const bool apart = written == nullptr || !rows.overlaps(*written);
    return whole_tiles && dense && aligned && apart ? as<const __nv_bfloat16>(rows) : nullptr;
}

template <typename Peers>
RankGemms StepsImpl<Peers>::side_gemms(int32_t local, const CudaContext& context, int32_t num_sms,
                                       std::optional<RingId> ring) const {
    RankGemms g = rank_gemms(local, context, side_stream_->stream());
    g.launch.num_sms = num_sms;
    g.launch.wave_counter = scratch_[local].wave_counters + ScratchLayout::kSideWaveCounter;
    if (ring.has_value()) {
        g.routed.groups.tile_ready = state_[local].ring_ready[static_cast<int32_t>(*ring)];
        g.routed.groups.ready_sequence = scratch_[local].ready_sequence;
    }
    return g;
}

template <typename Peers>
int32_t StepsImpl<Peers>::overlap_sms(int32_t comm_blocks) const {
    const int32_t free_sms = num_sms_ - num_ranks() * comm_blocks;
    if (timeline_->enabled() || free_sms * kMinOverlapSmShare < num_sms_) {
        return 0;
    }
    return free_sms;
}

template <typename Peers>
template <typename Body>
Status StepsImpl<Peers>::with_side_stream(cudaStream_t stream, Body&& body) {
    MOK_RETURN_IF_ERROR(side_stream_->fork(stream));
    const Status enqueued = body();
    const Status joined = side_stream_->join(stream);
    MOK_RETURN_IF_ERROR(enqueued);
    return joined;
}

template <typename Peers>
Status StepsImpl<Peers>::forward(std::span<const RankInputs* const> inputs, std::span<const TensorView* const> y,
                                 const CudaContext& context, cudaStream_t stream) {
    const bool outputs = !y.empty();
    const comm::LaunchGroup<Peers> group = launch_group(context);
    std::vector<const TensorView*> x;
    std::vector<comm::RankRouting> routing;
    for (const RankInputs* in : inputs) {
        x.push_back(&in->x);
        routing.push_back({as<const int32_t>(in->expert_ids), as<const float>(in->router_weights)});
    }
    timeline_->begin(outputs ? "forward" : "recompute", stream);
    // The x rows go into the window before the exchange, whose route-ready flag also announces them.
    auto stage_x = [&] { return stage_window(comm::SourceRows::kTokens, x, stream); };
    const int32_t blocks = comm_blocks(config_.num_comm_sms_forward);
    const int32_t side_sms = overlap_sms(blocks);
    // Recompute has no down projection; otherwise Config::forward_combine picks the combine's way in.
    const bool direct = outputs && down_stores();
    auto exchange_and_plan = [&] {
        MOK_RETURN_IF_ERROR(timeline_->record("routing_exchange", stream,
                                              comm::enqueue_routing_exchange(group, routing.data(), stream)));
        return timeline_->record("plan", stream, comm::enqueue_plan(group, stream));
    };
    auto dispatch = [&] {
        return timeline_->record(
            "dispatch", stream,
            comm::enqueue_dispatch(group, TransportPass::kForward, RingId::kTokens, blocks, stream));
    };
    if (side_sms == 0) {
        // In order, on one stream: every kernel after the one before it.
        auto stage_all = [&]() -> Status {
            MOK_RETURN_IF_ERROR(stage_x());
            return stage_dense(comm::SourceRows::kTokens, x, {}, {}, stream);
        };
        MOK_RETURN_IF_ERROR(timeline_->record("stage_x", stream, stage_all()));
        MOK_RETURN_IF_ERROR(exchange_and_plan());
        MOK_RETURN_IF_ERROR(dispatch());
        // The direct down projection's flags carry the number the row gate writes.
        const std::optional<TransportPass> number =
            direct ? std::optional<TransportPass>(TransportPass::kForward) : std::nullopt;
        MOK_RETURN_IF_ERROR(
            timeline_->record("row_gate", stream, layer::enqueue_row_gate(row_gate(context, true, number), stream)));
        if (direct) {
            MOK_RETURN_IF_ERROR(comm::enqueue_combine_targets(group, stream));
        }
        for (int32_t local = 0; local < num_ranks(); ++local) {
            const RankGemms g = rank_gemms(local, context, stream);
            MOK_RETURN_IF_ERROR(routed_gate_up(g, *inputs[local]));
            if (outputs) {
                MOK_RETURN_IF_ERROR(routed_down(direct ? to_sources(g, local) : g, *inputs[local]));
            }
        }
        for (int32_t local = 0; local < num_ranks(); ++local) {
            MOK_RETURN_IF_ERROR(shared_forward_gemms(rank_gemms(local, context, stream), *inputs[local], outputs));
        }
    } else {
        // Pipelined (docs/layer.md, "Kernel sequence"): the shared experts need only the staged x, so the side
        // stream starts them at once; the row gate then runs before the dispatch, and the routed gate/up GEMM on
        // the side stream loads each row tile as soon as the dispatch publishes it, on the SMs the dispatch leaves.
        MOK_RETURN_IF_ERROR(with_side_stream(stream, [&] {
            MOK_RETURN_IF_ERROR(stage_dense(comm::SourceRows::kTokens, x, {}, {}, side_stream_->stream()));
            for (int32_t local = 0; local < num_ranks(); ++local) {
                MOK_RETURN_IF_ERROR(
                    shared_forward_gemms(side_gemms(local, context, side_sms, std::nullopt), *inputs[local], outputs));
            }
            MOK_RETURN_IF_ERROR(stage_x());
            MOK_RETURN_IF_ERROR(exchange_and_plan());
            MOK_RETURN_IF_ERROR(layer::enqueue_row_gate(row_gate(context, true, TransportPass::kForward), stream));
            if (direct) {
                MOK_RETURN_IF_ERROR(comm::enqueue_combine_targets(group, stream));
            }
            MOK_RETURN_IF_ERROR(side_stream_->fork(stream));  // the side stream waits for the row gate
            for (int32_t local = 0; local < num_ranks(); ++local) {
                MOK_RETURN_IF_ERROR(
                    routed_gate_up(side_gemms(local, context, side_sms, RingId::kTokens), *inputs[local]));
            }
            if (direct) {
                // The down projection stores its rows straight into the sources' combine rows: with no push beside
                // it, it waits for the dispatch too and runs on every SM; the combine follows the join.
                MOK_RETURN_IF_ERROR(dispatch());
                MOK_RETURN_IF_ERROR(side_stream_->fork(stream));
                for (int32_t local = 0; local < num_ranks(); ++local) {
                    MOK_RETURN_IF_ERROR(routed_down(
                        to_sources(side_gemms(local, context, num_sms_, std::nullopt), local), *inputs[local]));
                }
                return Status::ok();
            }
            // The down projection publishes each finished row tile, and the push (on the main stream, after the
            // dispatch) sends it as soon as it is published.
            for (int32_t local = 0; local < num_ranks() && outputs; ++local) {
                RankGemms g = side_gemms(local, context, side_sms, std::nullopt);
                g.publish = {scratch_[local].out_tile_counts, out_ready_[local], scratch_[local].ready_sequence};
                MOK_RETURN_IF_ERROR(routed_down(g, *inputs[local]));
            }
            MOK_RETURN_IF_ERROR(dispatch());
            if (!outputs) {
                return Status::ok();
            }
            return push_and_combine(group, TransportPass::kForward, routing, y, {}, blocks, true, stream);
        }));
        if (direct) {
            return combine(group, TransportPass::kForward, routing, y, {}, stream);
        }
        if (outputs) {
            return Status::ok();
        }
    }
    if (!outputs) {
        // Nothing of the recompute waits for the peers after its dispatch (no push, no combine): the barrier
        // keeps each peer from restaging its x rows for its next step until every owner has pulled them.
        return timeline_->record("barrier", stream, comm::enqueue_barrier(group, stream));
    }
    if (direct) {
        return combine(group, TransportPass::kForward, routing, y, {}, stream);
    }
    return push_and_combine(group, TransportPass::kForward, routing, y, {}, blocks, false, stream);
}

template <typename Peers>
Status StepsImpl<Peers>::backward(std::span<const RankInputs> inputs, std::span<const BackwardArgs> args,
                                  const CudaContext& context, cudaStream_t stream) {
    const comm::LaunchGroup<Peers> group = launch_group(context);
    std::vector<const TensorView*> dy;
    std::vector<comm::RankRouting> routing;
    for (int32_t local = 0; local < num_ranks(); ++local) {
        dy.push_back(&args[local].dy);
        routing.push_back({as<const int32_t>(inputs[local].expert_ids), as<const float>(inputs[local].router_weights)});
    }
    timeline_->begin("backward", stream);
    const int32_t blocks = comm_blocks(config_.num_comm_sms_backward);
    const int32_t side_sms = overlap_sms(blocks);
    auto stage_dy = [&] { return stage_window(comm::SourceRows::kGrads, dy, stream); };
    // A step of its own: the exchange advances the step, so that this backward's flags carry numbers no earlier
    // pass used (another layer's backward may have run since this layer's forward). The barrier then stands in
    // for the planner's wait on every peer's exchange, which keeps a fast rank from overwriting exchange slots a
    // slow rank's planner still reads (docs/layer.md, "Steps").
    auto exchange_and_announce = [&] {
        MOK_RETURN_IF_ERROR(timeline_->record("routing_exchange", stream,
                                              comm::enqueue_routing_exchange(group, routing.data(), stream)));
        MOK_RETURN_IF_ERROR(comm::enqueue_barrier(group, stream));
        return timeline_->record("barrier_and_announce", stream, comm::enqueue_grads_announce(group, stream));
    };
    auto dispatch = [&] {
        return timeline_->record(
            "dispatch", stream,
            comm::enqueue_dispatch(group, TransportPass::kBackwardGrads, RingId::kGrads, blocks, stream));
    };
    std::vector<const TensorView*> dx;
    std::vector<const TensorView*> d_weights;
    for (const BackwardArgs& a : args) {
        dx.push_back(&a.dx);
        d_weights.push_back(&a.d_router_weights);
    }
    auto push = [&] {
        return push_and_combine(group, TransportPass::kBackwardGrads, routing, dx, d_weights, blocks, false, stream);
    };
    if (side_sms == 0) {
        MOK_RETURN_IF_ERROR(stage_dy());
        MOK_RETURN_IF_ERROR(stage_dense(comm::SourceRows::kGrads, dy, inputs, dx, stream));
        timeline_->mark("stage_dy", stream);
        MOK_RETURN_IF_ERROR(exchange_and_announce());
        MOK_RETURN_IF_ERROR(dispatch());
        MOK_RETURN_IF_ERROR(timeline_->record("row_gate", stream,
                                              layer::enqueue_row_gate(row_gate(context, false, std::nullopt), stream)));
        for (int32_t local = 0; local < num_ranks(); ++local) {
            const RankGemms g = rank_gemms(local, context, stream);
            MOK_RETURN_IF_ERROR(routed_dgrad_down(g, inputs[local]));
            MOK_RETURN_IF_ERROR(routed_backward_to_dx(g, inputs[local]));
            MOK_RETURN_IF_ERROR(routed_weight_grad_down(g, args[local]));
            MOK_RETURN_IF_ERROR(routed_weight_grad_gate_up(g, args[local]));
        }
        for (int32_t local = 0; local < num_ranks(); ++local) {
            MOK_RETURN_IF_ERROR(shared_backward_dgrads(rank_gemms(local, context, stream), inputs[local]));
        }
        for (int32_t local = 0; local < num_ranks(); ++local) {
            MOK_RETURN_IF_ERROR(shared_weight_grads(rank_gemms(local, context, stream), args[local]));
        }
        return push();
    }
    // Pipelined, as in the forward: the shared experts' dgrads need only the staged dy and x and the context; the
    // routed dgrad_down loads each dy row tile as the dispatch publishes it.
    MOK_RETURN_IF_ERROR(with_side_stream(stream, [&] {
        MOK_RETURN_IF_ERROR(stage_dense(comm::SourceRows::kGrads, dy, inputs, dx, side_stream_->stream()));
        for (int32_t local = 0; local < num_ranks(); ++local) {
            MOK_RETURN_IF_ERROR(
                shared_backward_dgrads(side_gemms(local, context, side_sms, std::nullopt), inputs[local]));
        }
        MOK_RETURN_IF_ERROR(stage_dy());
        MOK_RETURN_IF_ERROR(exchange_and_announce());
        MOK_RETURN_IF_ERROR(layer::enqueue_row_gate(row_gate(context, false, TransportPass::kBackwardGrads), stream));
        MOK_RETURN_IF_ERROR(side_stream_->fork(stream));  // the side stream waits for the row gate
        for (int32_t local = 0; local < num_ranks(); ++local) {
            MOK_RETURN_IF_ERROR(routed_dgrad_down(side_gemms(local, context, side_sms, RingId::kGrads), inputs[local]));
        }
        return dispatch();
    }));
    // The row gate again, now after the dispatch: a dispatch that failed (a peer timeout) zeroes the row counts, so
    // that the weight gradients below add nothing to main_grad, as on the in-order path.
    MOK_RETURN_IF_ERROR(layer::enqueue_row_gate(row_gate(context, false, std::nullopt), stream));
    for (int32_t local = 0; local < num_ranks(); ++local) {
        MOK_RETURN_IF_ERROR(routed_backward_to_dx(rank_gemms(local, context, stream), inputs[local]));
    }
    // The dx rows are complete: the push and the combine run beside the routed dW_down, which reads neither them
    // nor dg|du, on the SMs the push leaves. A persistent grid cannot grow onto the copy SMs once the push is done,
    // so the side gets the shortest of the remaining GEMMs, and the weight gradients of gate/up and of the shared
    // experts (about two thirds of the remaining GEMM time for DeepSeek-V3) run after the join, on every SM.
    MOK_RETURN_IF_ERROR(with_side_stream(stream, [&] {
        for (int32_t local = 0; local < num_ranks(); ++local) {
            MOK_RETURN_IF_ERROR(
                routed_weight_grad_down(side_gemms(local, context, side_sms, std::nullopt), args[local]));
        }
        return push();
    }));
    for (int32_t local = 0; local < num_ranks(); ++local) {
        const RankGemms g = rank_gemms(local, context, stream);
        MOK_RETURN_IF_ERROR(routed_weight_grad_gate_up(g, args[local]));
        MOK_RETURN_IF_ERROR(shared_weight_grads(g, args[local]));
    }
    return Status::ok();
}

template <typename Peers>
Status StepsImpl<Peers>::push_and_combine(const comm::LaunchGroup<Peers>& group, TransportPass pass,
                                          std::span<const comm::RankRouting> routing,
                                          std::span<const TensorView* const> out,
                                          std::span<const TensorView* const> d_weights, int32_t blocks, bool per_tile,
                                          cudaStream_t stream) {
    const bool backward = pass == TransportPass::kBackwardGrads;
    std::vector<comm::PushSource> sources(static_cast<size_t>(num_ranks()));
    for (int32_t local = 0; local < num_ranks(); ++local) {
        sources[local].out_rows = scratch_[local].out_rows;
        sources[local].out_ready = per_tile ? out_ready_[local] : nullptr;
        sources[local].out_ring_rows = dims_.capacity_rows;
        sources[local].weight_grads = backward ? scratch_[local].d_row_weight : nullptr;
    }
    MOK_RETURN_IF_ERROR(
        timeline_->record("push", stream, comm::enqueue_push(group, pass, sources.data(), blocks, stream)));
    return combine(group, pass, routing, out, d_weights, stream);
}

template <typename Peers>
Status StepsImpl<Peers>::combine(const comm::LaunchGroup<Peers>& group, TransportPass pass,
                                 std::span<const comm::RankRouting> routing, std::span<const TensorView* const> out,
                                 std::span<const TensorView* const> d_weights, cudaStream_t stream) {
    const bool backward = pass == TransportPass::kBackwardGrads;
    std::vector<comm::CombineTarget> targets(static_cast<size_t>(num_ranks()));
    for (int32_t local = 0; local < num_ranks(); ++local) {
        comm::CombineTarget& t = targets[local];
        t.expert_ids = routing[local].expert_ids;
        t.router_weights = routing[local].router_weights;
        t.shared_rows = constants_->shared_rows(local);
        t.num_shared = dims_.num_shared();
        t.shared_row_stride = dims_.hidden;
        t.out = as<uint16_t>(*out[local]);
        t.out_row_stride = row_stride(*out[local]);
        t.weight_grads_out = backward ? as<float>(*d_weights[local]) : nullptr;
    }
    return timeline_->record("combine", stream, comm::enqueue_combine(group, pass, targets.data(), stream));
}

template <typename Peers>
RankGemms StepsImpl<Peers>::to_sources(RankGemms g, int32_t local) const {
    g.publish = {scratch_[local].out_tile_counts, nullptr, scratch_[local].ready_sequence};
    // The rank's own record: a step that failed before the down projection (a dispatch that timed out, when the
    // row gate ran before it) sends other ranks no flags.
    g.to_sources = {g.context.plan.row_source, reinterpret_cast<__nv_bfloat16* const*>(state_[local].combine_rank_rows),
                    state_[local].combine_rank_flags, state_[local].status};
    return g;
}

template <typename Peers>
std::vector<DeviceStatus*> StepsImpl<Peers>::status_records() const {
    std::vector<DeviceStatus*> records;
    for (const layout::LocalBuffers& s : state_) {
        records.push_back(s.status);
    }
    return records;
}

}  // namespace

std::unique_ptr<LayerSteps> make_virtual_steps(const StepsSetup& setup) {
    std::vector<comm::VirtualPeers> peers;
    for (int32_t rank = 0; rank < setup.dims.ep_size; ++rank) {
        peers.push_back(
            comm::VirtualPeers{setup.workspace->base(), setup.layout.window.window_bytes, rank, setup.dims.ep_size});
    }
    return std::make_unique<StepsImpl<comm::VirtualPeers>>(setup, std::move(peers));
}

std::unique_ptr<LayerSteps> make_nccl_steps(const StepsSetup& setup) {
    return std::make_unique<StepsImpl<comm::NcclPeers>>(
        setup, std::vector<comm::NcclPeers>{setup.workspace->nccl_window()->peers()});
}

}  // namespace mok::cuda
