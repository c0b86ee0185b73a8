// The NCCL communicator the transport's windows are registered with: built by mok from a unique id that the
// caller's bootstrap distributes, or borrowed from the caller.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <memory>

#include "mok/status.hpp"

namespace mok::comm {

// How the ranks of a job reach each other before NCCL exists (the caller's MPI, torch.distributed store, ...).
class Bootstrap {
  public:
    virtual ~Bootstrap() = default;
    // Copies `bytes` bytes at `data` on rank `root` into `data` on every rank; returns once this rank has them.
    virtual Status broadcast(void* data, size_t bytes, int root) = 0;
};

Status nccl_status(ncclResult_t result, const char* what);

class NcclCommunicator {
  public:
    // Creates a communicator of `num_ranks` ranks on the CUDA device current on the calling thread; collective:
    // every rank calls it, with the same bootstrap group.
    static Status create(Bootstrap& bootstrap, int rank, int num_ranks, std::unique_ptr<NcclCommunicator>* out);
    // The same from a unique id the caller already distributed (rank 0 made it with ncclGetUniqueId).
    static Status create(const ncclUniqueId& id, int rank, int num_ranks, std::unique_ptr<NcclCommunicator>* out);
    // Uses the caller's communicator, which must outlive this object and stay the caller's to destroy.
    static std::unique_ptr<NcclCommunicator> borrow(ncclComm_t comm);
    ~NcclCommunicator();
    NcclCommunicator(const NcclCommunicator&) = delete;
    NcclCommunicator& operator=(const NcclCommunicator&) = delete;

    ncclComm_t get() const { return comm_; }
    int rank() const;
    int size() const;

  private:
    NcclCommunicator(ncclComm_t comm, bool owned) : comm_(comm), owned_(owned) {}

    ncclComm_t comm_;
    bool owned_;
};

}  // namespace mok::comm
