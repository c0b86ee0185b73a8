#include "host/cuda/layer_layout.hpp"

#include <algorithm>

#include "device/gemm/grouped_gemm.hpp"

namespace mok::cuda {
namespace {

constexpr uint64_t kBf16Bytes = 2;

uint64_t bf16_bytes(int64_t rows, int64_t cols) {
    return static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) * kBf16Bytes;
}

}  // namespace

LayerDims LayerDims::of(const LayerOptions& options) {
    const LayerShape& s = options.shape;
    const Topology& t = options.topology;
    LayerDims d;
    d.ep_size = t.ep_size;
    d.num_local_ranks = t.num_local_ranks;
    d.first_local_rank = t.first_local_rank;
    d.tokens = s.tokens_per_rank;
    d.padded_tokens = plan::round_up(s.tokens_per_rank, plan::kExpertRowAlignment);
    d.hidden = s.hidden;
    d.width = s.expert_width;
    d.num_experts = static_cast<int32_t>(s.num_experts);
    d.num_local_experts = static_cast<int32_t>(s.num_experts / t.ep_size);
    d.top_k = static_cast<int32_t>(s.top_k);
    d.shared_widths = s.shared_expert_widths;
    d.capacity_rows = plan::schedule_capacity_rows(d.ep_size, d.tokens, d.top_k, d.num_local_experts,
                                                   options.config.schedule_capacity_factor);
    d.worst_case_rows = plan::worst_case_rows(d.ep_size, d.tokens, d.top_k, d.num_local_experts);
    return d;
}

int64_t LayerDims::max_shared_width() const {
    int64_t widest = 0;
    for (int64_t w : shared_widths) {
        widest = std::max(widest, w);
    }
    return widest;
}

layout::TransportShape LayerDims::transport_shape() const {
    return {ep_size, tokens, hidden, top_k};
}

plan::PlanShape LayerDims::plan_shape(int32_t rank, int64_t minibatch_rows) const {
    plan::PlanShape p;
    p.ep_size = ep_size;
    p.rank = rank;
    p.tokens_per_rank = tokens;
    p.top_k = top_k;
    p.num_experts = num_experts;
    p.capacity_rows = capacity_rows;
    // Minibatches signal between dispatch and the GEMMs only in a pipelined step; the standalone step's kernels
    // are ordered by the stream, so the knob has nothing to act on here.
    p.minibatch_rows = minibatch_rows;
    // The ring holds every row of the table: the forward's dispatched rows are the backward's A operand of
    // dW_gate|up, so they must all survive until then.
    p.ring_rows = capacity_rows;
    return p;
}

TransportStateKey TransportStateKey::of(const LayerDims& d) {
    return {d.ep_size, d.num_local_ranks, d.first_local_rank, d.tokens, d.hidden, d.top_k, d.num_local_experts};
}

std::string TransportStateKey::describe() const {
    return "T " + std::to_string(tokens) + ", H " + std::to_string(hidden) + ", k " + std::to_string(top_k) + ", E/R " +
           std::to_string(num_local_experts) + ", EP " + std::to_string(ep_size) + " (local ranks " +
           std::to_string(first_local_rank) + ".." + std::to_string(first_local_rank + num_local_ranks - 1) + ")";
}

RankStateLayout RankStateLayout::make(const LayerDims& d) {
    plan::PlanShape p = d.plan_shape(0, plan::kExpertRowAlignment);
    p.capacity_rows = d.worst_case_rows;
    p.ring_rows = plan::kExpertRowAlignment;
    RankStateLayout l;
    l.local = layout::LocalLayout::make(p, d.hidden);
    const uint64_t out_ready_at = layout::align_up(l.local.total_bytes, layout::kRegionAlignment);
    const uint64_t tiles = static_cast<uint64_t>(d.worst_case_rows / plan::kExpertRowAlignment);
    l.out_ready = Region{out_ready_at, tiles * sizeof(uint64_t)};
    l.bytes = layout::align_up(l.out_ready.end(), layout::kRegionAlignment);
    return l;
}

