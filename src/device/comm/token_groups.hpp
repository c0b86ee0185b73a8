// How the dispatch groups a source token's rows on one rank when it pulls them once per group (dispatch.cuh,
// DispatchPull::kTokenGroups): the token's rows here, in row order, taken kMaxRowFanout at a time. A row leads its
// group when the count of the token's rows before it is a multiple of kMaxRowFanout; the leader is loaded once and
// stored to every row of its group. Plain integer arithmetic on the token's owned_slot_rows entries, shared by host
// and device, so that the host test can check that every row of every token lands exactly once.
#pragma once

#include <cstdint>

#include "common/host_device.hpp"
#include "device/comm/copy_geometry.hpp"

namespace mok::comm {

// Slots of a token read at once: on the device the loads of a batch go out together, one L2 round trip per batch.
inline constexpr int32_t kTokenSlotBatch = 8;

struct TokenGroup {
    bool leader;                      // the row is its group's first
    int32_t next[kMaxRowFanout - 1];  // leader only: the group's other rows in order, then -1
};

// The group of row `row`, whose token's k entries are slots[0, top_k) (its row on this rank, or -1 where another
// rank or none takes the slot). The smallest rows past `row` are kept in order, in registers, as the entries are read.
MOK_HOST_DEVICE MOK_INLINE TokenGroup token_group(int64_t row, const int32_t* slots, int32_t top_k) {
    uint32_t earlier = 0;  // the token's rows here before this one
    TokenGroup g;
#pragma unroll
    for (uint32_t i = 0; i < kMaxRowFanout - 1; ++i) {
        g.next[i] = -1;
    }
    for (int32_t first = 0; first < top_k; first += kTokenSlotBatch) {
        int32_t batch[kTokenSlotBatch];
#pragma unroll
        for (int32_t j = 0; j < kTokenSlotBatch; ++j) {
            batch[j] = first + j < top_k ? slots[first + j] : -1;
        }
#pragma unroll
        for (int32_t j = 0; j < kTokenSlotBatch; ++j) {
            earlier += batch[j] >= 0 && batch[j] < row ? 1 : 0;
            // Insertion into the ascending list of the smallest rows past `row`; -1 marks a free place.
            int32_t carry = batch[j] > row ? batch[j] : -1;
#pragma unroll
            for (uint32_t i = 0; i < kMaxRowFanout - 1; ++i) {
                const bool take = carry >= 0 && (g.next[i] < 0 || carry < g.next[i]);
                const int32_t kept = g.next[i];
                g.next[i] = take ? carry : kept;
                carry = take ? kept : carry;
            }
        }
    }
    g.leader = earlier % kMaxRowFanout == 0;
    return g;
}

}  // namespace mok::comm
