// What a consumer warpgroup's epilogue works with besides its accumulators: its staging buffer in shared memory,
// the barriers of the TMA loads into it (the weight gradients' accumulate mode reads main_grad through it), and
// the launch's wait context.
#pragma once

#include <cstdint>

#include "device/common/bounded_wait.cuh"

namespace mok::epilogue {

// Halves of a staging buffer that load independently: one is added to while the other loads.
inline constexpr int kStagingHalves = 2;

struct EpilogueContext {
    uint8_t* staging;                 // kStagingBytesPerWarpgroup bytes, 1024-byte aligned, this warpgroup's
    uint64_t* loaded;                 // [kStagingHalves] mbarriers: TMA loads into each half (one arrival)
    const device::WaitContext* wait;  // the launch's error record and wait budget
};

}  // namespace mok::epilogue
