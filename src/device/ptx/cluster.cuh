// Thread-block clusters: a CTA's rank in its cluster, the cluster-wide barrier, and arrivals on a peer CTA's
// mbarriers through distributed shared memory (the grouped GEMM's cluster-pair arrangement).
#pragma once

#include <cuda/ptx>

#include <cstdint>

namespace mok::ptx {

// This CTA's rank within its cluster.
__device__ __forceinline__ uint32_t cluster_cta_rank() {
    return cuda::ptx::get_sreg_cluster_ctarank();
}

// barrier.cluster.arrive (release) then barrier.cluster.wait (acquire), by every thread of every CTA of the
// cluster: what each CTA wrote to shared memory before it (barrier initialisation included) is visible to the
// others after it, and no CTA passes it while another may still touch its shared memory.
__device__ __forceinline__ void cluster_sync() {
    cuda::ptx::barrier_cluster_arrive();
    cuda::ptx::barrier_cluster_wait();
}

// One arrival on the mbarrier at `local`'s offset in the shared memory of cluster CTA `rank`, release at CTA scope.
// What it hands over is a stage whose reads are complete: the arriving warp's wgmma reads of the stage ended at
// its wgmma wait, before this arrival in program order, and a completed read cannot see the peer's later TMA
// write. No data passes the other way, so no cluster-scope release is needed, and a release at cluster scope
// cost the consumers dearly (the cluster-pair GEMM ran at 0.6x of the cooperative one with it). The address stays a
// 32-bit shared::cluster one (mapa), not a generic pointer: the consumers that arrive here hold a 128-register
// accumulator, and the 64-bit form cost them a spill.
__device__ __forceinline__ void mbarrier_arrive_rank(uint64_t* local, uint32_t rank) {
    const auto local_address = static_cast<uint32_t>(__cvta_generic_to_shared(local));
    uint32_t remote_address;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_address) : "r"(local_address), "r"(rank));
    asm volatile("mbarrier.arrive.release.cta.shared::cluster.b64 _, [%0];" ::"r"(remote_address) : "memory");
}

}  // namespace mok::ptx
