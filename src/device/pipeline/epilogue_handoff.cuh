// The hand-off of finished tiles from a GEMM's consumer warpgroups to its epilogue warps (the epilogue-warps
// arrangement, gemm/epilogue_warps_kernel.cuh).
//
// Each consumer warpgroup w owns one hand-off buffer, which holds one tile's results at a time. Per tile, with two
// mbarriers per buffer:
//   consumer w:  acquire(w, n)  -- the epilogue threads have read tile n - 1 out of buffer w
//                ... writes tile n into buffer w ...
//                commit(w)      -- every thread of w arrives: the phase completes once all have written
//   epilogue:    wait(w, n)     -- tile n is in buffer w
//                ... reads it, finishes the epilogue ...
//                release(w)     -- every epilogue thread arrives once its reads of buffer w are done
// Arrivals release and waits acquire at CTA scope, which orders the generic-proxy shared-memory writes before the
// reads (and the reads before the next tile's writes); for generic-proxy readers no other barrier or fence is
// needed. A form whose epilogue threads read the buffer through the async proxy (TMA stores: the fresh weight
// gradients) fences the proxies in its consumer's writes, and releases the buffer only once the stores have read it
// (epilogue/weight_grad_epilogue.cuh).
// Tile n waits for phase n of `full` and for phase n - 1 of `empty`: a freshly initialised barrier counts as having
// completed the phase before phase 0, so the first tile's acquire passes at once. Both sides walk the same tile
// sequence, and neither can get two phases ahead of the other (each waits for the other's previous phase), so parity
// cannot alias.
#pragma once

#include <cstdint>

#include "device/common/bounded_wait.cuh"
#include "device/ptx/mbarrier.cuh"

namespace mok::pipeline {

template <int kConsumerWarpgroups, int kConsumerThreads, int kEpilogueThreads>
class EpilogueHandoff {
  public:
    struct Storage {
        uint64_t full[kConsumerWarpgroups];   // phase n completes when consumer w has written tile n
        uint64_t empty[kConsumerWarpgroups];  // phase n completes when the epilogue threads have read tile n
    };

    __device__ explicit EpilogueHandoff(Storage& storage) : storage_(storage) {}

    // One thread initialises; the caller then syncs the block. Every thread of the arriving side arrives.
    __device__ void init() {
        for (int w = 0; w < kConsumerWarpgroups; ++w) {
            ptx::mbarrier_init(&storage_.full[w], kConsumerThreads);
            ptx::mbarrier_init(&storage_.empty[w], kEpilogueThreads);
        }
        ptx::fence_mbarrier_init();
    }

    // Consumer warpgroup w, before writing its `tile_number`-th tile (0, 1, ...) into its buffer.
    __device__ bool acquire(const device::WaitContext& ctx, int w, int32_t tile_number) {
        const uint32_t parity = (static_cast<uint32_t>(tile_number) & 1u) ^ 1u;
        return ptx::mbarrier_wait_parity_bounded(ctx, WaitSite::kEpilogueHandoff, &storage_.empty[w], parity);
    }

    // Every thread of consumer warpgroup w, after its writes of the tile.
    __device__ void commit(int w) { ptx::mbarrier_arrive_release_cta(&storage_.full[w]); }

    // The epilogue threads, before reading consumer w's `tile_number`-th tile.
    __device__ bool wait(const device::WaitContext& ctx, int w, int32_t tile_number) {
        const uint32_t parity = static_cast<uint32_t>(tile_number) & 1u;
        return ptx::mbarrier_wait_parity_bounded(ctx, WaitSite::kEpilogueHandoff, &storage_.full[w], parity);
    }

    // Every epilogue thread, after its reads of consumer w's buffer.
    __device__ void release(int w) { ptx::mbarrier_arrive_release_cta(&storage_.empty[w]); }

  private:
    Storage& storage_;
};

}  // namespace mok::pipeline
