// Comparisons of a built plan against the brute-force one. Each returns the first mismatch, described, so that
// a loop over thousands of cases stops at the first failing table with a readable message.
#pragma once

#include <cstdint>
#include <span>

#include <gtest/gtest.h>

#include "host/plan/host_plan.hpp"
#include "plan/brute_force_plan.hpp"
#include "plan/random_routing.hpp"

namespace mok::plan::testing {

// The plan shape of `rank` for a routing, with the given row-table capacity.
PlanShape plan_shape_for(const RoutingCase& routing, int32_t rank, int64_t capacity_rows);
// The capacity that can never overflow for this routing's shape.
int64_t worst_case_capacity(const RoutingCase& routing);

// expert_rows, the per-(expert, source rank) counts and offsets, segment starts and every owner's padded rows.
::testing::AssertionResult counts_match(const HostPlan& plan, const BruteForcePlan& expected);
// This rank as owner: row_source of every row of its row space, its tiles' experts (and -1 past them), and the
// per-local-expert accessors.
::testing::AssertionResult owner_tables_match(const HostPlan& plan, const BruteForcePlan& expected);
// This rank as source: the location of each of its slots.
::testing::AssertionResult slot_locations_match(const HostPlan& plan, const BruteForcePlan& expected);
// Across ranks: every data row's source slot points back at the row, and every used slot's row names the slot.
::testing::AssertionResult maps_are_inverse(std::span<const HostPlan> plans);

}  // namespace mok::plan::testing
