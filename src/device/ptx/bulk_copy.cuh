// Bulk copies (cp.async.bulk, non-tensor): the async-proxy data movers of the transport's row pipeline.
//
// A load (global -> shared) completes on an mbarrier: its bytes count against the transaction count the
// issuing thread announced with mbarrier_arrive_expect_tx_release_cta (device/ptx/mbarrier.cuh). A store
// (shared -> global) joins the issuing thread's current bulk async-group; commit_group closes the group and
// wait_group<N> waits until at most N of that thread's most recent groups are still pending. Groups are per
// thread: the thread that issues a store must be the one that commits and waits for it.
//
// Source and destination addresses are 16-byte aligned and sizes multiples of 16 (cp.async.bulk's rule);
// global addresses may be peer addresses (NVLink mappings of another rank's memory).
#pragma once

#include <cuda/ptx>

#include <cstdint>

namespace mok::ptx {

// Alignment and size granule of every bulk copy.
inline constexpr uint32_t kBulkCopyAlignment = 16;

// Copies `bytes` from global `src` into this CTA's shared `dst`; completion is reported to `bar`.
__device__ __forceinline__ void bulk_load_global_to_shared(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_global, dst, src, bytes, bar);
}

// Copies `bytes` from this CTA's shared `src` to global `dst` as part of the current bulk async-group.
__device__ __forceinline__ void bulk_store_shared_to_global(void* dst, const void* src, uint32_t bytes) {
    cuda::ptx::cp_async_bulk(cuda::ptx::space_global, cuda::ptx::space_shared, dst, src, bytes);
}

// Closes the current bulk async-group (an empty group is legal and completes at once).
__device__ __forceinline__ void bulk_commit_group() {
    cuda::ptx::cp_async_bulk_commit_group();
}

// Waits until at most kPending of this thread's most recent bulk async-groups are incomplete. Complete means
// the stores' writes are performed: visible to this thread, and to others after fence_proxy_async_global and
// a release (device/ptx/atomics.cuh). The wait is bounded by the copies themselves, which always finish.
template <int kPending>
__device__ __forceinline__ void bulk_wait_group() {
    cuda::ptx::cp_async_bulk_wait_group(cuda::ptx::n32_t<kPending>{});
}

// Waits until at most kPending of this thread's most recent bulk async-groups have not yet read their shared
// memory sources; their global writes may still be in flight. Enough before a source buffer is reused, and
// before the CTA exits. Bounded like bulk_wait_group.
template <int kPending>
__device__ __forceinline__ void bulk_wait_group_read() {
    cuda::ptx::cp_async_bulk_wait_group_read(cuda::ptx::n32_t<kPending>{});
}

}  // namespace mok::ptx
