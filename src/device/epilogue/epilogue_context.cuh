// What a consumer warpgroup's epilogue works with besides its accumulators: its staging buffer in shared memory,
// the barriers of the TMA loads into it (the weight gradients' accumulate mode reads main_grad through it), the
// launch's wait context, and which warpgroup it is (its named barrier) and how tiles are shared out.
// An epilogue's rows are those of its `row_half` argument (the tile's rows [64 row_half, 64 row_half + 64)), which
// is the warpgroup in the cooperative arrangement and the CTA's rank in its cluster in the ping-pong one.
#pragma once

#include <cstdint>

#include "device/common/bounded_wait.cuh"

namespace mok::epilogue {

// Halves of a staging buffer that load independently: one is added to while the other loads.
inline constexpr int kStagingHalves = 2;

struct EpilogueContext {
    // This warpgroup's staging buffer, 1024-byte aligned: kStagingBytesPerWarpgroup bytes, or what the form's layout
    // gives it (gemm::GemmLayout; kAccumulateStagingBytes in accumulate mode by loads).
    uint8_t* staging;
    // mbarriers of the TMA loads into the buffer, one arrival each: [kStagingHalves], or [kAccumulateLoadSlots].
    uint64_t* loaded;
    const device::WaitContext* wait;  // the launch's error record and wait budget
    int warpgroup;                    // the consumer warpgroup (0 or 1): its staging buffer's named barrier
    // Cooperative arrangement: both warpgroups hold the two row halves of one tile. Ping-pong: a warpgroup holds
    // one row half of its own tile, the cluster's other CTA the other half.
    bool tile_per_warpgroup;
};

}  // namespace mok::epilogue
