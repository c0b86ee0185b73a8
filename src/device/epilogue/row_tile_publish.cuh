// Publishing a finished row tile (gemm::RowTilePublish): called by every consumer warpgroup after its tile's
// epilogue stores; whoever stores the last part of a row tile publishes it. A part is an N tile in the
// cooperative arrangement (both warpgroups store one together) and an N tile's row half in the ping-pong one
// (one warpgroup of each of the cluster's two CTAs); in the epilogue-warps one the epilogue threads store an N tile's
// both row halves.
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

// Stores the combine flag of every data row of row tile `m_idx` at its token's rank; one thread, after the
// count's acquire. The system-scope fence is cumulative: it orders every part's row stores (each made visible at
// system scope before its count, below, and acquired through the count) before these flags.
__device__ __forceinline__ void publish_to_sources(const gemm::RowTilePublish& p, int32_t m_idx, uint64_t sequence) {
    ptx::fence_acq_rel_sys();
    const int64_t first_row = static_cast<int64_t>(m_idx) * gemm::BLOCK_M;
    // Loads in batches ahead of their stores: one latency per batch, not per row.
    constexpr int kBatch = 8;
#pragma unroll 1
    for (int r = 0; r < gemm::BLOCK_M; r += kBatch) {
        plan::RowSource s[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            s[j] = p.sources[first_row + r + j];
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            if (!s[j].is_padding()) {
                ptx::st_relaxed_sys(p.rank_flags[s[j].src_rank] + s[j].token_slot, sequence);
            }
        }
    }
}

// One thread counts a stored part of row tile tile.m_idx, after a barrier that ordered every storing thread's
// stores before it; the part that completes the count publishes the row tile.
__device__ __forceinline__ void count_row_tile_part(const gemm::RowTilePublish& p, const gemm::Tile& tile,
                                                    uint32_t num_parts) {
    // The fence makes the stores the barrier ordered visible before the count (the release half; cumulative over
    // what the barrier ordered): at GPU scope for the push, which reads them on this GPU; at system scope when the
    // rows went to other GPUs. The add is acq_rel: the CTA whose add completes the count acquires every other
    // CTA's release, and its release (the flag store below, or publish_to_sources's fence) then publishes all of
    // the row tile's stores.
    if (p.rank_flags != nullptr) {
        ptx::fence_acq_rel_sys();
    } else {
        ptx::fence_acq_rel_gpu();
    }
    const uint32_t stored_before = ptx::atom_add_acq_rel_gpu(&p.tile_counts[tile.m_idx], 1);
    if (stored_before + 1 != num_parts) {
        return;
    }
    // A relaxed read: an earlier kernel's claim is visible by stream order, and a claim racing with this tile
    // comes from a block that gave up before storing its part, so this row tile would never complete.
    if (p.rank_flags != nullptr && *reinterpret_cast<const volatile int32_t*>(&p.step_status->code) == 0) {
        publish_to_sources(p, tile.m_idx, *p.sequence);
    }
    if (p.tile_ready != nullptr) {
        ptx::st_release_gpu(&p.tile_ready[tile.m_idx], *p.sequence);
    }
}

__device__ __forceinline__ void publish_row_tile(const gemm::RowTilePublish& p, const gemm::Tile& tile,
                                                 uint32_t num_n_tiles, int thread_in_wg, const EpilogueContext& e) {
    // Every thread's stores of this part precede the barrier (bar.sync orders them within the CTA).
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
    if (thread_in_wg == 0) {
        count_row_tile_part(p, tile, num_parts);
    }
}

// The epilogue-warps arrangement: the epilogue threads stored both row halves of the N tile; they meet, and one
// counts the part.
__device__ __forceinline__ void publish_row_tile_from_epilogue_warps(const gemm::RowTilePublish& p,
                                                                     const gemm::Tile& tile, uint32_t num_n_tiles,
                                                                     int thread) {
    ptx::named_barrier_sync(static_cast<uint32_t>(gemm::NamedBarrier::kEpilogueWarps), gemm::kEpilogueThreads);
    if (thread == 0) {
        count_row_tile_part(p, tile, num_n_tiles);
    }
}

}  // namespace mok::epilogue