ScratchLayout ScratchLayout::make(const LayerDims& d) {
    ScratchLayout l;
    layout::RegionAllocator a;
    const bool shared = d.num_shared() > 0;
    const auto partial_tiles = [](int64_t width) {
        return static_cast<uint64_t>(gemm::router_partial_tiles(static_cast<int32_t>(width)));
    };
    l.dense_x = a.take(shared ? bf16_bytes(d.padded_tokens, d.hidden) : 0);
    l.dense_dy = a.take(shared ? bf16_bytes(d.padded_tokens, d.hidden) : 0);
    l.grad_rows = a.take(bf16_bytes(d.capacity_rows, d.hidden));
    l.out_rows = a.take(bf16_bytes(d.capacity_rows, d.hidden));
    l.dgu = a.take(bf16_bytes(d.capacity_rows, 2 * d.width));
    l.partials = a.take(static_cast<uint64_t>(d.capacity_rows) * partial_tiles(d.width) * sizeof(float));
    l.d_row_weight = a.take(static_cast<uint64_t>(d.capacity_rows) * sizeof(float));
    for (int32_t s = 0; s < d.num_shared(); ++s) {
        l.shared_out.push_back(a.take(bf16_bytes(d.padded_tokens, d.hidden)));
    }
    for (int64_t width : d.shared_widths) {
        l.shared_dgu.push_back(a.take(bf16_bytes(d.padded_tokens, 2 * width)));
    }
    l.shared_partials = a.take(
        shared ? static_cast<uint64_t>(d.padded_tokens) * partial_tiles(d.max_shared_width()) * sizeof(float) : 0);
    l.gate_rows = a.take(kGateWords * sizeof(int32_t));
    l.wave_counters = a.take(kWaveCounters * sizeof(uint32_t));
    l.ready_sequence = a.take(sizeof(uint64_t));
    l.out_tile_counts = a.take(static_cast<uint64_t>(d.capacity_rows / plan::kExpertRowAlignment) * sizeof(uint32_t));
    l.gate_segment_rows = a.take(static_cast<uint64_t>(d.num_local_experts) * sizeof(int32_t));
    l.bytes = a.next;
    return l;
}

ContextLayout ContextLayout::make(const LayerDims& d) {
    ContextLayout l;
    const plan::PlanTableSizes n = plan::table_sizes(d.plan_shape(0, plan::kExpertRowAlignment));
    layout::RegionAllocator a;
    l.plan_tables = layout::PlanRegions::take(a, n);
    l.row_weight = a.take(static_cast<uint64_t>(d.capacity_rows) * sizeof(float));
    l.x_rows = a.take(bf16_bytes(d.capacity_rows, d.hidden));
    l.gu = a.take(bf16_bytes(d.capacity_rows, 2 * d.width));
    l.h = a.take(bf16_bytes(d.capacity_rows, d.width));
    for (int64_t width : d.shared_widths) {
        l.shared_gu.push_back(a.take(bf16_bytes(d.padded_tokens, 2 * width)));
        l.shared_h.push_back(a.take(bf16_bytes(d.padded_tokens, width)));
    }
    l.bytes = a.next;
    return l;
}

WorkspaceLayout WorkspaceLayout::make(const LayerDims& d) {
    WorkspaceLayout l;
    l.window = layout::SymmetricLayout::make(d.transport_shape());
    l.state = RankStateLayout::make(d);
    l.scratch = ScratchLayout::make(d);
    const auto ranks = static_cast<uint64_t>(d.num_local_ranks);
    l.states_offset_ = ranks * l.window.window_bytes;
    l.persistent_bytes = l.states_offset_ + ranks * l.state.bytes;
    l.total_bytes = l.persistent_bytes + ranks * l.scratch.bytes;
    return l;
}

uint64_t WorkspaceLayout::state_offset(int32_t local_rank) const {
    return states_offset_ + static_cast<uint64_t>(local_rank) * state.bytes;
}

uint64_t WorkspaceLayout::scratch_offset(int32_t local_rank) const {
    return persistent_bytes + static_cast<uint64_t>(local_rank) * scratch.bytes;
}

}  // namespace mok::cuda
