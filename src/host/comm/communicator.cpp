// Communicator's factories: NCCL communicators made from the caller's unique id, or borrowed from the caller.
#include "host/comm/communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <string>

#include "host/cuda/device_guard.hpp"

namespace mok {
namespace {

static_assert(sizeof(ncclUniqueId) == CommUniqueId::kBytes, "CommUniqueId carries NCCL's unique id byte for byte");

Status check_device(int device, const char* path) {
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess || count == 0) {
        return {StatusCode::kNotSupported, std::string("no CUDA device is visible: ") + cudaGetErrorString(error)};
    }
    if (device < 0 || device >= count) {
        return Status::invalid_argument(
            path, "a CUDA device in [0, " + std::to_string(count) + "), got " + std::to_string(device));
    }
    return Status::ok();
}

}  // namespace

Status Communicator::make_unique_id(CommUniqueId* out) {
    if (out == nullptr) {
        return Status::invalid_argument("out", "a non-null pointer");
    }
    ncclUniqueId id{};
    MOK_RETURN_IF_ERROR(comm::nccl_status(ncclGetUniqueId(&id), "ncclGetUniqueId"));
    std::memcpy(out->bytes.data(), &id, sizeof(id));
    return Status::ok();
}

Status Communicator::create(const CommUniqueId& id, int rank, int num_ranks, int device,
                            std::shared_ptr<Communicator>* out) {
    if (out == nullptr) {
        return Status::invalid_argument("out", "a non-null pointer");
    }
    if (num_ranks < 1) {
        return Status::invalid_argument("num_ranks", "at least 1, got " + std::to_string(num_ranks));
    }
    if (rank < 0 || rank >= num_ranks) {
        return Status::invalid_argument(
            "rank", "a rank in [0, " + std::to_string(num_ranks) + "), got " + std::to_string(rank));
    }
    MOK_RETURN_IF_ERROR(check_device(device, "device"));
    // NCCL binds the communicator to the device current on this thread.
    cuda::DeviceGuard guard;
    MOK_RETURN_IF_ERROR(guard.use(device));
    ncclUniqueId nccl_id{};
    std::memcpy(&nccl_id, id.bytes.data(), sizeof(nccl_id));
    std::unique_ptr<comm::NcclCommunicator> nccl;
    MOK_RETURN_IF_ERROR(comm::NcclCommunicator::create(nccl_id, rank, num_ranks, &nccl));
    *out = std::make_shared<comm::EpCommunicator>(std::move(nccl), device);
    return Status::ok();
}

Status Communicator::borrow(void* nccl_comm, int device, std::shared_ptr<Communicator>* out) {
    if (out == nullptr) {
        return Status::invalid_argument("out", "a non-null pointer");
    }
    if (nccl_comm == nullptr) {
        return Status::invalid_argument("nccl_comm", "an ncclComm_t, got null");
    }
    MOK_RETURN_IF_ERROR(check_device(device, "device"));
    auto* comm = static_cast<ncclComm_t>(nccl_comm);
    int comm_device = -1;
    MOK_RETURN_IF_ERROR(comm::nccl_status(ncclCommCuDevice(comm, &comm_device), "ncclCommCuDevice"));
    if (comm_device != device) {
        return Status::invalid_argument("device", "the CUDA device of the communicator (" +
                                                      std::to_string(comm_device) + "), got " + std::to_string(device));
    }
    *out = std::make_shared<comm::EpCommunicator>(comm::NcclCommunicator::borrow(comm), device);
    return Status::ok();
}

namespace comm {

const EpCommunicator* as_ep_communicator(const Communicator* communicator) {
    return dynamic_cast<const EpCommunicator*>(communicator);
}

}  // namespace comm
}  // namespace mok
