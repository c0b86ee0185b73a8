// mok::Communicator (mok/comm.hpp) on an NCCL communicator: what the CUDA backend's workspace registers its
// symmetric window with when every EP rank runs in its own process.
#pragma once

#include <memory>
#include <utility>

#include "host/comm/nccl_communicator.hpp"
#include "mok/comm.hpp"

namespace mok::comm {

class EpCommunicator final : public Communicator {
  public:
    EpCommunicator(std::unique_ptr<NcclCommunicator> nccl, int device)
        : nccl_(std::move(nccl)), rank_(nccl_->rank()), size_(nccl_->size()), device_(device) {}

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    int device() const override { return device_; }
    const NcclCommunicator& nccl() const { return *nccl_; }

  private:
    std::unique_ptr<NcclCommunicator> nccl_;
    int rank_;  // read once: the values never change, and NCCL's queries are not free
    int size_;
    int device_;  // the CUDA device the communicator was made on
};

// The NCCL communicator behind `communicator`, or null when it was not made by Communicator::create or borrow.
const EpCommunicator* as_ep_communicator(const Communicator* communicator);

}  // namespace mok::comm
