// Publishing a finished row tile (gemm::RowTilePublish): called by both consumer warpgroups after a tile's
// epilogue stores; the CTA that stores the last N tile of a row tile publishes it.
#pragma once

#include <cstdint>

#include "device/gemm/gemm_config.cuh"
#include "device/gemm/row_tile_publish.hpp"
#include "device/ptx/atomics.cuh"
#include "device/ptx/warpgroup.cuh"
#include "device/scheduler/gemm_tile_scheduler.cuh"

namespace mok::epilogue {

__device__ __forceinline__ void publish_row_tile(const gemm::RowTilePublish& p, const gemm::Tile& tile,
                                                 uint32_t num_n_tiles, int wg, int thread_in_wg) {
    // Every consumer thread's stores of this tile precede the barrier (bar.sync orders them within the CTA) ...
    ptx::named_barrier_sync(static_cast<uint32_t>(gemm::NamedBarrier::kConsumersMask),
                            gemm::kNumConsumerWarpgroups * gemm::kThreadsPerWarpgroup);
    if (wg != 0 || thread_in_wg != 0) {
        return;
    }
    // ... and the fence makes them visible at GPU scope before the count (the release half; cumulative over what
    // the barrier ordered). The add is acq_rel: the CTA whose add completes the count acquires every other CTA's
    // release, and its release store of the flag then publishes all of the row tile's stores to the push.
    ptx::fence_acq_rel_gpu();
    const uint32_t stored_before = ptx::atom_add_acq_rel_gpu(&p.tile_counts[tile.m_idx], 1);
    if (stored_before + 1 == num_n_tiles) {
        ptx::st_release_gpu(&p.tile_ready[tile.m_idx], *p.sequence);
    }
}

}  // namespace mok::epilogue
