// The routing plan by brute force, written from the contract (docs/semantics.md section 4) without the plan
// code: list every (source rank, token, slot) of each expert, sort the list, lay the sorted lists end to end
// per owner with each padded to 128 rows, and read every table off that picture.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/random_routing.hpp"

namespace mok::plan::testing {

struct ExpectedRow {
    int32_t src_rank = -1;  // -1 for a padding row
    int64_t token = -1;
    int32_t slot = -1;

    bool is_padding() const { return src_rank < 0; }
};

struct ExpectedLocation {
    int32_t rank = -1;  // -1 for an unused slot
    int64_t row = -1;
};

struct BruteForcePlan {
    std::vector<std::vector<ExpectedRow>> expert_rows;         // [E] the expert's rows in canonical order
    std::vector<std::vector<int64_t>> rows_from_rank;          // [E][R] rows of expert e from each source rank
    std::vector<int64_t> segment_begin;                        // [E] within the owner's row space
    std::vector<int64_t> padded_rows;                          // [R] each owner's row space
    std::vector<std::vector<ExpectedRow>> row_source;          // [R][padded_rows[r]]
    std::vector<std::vector<ExpectedLocation>> slot_location;  // [R][T * k]
    std::vector<std::vector<int32_t>> tile_local_expert;       // [R][padded_rows[r] / 128]
};

// The segment padding of the contract: the GEMM M tile.
inline constexpr int64_t kBruteForceSegmentPadding = 128;

BruteForcePlan brute_force_plan(const RoutingCase& routing);

}  // namespace mok::plan::testing
