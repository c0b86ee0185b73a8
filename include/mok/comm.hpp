// The expert-parallel group's communicator, for Backend::kCuda with one process (one GPU) per EP rank.
//
// mok builds its NCCL communicator from a unique id that the caller's own bootstrap distributes (MPI,
// torch.distributed, a file): rank 0 makes the id, every rank receives it and calls Communicator::create with
// it, collectively. A caller that already has an NCCL communicator for exactly the EP group may lend it instead
// (Communicator::borrow). The symmetric memory the transport needs is registered with this communicator when a
// Workspace is created with it, so Workspace::create is collective too.
//
// Not needed when every rank is local (Topology::num_local_ranks == ep_size: the CPU reference, or "virtual
// ranks" sharing one GPU).
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "mok/status.hpp"

namespace mok {

// NCCL's unique id, as opaque bytes (NCCL_UNIQUE_ID_BYTES).
struct CommUniqueId {
    static constexpr size_t kBytes = 128;
    std::array<uint8_t, kBytes> bytes{};
};

class Communicator {
  public:
    // Rank 0 of the EP group calls this, then hands the id to every rank through its bootstrap.
    static Status make_unique_id(CommUniqueId* out);
    // Collective over the EP group: each rank calls it with the same id, its rank in [0, num_ranks), and the CUDA
    // device it runs on (made current for the call).
    static Status create(const CommUniqueId& id, int rank, int num_ranks, int device,
                         std::shared_ptr<Communicator>* out);
    // Wraps the caller's ncclComm_t (passed as void* so that this header does not need nccl.h). The caller keeps
    // it alive for the Communicator's lifetime and destroys it afterwards; mok never does.
    static Status borrow(void* nccl_comm, int device, std::shared_ptr<Communicator>* out);

    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual int device() const = 0;
};

}  // namespace mok
