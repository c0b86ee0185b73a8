// Publishing a finished row tile (gemm::RowTilePublish): called by every consumer warpgroup after its tile's
// epilogue stores; whoever stores the last part of a row tile publishes it. A part is an N tile in the
// cooperative arrangement (both warpgroups store one together) and an N tile's row half in the ping-pong one
// (one warpgroup of each of the cluster's two CTAs).
#pragma once

#include <cstdint>

#include "device/epilogue/epilogue_context.cuh"
#include "device/epilogue/staging.cuh"
#include "device/gemm/gemm_config.cuh"
#include "device/gemm/row_tile_publish.hpp"
#include "device/ptx/atomics.cuh"
#include "device/ptx/warpgroup.cuh"
#include "device/scheduler/gemm_tile_scheduler.cuh"

namespace mok::epilogue {

__device__ __forceinline__ void publish_row_tile(const gemm::RowTilePublish& p, const gemm::Tile& tile,
                                                 uint32_t num_n_tiles, int thread_in_wg, const EpilogueContext& e) {
    // Every thread's stores of this part precede the barrier (bar.sync orders them within the CTA) ...
    uint32_t num_parts = num_n_tiles;
    if (e.tile_per_warpgroup) {
        staging_barrier(e.warpgroup);
        num_parts *= gemm::kPingPongClusterSize;
    } else {
        ptx::named_barrier_sync(static_cast<uint32_t>(gemm::NamedBarrier::kConsumersMask),
                                gemm::kNumConsumerWarpgroups * gemm::kThreadsPerWarpgroup);
        if (e.warpgroup != 0) {
            return;
        }
    }
    if (thread_in_wg != 0) {
        return;
    }
    // ... and the fence makes them visible at GPU scope before the count (the release half; cumulative over what
    // the barrier ordered). The add is acq_rel: the CTA whose add completes the count acquires every other CTA's
    // release, and its release store of the flag then publishes all of the row tile's stores to the push.
    ptx::fence_acq_rel_gpu();
    const uint32_t stored_before = ptx::atom_add_acq_rel_gpu(&p.tile_counts[tile.m_idx], 1);
    if (stored_before + 1 == num_parts) {
        ptx::st_release_gpu(&p.tile_ready[tile.m_idx], *p.sequence);
    }
}

}  // namespace mok::epilogue
