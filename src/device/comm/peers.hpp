// Peer-pointer providers: how a rank's device code reaches another rank's symmetric window.
//
// The transport's device code is written once, templated on a provider with this interface:
//   int32_t rank, ep_size;                          this rank and the EP group's size
//   void* peer_ptr(int32_t peer, uint64_t offset)  byte `offset` of rank `peer`'s window (peer == rank allowed)
// and instantiated for exactly two providers:
//   NcclPeers     real ranks, one per GPU: the window is an NCCL symmetric window and peer addresses come from
//                 ncclGetLsaPointer (NVLink load/store mappings set up by NCCL).
//   VirtualPeers  R "virtual ranks" sharing one GPU in one launch: the windows are consecutive slices of one
//                 allocation. Each virtual rank also owns its own slice of the launch's blocks and its own local
//                 buffers, so EP 4 and 8 protocols run, and are tested, on one or two GPUs.
// Addresses from either are plain global addresses: loads, stores, atomics and bulk copies work on them.
#pragma once

#include <nccl.h>

#include <cstdint>

#if defined(__CUDACC__)
#include <nccl_device.h>
#endif

namespace mok::comm {

struct VirtualPeers {
    char* base = nullptr;        // window of virtual rank 0
    uint64_t window_stride = 0;  // bytes from one virtual rank's window to the next (the window size)
    int32_t rank = 0;
    int32_t ep_size = 1;

#if defined(__CUDACC__)
    __device__ __forceinline__ void* peer_ptr(int32_t peer, uint64_t offset) const {
        return base + static_cast<uint64_t>(peer) * window_stride + offset;
    }
#endif
};

struct NcclPeers {
    ncclWindow_t window = nullptr;  // registered with NCCL_WIN_COLL_SYMMETRIC on every rank of the group
    int32_t rank = 0;               // rank in the communicator, which is also the LSA rank: the host checks that
                                    // the whole communicator is one LSA team (host/comm/nccl_window.cpp)
    int32_t ep_size = 1;

#if defined(__CUDACC__)
    __device__ __forceinline__ void* peer_ptr(int32_t peer, uint64_t offset) const {
        return ncclGetLsaPointer(window, offset, peer);
    }
#endif
};

}  // namespace mok::comm
