// The schedule capacity: a row table one tile too small reports kScheduleOverflow and writes nothing past its
// tables (this suite builds the plan driver under AddressSanitizer where the toolchain has it, and the tables
// are sized exactly); a table exactly as large as the routing needs holds the whole plan.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "common/test_seed.hpp"
#include "host/plan/host_plan.hpp"
#include "plan/brute_force_plan.hpp"
#include "plan/plan_checks.hpp"
#include "plan/random_routing.hpp"

namespace mok::plan::testing {
namespace {

constexpr int kNumRandomCases = 200;
constexpr int64_t kMaxRandomTokens = 3 * kPlanChunkTokens;

::testing::AssertionResult tables_sized_exactly(const HostPlan& plan) {
    const PlanTableSizes sizes = table_sizes(plan.shape);
    const bool exact = static_cast<int64_t>(plan.chunk_counts.size()) == sizes.chunk_entries &&
                       static_cast<int64_t>(plan.chunk_offsets.size()) == sizes.chunk_entries &&
                       static_cast<int64_t>(plan.expert_rows.size()) == sizes.experts &&
                       static_cast<int64_t>(plan.segment_begin.size()) == sizes.experts &&
                       static_cast<int64_t>(plan.owner_padded_rows.size()) == sizes.ranks &&
                       static_cast<int64_t>(plan.row_source.size()) == sizes.rows &&
                       static_cast<int64_t>(plan.tile_expert.size()) == sizes.tiles &&
                       static_cast<int64_t>(plan.slot_location.size()) == sizes.slots &&
                       static_cast<int64_t>(plan.owned_slot_rows.size()) == sizes.all_slots;
    if (!exact) {
        return ::testing::AssertionFailure() << "the plan's tables are not the sizes table_sizes() gives";
    }
    return ::testing::AssertionSuccess();
}

TEST(RoutingPlanCapacity, OneTileShortOverflowsAndExactlyEnoughFits) {
    for (int i = 0; i < kNumRandomCases; ++i) {
        const RoutingCase routing = random_routing_case(mok::testing::case_seed(i), 1, kMaxRandomTokens);
        const BruteForcePlan expected = brute_force_plan(routing);
        const std::vector<const int32_t*> ids = routing.id_pointers();
        for (int32_t rank = 0; rank < routing.ep_size; ++rank) {
            SCOPED_TRACE(mok::testing::replay_hint() + "; " + routing.describe() + "; rank " + std::to_string(rank));
            const int64_t needed = expected.padded_rows[rank];

            HostPlan exact;
            build_host_plan(plan_shape_for(routing, rank, needed), ids, &exact);
            ASSERT_EQ(exact.plan_status(), PlanStatus::kOk) << "capacity " << needed;
            ASSERT_TRUE(tables_sized_exactly(exact));
            ASSERT_TRUE(counts_match(exact, expected));
            ASSERT_TRUE(owner_tables_match(exact, expected));

            if (needed == 0) {
                continue;
            }
            for (int64_t capacity : {needed - kExpertRowAlignment, int64_t{0}}) {
                HostPlan short_plan;
                build_host_plan(plan_shape_for(routing, rank, capacity), ids, &short_plan);
                ASSERT_EQ(short_plan.plan_status(), PlanStatus::kScheduleOverflow) << "capacity " << capacity;
                ASSERT_TRUE(tables_sized_exactly(short_plan));
            }
        }
    }
}

// A rank's status is its own row table's: another owner's overflow is that owner's to report.
TEST(RoutingPlanCapacity, StatusReflectsOnlyTheRanksOwnRows) {
    const RoutingCase routing = all_to_one_rank_case(mok::testing::case_seed(0), /*ep_size=*/4, /*num_local_experts=*/2,
                                                     /*top_k=*/2, /*tokens_per_rank=*/100, /*hot_rank=*/3);
    const BruteForcePlan expected = brute_force_plan(routing);
    const std::vector<const int32_t*> ids = routing.id_pointers();
    const int64_t cold_rows = expected.padded_rows[0];
    ASSERT_LT(cold_rows, expected.padded_rows[3]) << routing.describe();
    for (int32_t rank = 0; rank < routing.ep_size; ++rank) {
        HostPlan plan;
        build_host_plan(plan_shape_for(routing, rank, cold_rows), ids, &plan);
        const PlanStatus want =
            expected.padded_rows[rank] > cold_rows ? PlanStatus::kScheduleOverflow : PlanStatus::kOk;
        EXPECT_EQ(plan.plan_status(), want) << routing.describe() << "; rank " << rank;
    }
}

}  // namespace
}  // namespace mok::plan::testing
