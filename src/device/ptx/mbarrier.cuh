// mbarrier wrappers: the completion mechanism of TMA loads, bulk copies and the GEMM stage rings.
//
// All arrive/wait pairs here use CTA scope with release (arrive) / acquire (wait) semantics: the barrier lives
// in the CTA's shared memory and orders the CTA's own threads and the async proxy's writes into it.
#pragma once

#include <cuda/ptx>

#include <cstdint>

#include "device/common/bounded_wait.cuh"

namespace mok::ptx {

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrival_count) {
    cuda::ptx::mbarrier_init(bar, arrival_count);
}

// Makes initialised barriers visible to the async proxy (TMA) and to the other threads before first use.
__device__ __forceinline__ void fence_mbarrier_init() {
    cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
}

// One arrival, release at CTA scope: the caller's prior shared-memory reads and writes happen before any
// waiter that observes the phase flip.
__device__ __forceinline__ void mbarrier_arrive_release_cta(uint64_t* bar) {
    cuda::ptx::mbarrier_arrive(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared, bar);
}

// One arrival that also announces `bytes` of async-proxy traffic the phase must wait for.
__device__ __forceinline__ void mbarrier_arrive_expect_tx_release_cta(uint64_t* bar, uint32_t bytes) {
    cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared, bar,
                                         bytes);
}

// True once the phase with parity `parity` has completed; acquire at CTA scope, so data the phase guarded
// (TMA writes, other threads' writes before their arrive) is visible afterwards.
__device__ __forceinline__ bool mbarrier_try_wait_parity_acquire_cta(uint64_t* bar, uint32_t parity) {
    return cuda::ptx::mbarrier_try_wait_parity(cuda::ptx::sem_acquire, cuda::ptx::scope_cta, bar, parity);
}

// Waits for phase `parity` of `bar`, bounded by ctx's timeout. False: the wait gave up (error recorded).
__device__ __forceinline__ bool mbarrier_wait_parity_bounded(const device::WaitContext& ctx, WaitSite site,
                                                             uint64_t* bar, uint32_t parity) {
    return device::bounded_wait(
        ctx, site, parity, [&] { return mbarrier_try_wait_parity_acquire_cta(bar, parity); },
        [&] { return static_cast<int64_t>(parity ^ 1u); });
}

}  // namespace mok::ptx
