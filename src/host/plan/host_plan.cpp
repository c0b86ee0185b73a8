#include "host/plan/host_plan.hpp"

#include <algorithm>

namespace mok::plan {

PlanTables HostPlan::tables() {
    return PlanTables{chunk_counts.data(),      chunk_offsets.data(),
                      expert_rows.data(),       segment_begin.data(),
                      owner_padded_rows.data(), row_source.data(),
                      tile_expert.data(),       slot_location.data(),
                      owned_slot_rows.data(),   &status};
}

int64_t HostPlan::local_expert_rows(int32_t local_expert) const {
    return expert_rows[shape.rank * shape.num_local_experts() + local_expert];
}

int64_t HostPlan::local_expert_begin(int32_t local_expert) const {
    return segment_begin[shape.rank * shape.num_local_experts() + local_expert];
}

void build_host_plan(const PlanShape& shape, std::span<const int32_t* const> all_ids, HostPlan* plan) {
    const PlanTableSizes sizes = table_sizes(shape);
    plan->shape = shape;
    plan->chunk_counts.assign(sizes.chunk_entries, 0);
    plan->chunk_offsets.assign(sizes.chunk_entries, 0);
    plan->expert_rows.assign(sizes.experts, 0);
    plan->segment_begin.assign(sizes.experts, 0);
    plan->owner_padded_rows.assign(sizes.ranks, 0);
    plan->row_source.assign(sizes.rows, RowSource::padding());
    plan->tile_expert.assign(sizes.tiles, -1);
    plan->slot_location.assign(sizes.slots, SlotLocation{-1, -1});
    plan->owned_slot_rows.assign(sizes.all_slots, -1);
    plan->status = static_cast<int32_t>(PlanStatus::kOk);
    const PlanTables t = plan->tables();

    // 1. Counts per (expert, source rank, chunk).
    for (int32_t r = 0; r < shape.ep_size; ++r) {
        for (int32_t c = 0; c < shape.num_chunks(); ++c) {
            count_chunk(shape, all_ids[r], c, [&](int32_t e) { ++t.chunk_counts[shape.chunk_index(e, r, c)]; });
        }
    }
    // 2. Offsets in canonical order, 3. segment layout of every owner (every rank needs every owner's layout
    // to locate its own slots).
    for (int32_t e = 0; e < shape.num_experts; ++e) {
        scan_expert(shape, e, t);
    }
    for (int32_t owner = 0; owner < shape.ep_size; ++owner) {
        const PlanStatus owner_status = layout_owner(shape, owner, t);
        if (owner == shape.rank && owner_status != PlanStatus::kOk) {
            plan->status = static_cast<int32_t>(owner_status);
        }
    }
    // 4. This rank as owner: the source of each of its rows; as source: where each of its slots goes.
    for (int32_t r = 0; r < shape.ep_size; ++r) {
        for (int64_t token = 0; token < shape.tokens_per_rank; ++token) {
            for (int32_t slot = 0; slot < shape.top_k; ++slot) {
                const SlotLocation where = locate_slot(shape, all_ids[r], r, token, slot, t);
                if (where.rank == shape.rank) {
                    place_slot(shape, r, token, slot, where, t);
                }
                record_owned_slot(shape, r, token, slot, where, t);
                if (r == shape.rank) {
                    t.slot_location[token * shape.top_k + slot] = where;
                }
            }
        }
    }
    for (int32_t l = 0; l < shape.num_local_experts(); ++l) {
        fill_segment_tail(shape, l, t);
    }
    for (int64_t tile = 0; tile < sizes.tiles; ++tile) {
        clear_tile(shape, tile, t);
    }
}

}  // namespace mok::plan
