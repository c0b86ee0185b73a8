// A barrier across the ranks of the EP group, bounded like every wait.
//
// It follows the protocol of NCCL's LSA barrier (each rank stores its new epoch into every peer's inbox slot
// with a release, then waits until every slot of its own inbox reached the epoch) but over mok's own window
// words, because every wait here must give up after the peer timeout and report the missing peer instead of
// spinning forever. The epoch only grows (control->barrier_epoch), so the inbox is never reset.
#pragma once

#include <cstdint>

#include "common/device_status.hpp"
#include "device/comm/signals.cuh"
#include "device/common/bounded_wait.cuh"
#include "device/layout/transport_layout.hpp"
#include "device/ptx/atomics.cuh"

namespace mok::comm {

template <typename Peers>
struct BarrierParams {
    Peers peers;
    layout::SymmetricLayout window;
    layout::TransportControl* control;
    device::WaitContext ctx;
};

// Block-wide; one block per rank. False when a peer did not arrive within the timeout.
template <typename Peers>
__device__ __forceinline__ bool peer_barrier(const BarrierParams<Peers>& p) {
    const uint64_t epoch = p.control->barrier_epoch + 1;
    // Everything the block did before the barrier is ordered before the arrivals (cumulative releases).
    __syncthreads();
    for (int32_t peer = threadIdx.x; peer < p.peers.ep_size; peer += blockDim.x) {
        auto* inbox = static_cast<uint64_t*>(p.peers.peer_ptr(peer, p.window.barrier_inbox_of(p.peers.rank)));
        ptx::st_release_sys(inbox, epoch);
    }
    bool ok = true;
    for (int32_t peer = threadIdx.x; ok && peer < p.peers.ep_size; peer += blockDim.x) {
        const auto* slot =
            static_cast<const uint64_t*>(p.peers.peer_ptr(p.peers.rank, p.window.barrier_inbox_of(peer)));
        ok = wait_flag_sys(p.ctx, WaitSite::kPeerBarrier, slot, epoch);
    }
    ok = __syncthreads_and(ok) != 0;
    if (threadIdx.x == 0) {
        p.control->barrier_epoch = epoch;
    }
    return ok;
}

}  // namespace mok::comm
