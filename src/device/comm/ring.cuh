// The consumer side of a token ring: how a GEMM (or any consumer) waits for dispatched rows and hands ring slots
// back. The producer side is dispatch.cuh. Tile t = rows [128 t, 128 t + 128) of the owner's row space; its rows
// sit in ring slots (128 t + i) mod ring_rows.
#pragma once

#include <cstdint>

#include "common/device_status.hpp"
#include "device/comm/signals.cuh"
#include "device/common/bounded_wait.cuh"
#include "device/ptx/atomics.cuh"

namespace mok::comm {

// Waits until tile `tile`'s rows are in the ring for the pass with sequence `sequence`. Acquire at GPU scope and
// then a proxy fence, so both plain loads and TMA loads (async proxy) of the rows may follow.
__device__ __forceinline__ bool wait_ring_tile(const device::WaitContext& ctx, const uint64_t* ring_ready, int64_t tile,
                                               uint64_t sequence) {
    if (!wait_flag_gpu(ctx, WaitSite::kRowsReady, &ring_ready[tile], sequence)) {
        return false;
    }
    ptx::fence_proxy_async_global();
    return true;
}

// Hands tile `tile`'s ring slots back to the dispatcher. Release at GPU scope: the caller's reads of the rows
// (plain loads, or TMA loads whose mbarrier it already waited on) happen before the next lap overwrites them.
__device__ __forceinline__ void release_ring_tile(uint64_t* ring_free, int64_t tile, uint64_t sequence) {
    ptx::st_release_gpu(&ring_free[tile], sequence);
}

}  // namespace mok::comm
