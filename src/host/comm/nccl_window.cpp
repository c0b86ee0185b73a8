#include "host/comm/nccl_window.hpp"

#include <cuda_runtime.h>
#include <nccl_device/core.h>

#include <string>

namespace mok::comm {

Status NcclWindow::create(const NcclCommunicator& comm, const layout::SymmetricLayout& layout,
                          std::unique_ptr<NcclWindow>* out) {
    if (comm.size() != layout.shape.ep_size) {
        return Status::invalid_argument("communicator size", "the EP size " + std::to_string(layout.shape.ep_size));
    }
    return create(comm, layout.window_bytes, out);
}

Status NcclWindow::create(const NcclCommunicator& comm, uint64_t bytes, std::unique_ptr<NcclWindow>* out) {
    const int rank = comm.rank();
    const int size = comm.size();
    if (bytes == 0 || bytes % layout::kWindowGranularity != 0) {
        return Status::invalid_argument(
            "window bytes",
            "a positive multiple of " + std::to_string(layout::kWindowGranularity) + ", got " + std::to_string(bytes));
    }
    // NcclPeers addresses peer p as LSA rank p: the whole communicator must be one LSA team, in rank order.
    const ncclTeam_t lsa = ncclTeamLsa(comm.get());
    if (lsa.nRanks != size || lsa.rank != rank) {
        return {StatusCode::kNotSupported, "the EP group spans " + std::to_string(size) + " ranks but only " +
                                               std::to_string(lsa.nRanks) +
                                               " are reachable by NVLink load/store; the network path is not built"};
    }
    void* data = nullptr;
    MOK_RETURN_IF_ERROR(nccl_status(ncclMemAlloc(&data, bytes), "ncclMemAlloc"));
    // Zero before registering: the registration is collective, so once any rank returns from it every rank has
    // finished its (synchronised) zeroing, and a peer's first flag cannot be overwritten by it.
    cudaError_t error = cudaMemset(data, 0, bytes);
    if (error == cudaSuccess) {
        error = cudaDeviceSynchronize();
    }
    if (error != cudaSuccess) {
        ncclMemFree(data);
        return {StatusCode::kCudaError, std::string("zeroing the symmetric window: ") + cudaGetErrorString(error)};
    }
    ncclWindow_t window = nullptr;
    const Status registered = nccl_status(
        ncclCommWindowRegister(comm.get(), data, bytes, &window, NCCL_WIN_COLL_SYMMETRIC), "ncclCommWindowRegister");
    if (!registered.is_ok()) {
        ncclMemFree(data);
        return registered;
    }
    out->reset(new NcclWindow(comm.get(), window, static_cast<char*>(data), rank, size));
    return Status::ok();
}

NcclWindow::~NcclWindow() {
    ncclCommWindowDeregister(comm_, window_);
    ncclMemFree(data_);
}

}  // namespace mok::comm
