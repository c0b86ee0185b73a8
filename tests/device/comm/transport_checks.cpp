#include "comm/transport_checks.hpp"

#include <cstring>

namespace mok::comm::testing {
namespace {

template <typename T, typename Same>
::testing::AssertionResult first_difference(const std::vector<T>& got, const std::vector<T>& expected,
                                            const std::string& what, Same&& same) {
    if (got.size() != expected.size()) {
        return ::testing::AssertionFailure() << what << ": " << got.size() << " entries, expected " << expected.size();
    }
    for (size_t i = 0; i < got.size(); ++i) {
        if (!same(got[i], expected[i])) {
            return ::testing::AssertionFailure() << what << ": first difference at entry " << i;
        }
    }
    return ::testing::AssertionSuccess();
}

template <typename T>
::testing::AssertionResult table_equal(const std::vector<T>& got, const std::vector<T>& expected,
                                       const std::string& what) {
    return first_difference(got, expected, what, [](const T& a, const T& b) { return a == b; });
}

bool same_row_source(const plan::RowSource& a, const plan::RowSource& b) {
    return a.src_rank == b.src_rank && a.token_slot == b.token_slot;
}

bool same_location(const plan::SlotLocation& a, const plan::SlotLocation& b) {
    return a.rank == b.rank && a.row == b.row;
}

}  // namespace

::testing::AssertionResult plans_equal(const plan::HostPlan& got, const plan::HostPlan& expected) {
    if (got.status != expected.status) {
        return ::testing::AssertionFailure() << "plan status " << got.status << ", expected " << expected.status;
    }
    for (const auto& result :
         {table_equal(got.chunk_counts, expected.chunk_counts, "chunk_counts"),
          table_equal(got.chunk_offsets, expected.chunk_offsets, "chunk_offsets"),
          table_equal(got.expert_rows, expected.expert_rows, "expert_rows"),
          table_equal(got.segment_begin, expected.segment_begin, "segment_begin"),
          table_equal(got.owner_padded_rows, expected.owner_padded_rows, "owner_padded_rows"),
          table_equal(got.tile_expert, expected.tile_expert, "tile_expert"),
          table_equal(got.owned_slot_rows, expected.owned_slot_rows, "owned_slot_rows"),
          first_difference(got.row_source, expected.row_source, "row_source", same_row_source),
          first_difference(got.slot_location, expected.slot_location, "slot_location", same_location)}) {
        if (!result) {
            return result;
        }
    }
    return ::testing::AssertionSuccess();
}

::testing::AssertionResult dispatched_rows_match(const TransportProblem& problem, const plan::HostPlan& plan,
                                                 const std::vector<uint16_t>& captured, bool grads) {
    const int64_t hidden = problem.c.hidden;
    for (int64_t row = 0; row < plan.padded_rows(); ++row) {
        const std::vector<uint16_t> expected = expected_dispatched_row(problem, plan, row, grads);
        if (!expected.empty() && std::memcmp(expected.data(), captured.data() + row * hidden, hidden * 2) != 0) {
            const plan::RowSource s = plan.row_source[row];
            return ::testing::AssertionFailure() << "rank " << plan.shape.rank << ", row " << row << " (from rank "
                                                 << s.src_rank << ", slot " << s.token_slot << ") differs";
        }
    }
    return ::testing::AssertionSuccess();
}

::testing::AssertionResult bits_equal(const std::vector<uint16_t>& got, const std::vector<uint16_t>& expected,
                                      const std::string& what) {
    return table_equal(got, expected, what);
}

::testing::AssertionResult bits_equal(const std::vector<float>& got, const std::vector<float>& expected,
                                      const std::string& what) {
    return first_difference(got, expected, what,
                            [](float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; });
}

}  // namespace mok::comm::testing
