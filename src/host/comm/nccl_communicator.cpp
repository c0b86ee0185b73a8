#include "host/comm/nccl_communicator.hpp"

#include <string>

namespace mok::comm {

Status nccl_status(ncclResult_t result, const char* what) {
    if (result == ncclSuccess) {
        return Status::ok();
    }
    return {StatusCode::kNcclError, std::string(what) + ": " + ncclGetErrorString(result)};
}

Status NcclCommunicator::create(Bootstrap& bootstrap, int rank, int num_ranks, std::unique_ptr<NcclCommunicator>* out) {
    if (num_ranks < 1 || rank < 0 || rank >= num_ranks) {
        return Status::invalid_argument("communicator rank", "0 <= rank < num_ranks");
    }
    ncclUniqueId id{};
    if (rank == 0) {
        MOK_RETURN_IF_ERROR(nccl_status(ncclGetUniqueId(&id), "ncclGetUniqueId"));
    }
    MOK_RETURN_IF_ERROR(bootstrap.broadcast(&id, sizeof(id), 0));
    return create(id, rank, num_ranks, out);
}

Status NcclCommunicator::create(const ncclUniqueId& id, int rank, int num_ranks,
                                std::unique_ptr<NcclCommunicator>* out) {
    if (num_ranks < 1 || rank < 0 || rank >= num_ranks) {
        return Status::invalid_argument("communicator rank", "0 <= rank < num_ranks");
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclComm_t comm = nullptr;
    MOK_RETURN_IF_ERROR(
        nccl_status(ncclCommInitRankConfig(&comm, num_ranks, id, rank, &config), "ncclCommInitRankConfig"));
    out->reset(new NcclCommunicator(comm, true));
    return Status::ok();
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::borrow(ncclComm_t comm) {
    return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, false));
}

NcclCommunicator::~NcclCommunicator() {
    if (owned_) {
        ncclCommDestroy(comm_);
    }
}

int NcclCommunicator::rank() const {
    int rank = -1;
    ncclCommUserRank(comm_, &rank);
    return rank;
}

int NcclCommunicator::size() const {
    int size = 0;
    ncclCommCount(comm_, &size);
    return size;
}

}  // namespace mok::comm
