// A rank's symmetric window on real ranks: NCCL memory (ncclMemAlloc) registered as a symmetric window
// (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC), addressed from the device through NcclPeers
// (ncclGetLsaPointer). No NVLink multicast is requested: only load/store (LSA) peer mappings are used.
#pragma once

#include <nccl.h>

#include <cstdint>
#include <memory>

#include "device/comm/peers.hpp"
#include "device/layout/transport_layout.hpp"
#include "host/comm/nccl_communicator.hpp"
#include "mok/status.hpp"

namespace mok::comm {

class NcclWindow {
  public:
    // Collective over `comm`: every rank calls it with the same layout. The window is zeroed on every rank
    // before any rank returns (the registration is collective and each rank zeroes before registering), so
    // peers may signal into it at once. Fails with kNotSupported unless every rank of the communicator is
    // reachable by load/store (one NVLink domain): the network path is not built yet.
    static Status create(const NcclCommunicator& comm, const layout::SymmetricLayout& layout,
                         std::unique_ptr<NcclWindow>* out);
    // The same for a window of `bytes` (a multiple of layout::kWindowGranularity) whose layout the caller carves
    // itself: the layer's workspace, which holds the transport's window at its start.
    static Status create(const NcclCommunicator& comm, uint64_t bytes, std::unique_ptr<NcclWindow>* out);
    // Collective too (deregistration): every rank destroys its window.
    ~NcclWindow();
    NcclWindow(const NcclWindow&) = delete;
    NcclWindow& operator=(const NcclWindow&) = delete;

    NcclPeers peers() const { return NcclPeers{window_, rank_, size_}; }
    char* window() const { return data_; }

  private:
    NcclWindow(ncclComm_t comm, ncclWindow_t window, char* data, int rank, int size)
        : comm_(comm), window_(window), data_(data), rank_(rank), size_(size) {}

    ncclComm_t comm_;
    ncclWindow_t window_;
    char* data_;
    int rank_;
    int size_;
};

}  // namespace mok::comm
