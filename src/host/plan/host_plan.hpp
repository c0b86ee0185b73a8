// The routing plan built on the CPU: the shared plan code (src/plan/routing_plan.hpp) driven by loops.
// The CPU reference and the API's checks use it; the GPU planner runs the same functions in kernels.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "plan/routing_plan.hpp"

namespace mok::plan {

// One rank's plan with its tables in host memory.
struct HostPlan {
    PlanShape shape{};
    std::vector<int32_t> chunk_counts;        // [E][R][C]
    std::vector<int32_t> chunk_offsets;       // [E][R][C]
    std::vector<int32_t> expert_rows;         // [E]
    std::vector<int32_t> segment_begin;       // [E]
    std::vector<int32_t> owner_padded_rows;   // [R]
    std::vector<RowSource> row_source;        // [capacity_rows]
    std::vector<int32_t> tile_expert;         // [capacity_rows / kExpertRowAlignment]
    std::vector<SlotLocation> slot_location;  // [T * k]
    std::vector<int32_t> owned_slot_rows;     // [R][T * k]
    int32_t status = 0;                       // PlanStatus

    PlanTables tables();
    PlanStatus plan_status() const { return static_cast<PlanStatus>(status); }
    // Padded rows this rank owns (its row space).
    int64_t padded_rows() const { return owner_padded_rows[shape.rank]; }
    // Routed rows of local expert `local_expert` and its first row.
    int64_t local_expert_rows(int32_t local_expert) const;
    int64_t local_expert_begin(int32_t local_expert) const;
};

// Builds rank shape.rank's plan from every rank's expert ids: all_ids[r] is rank r's [T, k] ids.
// The ids must have passed check_token. An overflow leaves status = kScheduleOverflow and the row tables
// partly filled; callers must not use them then.
void build_host_plan(const PlanShape& shape, std::span<const int32_t* const> all_ids, HostPlan* plan);

}  // namespace mok::plan
