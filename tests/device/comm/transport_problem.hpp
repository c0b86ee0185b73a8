// Random transport problems and what the transport must produce for them, computed on the CPU.
//
// A problem is every rank's routing (ids, weights), x and dy rows, and the shared experts' outputs; the
// expectation follows the contract (docs/semantics.md sections 4 and 6) with the stand-in experts of
// test_transforms.hpp: dispatched rows in plan order, forward y and backward dx combined in the fixed order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/plan/host_plan.hpp"
#include "plan/routing_plan.hpp"

namespace mok::comm::testing {

enum class Routing : uint8_t {
    kUniform,    // k distinct experts per token, uniformly
    kOneExpert,  // every token names expert `hot` (in a random slot)
    kOneRank,    // every token's experts all on rank `hot` (as many as it has; the rest elsewhere)
    kQuietRank,  // rank `hot` sends nothing (all its slots unused); the others uniform
};

const char* to_string(Routing routing);

struct TransportCase {
    int32_t ep_size = 1;
    int64_t tokens_per_rank = 1;
    int64_t hidden = 8;
    int32_t top_k = 1;
    int32_t num_experts = 1;
    int32_t num_shared = 0;
    Routing routing = Routing::kUniform;
    int32_t hot = 0;               // expert (kOneExpert) or rank (kOneRank, kQuietRank)
    double unused_fraction = 0.0;  // extra unused slots, per slot
    int64_t ring_rows = 0;         // 0: the capacity (no laps)
    int64_t capacity_rows = 0;     // 0: the worst case (never overflows)
    uint64_t seed = 1;

    int64_t capacity() const;
    int64_t ring() const;
    plan::PlanShape plan_shape(int32_t rank) const;
    std::string describe() const;
};

struct RankData {
    std::vector<int32_t> expert_ids;                // [T * k]
    std::vector<float> router_weights;              // [T * k]
    std::vector<uint16_t> x;                        // [T * H] bf16 bits
    std::vector<uint16_t> dy;                       // [T * H]
    std::vector<std::vector<uint16_t>> shared_out;  // [S][T * H] forward outputs of the shared experts
    std::vector<std::vector<uint16_t>> shared_dx;   // [S][T * H] their dx rows
};

struct TransportProblem {
    TransportCase c;
    std::vector<RankData> ranks;
};

TransportProblem make_problem(const TransportCase& c);

// Every rank's host plan (build_host_plan on the problem's ids).
std::vector<plan::HostPlan> host_plans(const TransportProblem& problem);

struct RankExpectation {
    std::vector<uint16_t> y;       // [T * H]
    std::vector<uint16_t> dx;      // [T * H]
    std::vector<float> d_weights;  // [T * k], 0 for unused slots
};

std::vector<RankExpectation> expected_results(const TransportProblem& problem);

// The row a dispatch must have placed at `row` of `rank`'s row space (x rows, or dy rows when `grads`); empty for
// a padding row.
std::vector<uint16_t> expected_dispatched_row(const TransportProblem& problem, const plan::HostPlan& plan, int64_t row,
                                              bool grads);

}  // namespace mok::comm::testing
