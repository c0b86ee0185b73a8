#include "comm/rank_data.hpp"

namespace mok::comm::testing {
namespace {

std::vector<uint16_t> concat(const std::vector<std::vector<uint16_t>>& parts) {
    std::vector<uint16_t> all;
    for (const auto& part : parts) {
        all.insert(all.end(), part.begin(), part.end());
    }
    return all;
}

std::vector<const uint16_t*> row_pointers(const DeviceBuffer<uint16_t>& all, int32_t count, int64_t stride) {
    std::vector<const uint16_t*> pointers;
    for (int32_t s = 0; s < count; ++s) {
        pointers.push_back(all.data() + s * stride);
    }
    return pointers;
}

}  // namespace

void RankDeviceData::upload(const TransportProblem& problem, int32_t rank, int64_t ring_rows) {
    const TransportCase& c = problem.c;
    const RankData& d = problem.ranks[rank];
    const int64_t rows = c.tokens_per_rank * c.hidden;
    num_shared = c.num_shared;
    out_ring_rows = ring_rows;
    expert_ids.upload(d.expert_ids);
    router_weights.upload(d.router_weights);
    x.upload(d.x);
    dy.upload(d.dy);
    shared_out.upload(concat(d.shared_out));
    shared_dx.upload(concat(d.shared_dx));
    shared_out_rows.upload(row_pointers(shared_out, c.num_shared, rows));
    shared_dx_rows.upload(row_pointers(shared_dx, c.num_shared, rows));
    captured.allocate(c.capacity() * c.hidden);
    out_rows.allocate(ring_rows * c.hidden);
    out_weight_grads.allocate(ring_rows);
    out_ready.allocate(c.capacity() / plan::kExpertRowAlignment);
    out_free.allocate(c.capacity() / plan::kExpertRowAlignment);
    y.allocate(rows);
    dx.allocate(rows);
    d_weights.allocate(d.expert_ids.size());
}

void RankDeviceData::poison() {
    captured.poison();
    out_rows.poison();
    out_weight_grads.poison();
    y.poison();
    dx.poison();
    d_weights.poison();
}

PushSource RankDeviceData::push_source(layout::TransportPass pass, bool per_tile_flags) const {
    PushSource source;
    source.out_rows = out_rows.data();
    source.out_ring_rows = out_ring_rows;
    source.out_ready = per_tile_flags ? out_ready.data() : nullptr;
    source.out_free = per_tile_flags ? out_free.data() : nullptr;
    source.weight_grads = pass == layout::TransportPass::kBackwardGrads ? out_weight_grads.data() : nullptr;
    return source;
}

CombineTarget RankDeviceData::combine_target(layout::TransportPass pass, int64_t hidden) const {
    const bool backward = pass == layout::TransportPass::kBackwardGrads;
    CombineTarget target;
    target.expert_ids = expert_ids.data();
    target.router_weights = router_weights.data();
    target.shared_rows = backward ? shared_dx_rows.data() : shared_out_rows.data();
    target.num_shared = num_shared;
    target.shared_row_stride = hidden;
    target.out = backward ? dx.data() : y.data();
    target.out_row_stride = hidden;
    target.weight_grads_out = backward ? d_weights.data() : nullptr;
    return target;
}

plan::HostPlan download_plan(const plan::PlanTables& t, const plan::PlanShape& shape) {
    const plan::PlanTableSizes n = plan::table_sizes(shape);
    plan::HostPlan p;
    p.shape = shape;
    p.chunk_counts = download(t.chunk_counts, n.chunk_entries);
    p.chunk_offsets = download(t.chunk_offsets, n.chunk_entries);
    p.expert_rows = download(t.expert_rows, n.experts);
    p.segment_begin = download(t.segment_begin, n.experts);
    p.owner_padded_rows = download(t.owner_padded_rows, n.ranks);
    p.row_source = download(t.row_source, n.rows);
    p.tile_expert = download(t.tile_expert, n.tiles);
    p.slot_location = download(t.slot_location, n.slots);
    p.owned_slot_rows = download(t.owned_slot_rows, n.all_slots);
    p.status = download(t.status, 1)[0];
    return p;
}

}  // namespace mok::comm::testing
