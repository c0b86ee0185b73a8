// What a consumer warpgroup's epilogue works with besides its accumulators: its staging buffer in shared memory,
// which warpgroup it is (its named barrier) and how tiles are shared out.
// An epilogue's rows are those of its `row_half` argument (the tile's rows [64 row_half, 64 row_half + 64)), which
// is the warpgroup in the cooperative arrangement and the CTA's rank in its cluster in the ping-pong one.
#pragma once

#include <cstdint>

namespace mok::epilogue {

// Halves of a staging buffer that TMA stores read independently: one is written while the other's store reads it.
inline constexpr int kStagingHalves = 2;

struct EpilogueContext {
    uint8_t* staging;  // kStagingBytesPerWarpgroup bytes, 1024-byte aligned, this warpgroup's
    int warpgroup;     // the consumer warpgroup (0 or 1): its staging buffer's named barrier
    // Cooperative arrangement: both warpgroups hold the two row halves of one tile. Ping-pong: a warpgroup holds
    // one row half of its own tile, the cluster's other CTA the other half.
    bool tile_per_warpgroup;
};

}  // namespace mok::epilogue
