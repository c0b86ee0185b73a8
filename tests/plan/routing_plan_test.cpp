// Property tests of the routing plan (src/plan/routing_plan.hpp, driven by build_host_plan): thousands of
// random routings against a brute-force enumeration of the contract.
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

// Enough cases to meet every skew at every EP degree many times over; T up to a little over three chunks so
// that partial last chunks, single-chunk and multi-chunk ranks all occur. The suite stays within seconds.
constexpr int kNumRandomCases = 1500;
constexpr int64_t kMaxRandomTokens = 3 * kPlanChunkTokens + kPlanChunkTokens / 2;

std::vector<HostPlan> build_all_ranks(const RoutingCase& routing, int64_t capacity_rows) {
    const std::vector<const int32_t*> ids = routing.id_pointers();
    std::vector<HostPlan> plans(routing.ep_size);
    for (int32_t rank = 0; rank < routing.ep_size; ++rank) {
        build_host_plan(plan_shape_for(routing, rank, capacity_rows), ids, &plans[rank]);
    }
    return plans;
}

::testing::AssertionResult plans_match(const RoutingCase& routing, int64_t capacity_rows) {
    const BruteForcePlan expected = brute_force_plan(routing);
    const std::vector<HostPlan> plans = build_all_ranks(routing, capacity_rows);
    for (const HostPlan& plan : plans) {
        if (plan.plan_status() != PlanStatus::kOk) {
            return ::testing::AssertionFailure() << "rank " << plan.shape.rank << " overflowed";
        }
        for (auto check : {counts_match, owner_tables_match, slot_locations_match}) {
            if (auto result = check(plan, expected); !result) {
                return result << " (rank " << plan.shape.rank << ")";
            }
        }
    }
    return maps_are_inverse(plans);
}

TEST(RoutingPlan, MatchesBruteForceOnRandomRoutings) {
    for (int i = 0; i < kNumRandomCases; ++i) {
        const RoutingCase routing = random_routing_case(mok::testing::case_seed(i), 1, kMaxRandomTokens);
        ASSERT_TRUE(plans_match(routing, worst_case_capacity(routing)))
            << mok::testing::replay_hint() << "; " << routing.describe();
    }
}

// The token counts around chunk boundaries, where an off-by-one in the chunk arithmetic would show.
TEST(RoutingPlan, MatchesBruteForceAtChunkBoundaries) {
    const int64_t boundary_tokens[] = {1,
                                       kPlanChunkTokens - 1,
                                       kPlanChunkTokens,
                                       kPlanChunkTokens + 1,
                                       2 * kPlanChunkTokens,
                                       2 * kPlanChunkTokens + 1};
    uint64_t index = 0;
    for (int64_t tokens : boundary_tokens) {
        for (int repeat = 0; repeat < 20; ++repeat) {
            const RoutingCase routing = random_routing_case(mok::testing::case_seed(index++), tokens, tokens);
            ASSERT_TRUE(plans_match(routing, worst_case_capacity(routing)))
                << mok::testing::replay_hint() << "; " << routing.describe();
        }
    }
}

// Every token of every rank on one rank's experts: the load the worst-case capacity is sized for.
TEST(RoutingPlan, WorstCaseCapacityHoldsEverythingOnOneRank) {
    uint64_t index = 0;
    for (int32_t ep_size : {1, 2, 3, 8}) {
        for (int32_t num_local : {1, 2, 5}) {
            for (int32_t top_k : {1, 3, 8}) {
                if (top_k > ep_size * num_local) {
                    continue;
                }
                for (int64_t tokens : {int64_t{1}, int64_t{63}, int64_t{130}}) {
                    const int32_t hot_rank = ep_size - 1;
                    const RoutingCase routing = all_to_one_rank_case(mok::testing::case_seed(index++), ep_size,
                                                                     num_local, top_k, tokens, hot_rank);
                    ASSERT_TRUE(plans_match(routing, worst_case_capacity(routing)))
                        << mok::testing::replay_hint() << "; " << routing.describe();
                }
            }
        }
    }
}

// The GPU counts a chunk with a warp, each lane on every 32nd slot: the lanes' counts add up to the chunk's, for
// every chunk of random routings (partial last chunks and unused slots included).
TEST(RoutingPlan, ChunkCountsSplitOverLanesAddUp) {
    constexpr int64_t kLanes = 32;
    for (int i = 0; i < 200; ++i) {
        const RoutingCase routing = random_routing_case(mok::testing::case_seed(i), 1, kMaxRandomTokens);
        const PlanShape shape = plan_shape_for(routing, 0, worst_case_capacity(routing));
        for (int32_t src = 0; src < routing.ep_size; ++src) {
            for (int32_t chunk = 0; chunk < shape.num_chunks(); ++chunk) {
                std::vector<int32_t> whole(routing.num_experts, 0);
                std::vector<int32_t> split(routing.num_experts, 0);
                count_chunk(shape, routing.ids[src].data(), chunk, [&](int32_t e) { ++whole[e]; });
                for (int64_t lane = 0; lane < kLanes; ++lane) {
                    count_chunk(
                        shape, routing.ids[src].data(), chunk, [&](int32_t e) { ++split[e]; }, lane, kLanes);
                }
                ASSERT_EQ(split, whole) << mok::testing::replay_hint() << "; " << routing.describe() << ", source "
                                        << src << ", chunk " << chunk;
            }
        }
    }
}

}  // namespace
}  // namespace mok::plan::testing
