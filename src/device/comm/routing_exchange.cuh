// The routing exchange: every rank's expert ids and router weights reach every rank, with no host involvement,
// and the step counter advances.
//
// Rank s writes its [T, k] ids and weights into slot [p][s] of every rank's window (p = step parity) and then
// stores route_ready[p][s] = step there (release, system scope). That flag also announces s's x rows: s staged
// them into its window before this kernel (stream order), so an owner that observes the flag may pull them.
// The parity double-buffer lets a fast rank deliver step s + 1 while a slow one still plans step s: a rank writes
// step s + 2's ids into the buffer of step s only after it received the slow rank's step s + 1 ids, which that
// rank sends after its step s planning (docs/transport.md, "Routing exchange").
//
// One block per (rank, peer). The step is the rank's control->step + 1; every block reads it at its start, and
// the block that finishes last (acq_rel counter) stores it back, so the step's later kernels read the new value.
// Ranks also announce their dy rows for the backward (announce_grads): grads_ready[s] = step, same pattern.
#pragma once

#include <cstdint>

#include "device/layout/transport_layout.hpp"
#include "device/ptx/atomics.cuh"

namespace mok::comm {

// One block per (rank, peer) moves T k ids and weights (128 KiB each at 4096 tokens and k = 8). Each thread loads
// kExchangeBatch slots before it stores any: the compiler keeps every load after the stores before it (it cannot
// tell the peer's window from the caller's ids), so with loads and stores alternating each slot cost a whole load
// latency. 512 threads with 8 slots each in registers stay within ptxas's budget without spills (1024 did not).
inline constexpr int32_t kExchangeThreads = 512;
inline constexpr int32_t kExchangeBatch = 8;

template <typename Peers>
struct ExchangeParams {
    Peers peers;
    layout::SymmetricLayout window;
    const int32_t* expert_ids;    // [T, k] this rank's ids
    const float* router_weights;  // [T, k]
    layout::TransportControl* control;
};

// Copies this rank's ids and weights into `peer`'s window and flags them; block-wide.
template <typename Peers>
__device__ __forceinline__ void push_routing(const ExchangeParams<Peers>& p, int32_t peer, uint64_t step) {
    const int32_t parity = static_cast<int32_t>(step & 1);
    const int32_t me = p.peers.rank;
    auto* ids = static_cast<int32_t*>(p.peers.peer_ptr(peer, p.window.route_ids_of(parity, me)));
    auto* weights = static_cast<float*>(p.peers.peer_ptr(peer, p.window.route_weights_of(parity, me)));
    const int64_t slots = p.window.shape.slots();
    for (int64_t first = threadIdx.x; first < slots; first += kExchangeBatch * static_cast<int64_t>(blockDim.x)) {
        int32_t id[kExchangeBatch];
        float weight[kExchangeBatch];
#pragma unroll
        for (int32_t j = 0; j < kExchangeBatch; ++j) {
            const int64_t i = first + j * static_cast<int64_t>(blockDim.x);
            if (i < slots) {
                id[j] = p.expert_ids[i];
                weight[j] = p.router_weights[i];
            }
        }
#pragma unroll
        for (int32_t j = 0; j < kExchangeBatch; ++j) {
            const int64_t i = first + j * static_cast<int64_t>(blockDim.x);
            if (i < slots) {
                ids[i] = id[j];
                weights[i] = weight[j];
            }
        }
    }
    // The block barrier orders every thread's stores before thread 0's release; the release is cumulative.
    __syncthreads();
    if (threadIdx.x == 0) {
        auto* ready = static_cast<uint64_t*>(p.peers.peer_ptr(peer, p.window.route_ready_of(parity, me)));
        ptx::st_release_sys(ready, step);
    }
}

// Called by thread 0 of each of the rank's `num_blocks` exchange blocks after its push: the last one advances
// the rank's step. The acq_rel add orders each block's earlier read of control->step before the store below.
__device__ __forceinline__ void finish_exchange_block(layout::TransportControl* control, uint64_t step,
                                                      uint32_t num_blocks) {
    if (ptx::atom_add_acq_rel_gpu(&control->exchange_blocks_done, 1) + 1 == num_blocks) {
        control->exchange_blocks_done = 0;
        ptx::st_relaxed_gpu(&control->step, step);
    }
}

// Announces this rank's staged dy rows to `peer` for the current step; one thread.
template <typename Peers>
__device__ __forceinline__ void announce_grads(const Peers& peers, const layout::SymmetricLayout& window, int32_t peer,
                                               uint64_t step) {
    // Release at system scope: the dy rows staged by earlier work on this rank's stream come before it.
    ptx::st_release_sys(static_cast<uint64_t*>(peers.peer_ptr(peer, window.grads_ready_of(peers.rank))), step);
}

}  // namespace mok::comm
