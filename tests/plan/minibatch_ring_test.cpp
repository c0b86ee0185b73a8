// Minibatches and the token ring: pure index arithmetic on an owner's row space, checked against a walk over
// the rows that fills minibatches and goes round the ring one row at a time.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "common/test_seed.hpp"
#include "host/plan/host_plan.hpp"
#include "plan/plan_checks.hpp"
#include "plan/random_routing.hpp"

namespace mok::plan::testing {
namespace {

constexpr int kNumRandomCases = 300;
constexpr int64_t kMaxRandomTokens = 3 * kPlanChunkTokens;

::testing::AssertionResult minibatches_match(const PlanShape& s, int64_t padded_rows) {
    // Walk the rows, closing a minibatch whenever it holds minibatch_rows rows or the rows run out.
    std::vector<RowRange> walked;
    for (int64_t row = 0; row < padded_rows; ++row) {
        if (walked.empty() || walked.back().end - walked.back().begin == s.minibatch_rows) {
            walked.push_back({row, row});
        }
        ++walked.back().end;
    }
    const int64_t count = num_minibatches(s, padded_rows);
    if (count != static_cast<int64_t>(walked.size())) {
        return ::testing::AssertionFailure()
               << "num_minibatches(" << padded_rows << " rows) = " << count << ", expected " << walked.size();
    }
    for (int64_t m = 0; m < count; ++m) {
        const RowRange got = minibatch_rows(s, m, padded_rows);
        if (got.begin != walked[m].begin || got.end != walked[m].end) {
            return ::testing::AssertionFailure()
                   << "minibatch " << m << " of " << padded_rows << " rows: got [" << got.begin << ", " << got.end
                   << "), expected [" << walked[m].begin << ", " << walked[m].end << ")";
        }
    }
    return ::testing::AssertionSuccess();
}

::testing::AssertionResult ring_matches(const PlanShape& s, int64_t padded_rows) {
    // Go round the ring row by row, remembering who last held each slot.
    std::vector<int64_t> last_occupant(s.ring_rows, -1);
    int64_t slot = 0;
    int64_t lap = 0;
    for (int64_t row = 0; row < padded_rows; ++row) {
        const RingPosition got = ring_position(s, row);
        if (got.slot != slot || got.lap != lap) {
            return ::testing::AssertionFailure() << "ring_position(" << row << ") = (slot " << got.slot << ", lap "
                                                 << got.lap << "), expected (slot " << slot << ", lap " << lap << ")";
        }
        if (previous_occupant(s, row) != last_occupant[slot]) {
            return ::testing::AssertionFailure() << "previous_occupant(" << row << ") = " << previous_occupant(s, row)
                                                 << ", expected " << last_occupant[slot];
        }
        last_occupant[slot] = row;
        if (++slot == s.ring_rows) {
            slot = 0;
            ++lap;
        }
    }
    return ::testing::AssertionSuccess();
}

// Over the row spaces of real plans, with the minibatch and ring sizes each case drew.
TEST(RoutingPlanRing, MinibatchesAndRingMatchARowWalkOnRandomPlans) {
    for (int i = 0; i < kNumRandomCases; ++i) {
        const RoutingCase routing = random_routing_case(mok::testing::case_seed(i), 1, kMaxRandomTokens);
        const std::vector<const int32_t*> ids = routing.id_pointers();
        for (int32_t rank = 0; rank < routing.ep_size; ++rank) {
            HostPlan plan;
            build_host_plan(plan_shape_for(routing, rank, worst_case_capacity(routing)), ids, &plan);
            ASSERT_EQ(plan.plan_status(), PlanStatus::kOk) << mok::testing::replay_hint() << "; " << routing.describe();
            ASSERT_TRUE(minibatches_match(plan.shape, plan.padded_rows()))
                << mok::testing::replay_hint() << "; " << routing.describe() << "; rank " << rank;
            ASSERT_TRUE(ring_matches(plan.shape, plan.padded_rows()))
                << mok::testing::replay_hint() << "; " << routing.describe() << "; rank " << rank;
        }
    }
}

// Every small combination, including a row space that ends exactly on a minibatch or lap boundary and the
// empty one.
TEST(RoutingPlanRing, MinibatchesAndRingMatchARowWalkOnSmallShapes) {
    constexpr int64_t kTile = kExpertRowAlignment;
    for (int64_t minibatch_tiles = 1; minibatch_tiles <= 4; ++minibatch_tiles) {
        for (int64_t ring_minibatches = 1; ring_minibatches <= 3; ++ring_minibatches) {
            PlanShape s;
            s.minibatch_rows = minibatch_tiles * kTile;
            s.ring_rows = ring_minibatches * s.minibatch_rows;
            for (int64_t padded_rows = 0; padded_rows <= 3 * s.ring_rows + kTile; padded_rows += kTile) {
                ASSERT_TRUE(minibatches_match(s, padded_rows)) << "minibatch " << s.minibatch_rows;
                ASSERT_TRUE(ring_matches(s, padded_rows)) << "ring " << s.ring_rows;
            }
        }
    }
}

}  // namespace
}  // namespace mok::plan::testing
