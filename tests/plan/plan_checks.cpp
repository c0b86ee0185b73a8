#include "plan/plan_checks.hpp"

#include <sstream>
#include <string>

namespace mok::plan::testing {
namespace {

using ::testing::AssertionFailure;
using ::testing::AssertionResult;
using ::testing::AssertionSuccess;

template <typename Got, typename Want>
AssertionResult mismatch(const std::string& what, int64_t index, const Got& got, const Want& want) {
    return AssertionFailure() << what << "[" << index << "]: got " << got << ", expected " << want;
}

std::string describe(RowSource r) {
    return r.is_padding()
               ? "padding"
               : "(rank " + std::to_string(r.src_rank) + ", token_slot " + std::to_string(r.token_slot) + ")";
}

std::string describe(SlotLocation l) {
    return "(rank " + std::to_string(l.rank) + ", row " + std::to_string(l.row) + ")";
}

}  // namespace

PlanShape plan_shape_for(const RoutingCase& routing, int32_t rank, int64_t capacity_rows) {
    PlanShape s;
    s.ep_size = routing.ep_size;
    s.rank = rank;
    s.tokens_per_rank = routing.tokens_per_rank;
    s.top_k = routing.top_k;
    s.num_experts = routing.num_experts;
    s.capacity_rows = capacity_rows;
    s.minibatch_rows = routing.minibatch_rows;
    s.ring_rows = routing.ring_rows;
    return s;
}

int64_t worst_case_capacity(const RoutingCase& routing) {
    return worst_case_rows(routing.ep_size, routing.tokens_per_rank, routing.top_k, routing.num_local_experts());
}

AssertionResult counts_match(const HostPlan& plan, const BruteForcePlan& expected) {
    const PlanShape& s = plan.shape;
    for (int32_t e = 0; e < s.num_experts; ++e) {
        if (plan.expert_rows[e] != static_cast<int64_t>(expected.expert_rows[e].size())) {
            return mismatch("expert_rows", e, plan.expert_rows[e], expected.expert_rows[e].size());
        }
        if (plan.segment_begin[e] != expected.segment_begin[e]) {
            return mismatch("segment_begin", e, plan.segment_begin[e], expected.segment_begin[e]);
        }
        // The rows before chunk (r, c) are the canonical rows that sort before its first token: walk the
        // sorted rows once, in step with the chunks.
        const auto& canonical = expected.expert_rows[e];
        size_t before = 0;
        for (int32_t r = 0; r < s.ep_size; ++r) {
            int64_t rows_from_rank = 0;
            for (int32_t c = 0; c < s.num_chunks(); ++c) {
                const int64_t first_token = static_cast<int64_t>(c) * kPlanChunkTokens;
                while (before < canonical.size() &&
                       (canonical[before].src_rank < r ||
                        (canonical[before].src_rank == r && canonical[before].token < first_token))) {
                    ++before;
                }
                const int64_t idx = s.chunk_index(e, r, c);
                if (plan.chunk_offsets[idx] != static_cast<int64_t>(before)) {
                    return AssertionFailure() << "chunk_offsets of expert " << e << ", rank " << r << ", chunk " << c
                                              << ": got " << plan.chunk_offsets[idx] << ", expected " << before;
                }
                rows_from_rank += plan.chunk_counts[idx];
            }
            if (rows_from_rank != expected.rows_from_rank[e][r]) {
                return AssertionFailure() << "rows of expert " << e << " from rank " << r << ": got " << rows_from_rank
                                          << ", expected " << expected.rows_from_rank[e][r];
            }
        }
    }
    for (int32_t r = 0; r < s.ep_size; ++r) {
        if (plan.owner_padded_rows[r] != expected.padded_rows[r]) {
            return mismatch("owner_padded_rows", r, plan.owner_padded_rows[r], expected.padded_rows[r]);
        }
    }
    return AssertionSuccess();
}

AssertionResult owner_tables_match(const HostPlan& plan, const BruteForcePlan& expected) {
    const PlanShape& s = plan.shape;
    const auto& rows = expected.row_source[s.rank];
    if (plan.padded_rows() != static_cast<int64_t>(rows.size())) {
        return mismatch("padded_rows() of rank", s.rank, plan.padded_rows(), rows.size());
    }
    if (rows.size() > plan.row_source.size()) {
        return AssertionFailure() << "rank " << s.rank << " needs " << rows.size() << " rows but its table holds "
                                  << plan.row_source.size();
    }
    for (size_t row = 0; row < rows.size(); ++row) {
        const RowSource got = plan.row_source[row];
        const ExpectedRow& want = rows[row];
        const bool same = want.is_padding()
                              ? got.is_padding()
                              : got.src_rank == want.src_rank && got.token_slot == want.token * s.top_k + want.slot;
        if (!same) {
            return AssertionFailure() << "row_source[" << row << "]: got " << describe(got) << ", expected "
                                      << (want.is_padding() ? std::string("padding")
                                                            : "(rank " + std::to_string(want.src_rank) + ", token " +
                                                                  std::to_string(want.token) + ", slot " +
                                                                  std::to_string(want.slot) + ")");
        }
    }
    const auto& tiles = expected.tile_local_expert[s.rank];
    for (int64_t tile = 0; tile < s.max_tiles(); ++tile) {
        const int32_t want = tile < static_cast<int64_t>(tiles.size()) ? tiles[tile] : -1;
        if (plan.tile_expert[tile] != want) {
            return mismatch("tile_expert", tile, plan.tile_expert[tile], want);
        }
    }
    for (int32_t l = 0; l < s.num_local_experts(); ++l) {
        const int32_t e = s.rank * s.num_local_experts() + l;
        if (plan.local_expert_rows(l) != static_cast<int64_t>(expected.expert_rows[e].size())) {
            return mismatch("local_expert_rows", l, plan.local_expert_rows(l), expected.expert_rows[e].size());
        }
        if (plan.local_expert_begin(l) != expected.segment_begin[e]) {
            return mismatch("local_expert_begin", l, plan.local_expert_begin(l), expected.segment_begin[e]);
        }
    }
    return AssertionSuccess();
}

AssertionResult slot_locations_match(const HostPlan& plan, const BruteForcePlan& expected) {
    const auto& locations = expected.slot_location[plan.shape.rank];
    for (size_t i = 0; i < locations.size(); ++i) {
        const SlotLocation got = plan.slot_location[i];
        if (got.rank != locations[i].rank || got.row != locations[i].row) {
            std::ostringstream want;
            want << "(rank " << locations[i].rank << ", row " << locations[i].row << ")";
            return mismatch("slot_location", static_cast<int64_t>(i), describe(got), want.str());
        }
    }
    return AssertionSuccess();
}

AssertionResult maps_are_inverse(std::span<const HostPlan> plans) {
    const auto num_ranks = static_cast<int32_t>(plans.size());
    for (const HostPlan& owner : plans) {
        for (int64_t row = 0; row < owner.padded_rows(); ++row) {
            const RowSource src = owner.row_source[row];
            if (src.is_padding()) {
                continue;
            }
            if (src.src_rank >= num_ranks || src.token_slot < 0 ||
                src.token_slot >= plans[src.src_rank].shape.slots_per_rank()) {
                return AssertionFailure()
                       << "rank " << owner.shape.rank << " row " << row << " has no such source " << describe(src);
            }
            const SlotLocation back = plans[src.src_rank].slot_location[src.token_slot];
            if (back.rank != owner.shape.rank || back.row != row) {
                return AssertionFailure() << "rank " << owner.shape.rank << " row " << row << " comes from "
                                          << describe(src) << ", whose slot_location is " << describe(back);
            }
        }
    }
    // owned_slot_rows: every owner's entry for a source slot is the row slot_location names on that owner, else -1.
    for (const HostPlan& owner : plans) {
        for (const HostPlan& source : plans) {
            const int64_t first = static_cast<int64_t>(source.shape.rank) * source.shape.slots_per_rank();
            for (int64_t i = 0; i < source.shape.slots_per_rank(); ++i) {
                const SlotLocation where = source.slot_location[i];
                const int32_t want = where.rank == owner.shape.rank ? where.row : -1;
                if (owner.owned_slot_rows[first + i] != want) {
                    return AssertionFailure()
                           << "rank " << owner.shape.rank << " owned_slot_rows of rank " << source.shape.rank
                           << " slot " << i << " is " << owner.owned_slot_rows[first + i] << ", expected " << want;
                }
            }
        }
    }
    for (const HostPlan& source : plans) {
        for (int64_t i = 0; i < source.shape.slots_per_rank(); ++i) {
            const SlotLocation where = source.slot_location[i];
            if (where.rank < 0) {
                continue;
            }
            if (where.rank >= num_ranks || where.row < 0 || where.row >= plans[where.rank].padded_rows()) {
                return AssertionFailure()
                       << "rank " << source.shape.rank << " slot " << i << " goes nowhere " << describe(where);
            }
            const RowSource back = plans[where.rank].row_source[where.row];
            if (back.src_rank != source.shape.rank || back.token_slot != i) {
                return AssertionFailure() << "rank " << source.shape.rank << " slot " << i << " goes to "
                                          << describe(where) << ", whose row_source is " << describe(back);
            }
        }
    }
    return AssertionSuccess();
}

}  // namespace mok::plan::testing
