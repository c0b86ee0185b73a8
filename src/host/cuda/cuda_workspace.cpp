#include "host/cuda/cuda_workspace.hpp"

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "host/comm/communicator.hpp"
#include "host/cuda/device_guard.hpp"

namespace mok::cuda {

CudaWorkspace::CudaWorkspace(Device device, size_t bytes, char* base, std::unique_ptr<comm::NcclWindow> window,
                             std::shared_ptr<Communicator> communicator)
    : device_(device),
      bytes_(bytes),
      base_(base),
      window_(std::move(window)),
      communicator_(std::move(communicator)),
      epoch_(std::make_shared<SyncEpoch>()) {}

CudaWorkspace::~CudaWorkspace() {
    DeviceGuard guard;
    if (!guard.use(device_.index).is_ok()) {
        return;
    }
    if (window_ != nullptr) {
        // Deregistering is collective: every rank of the group destroys its workspace.
        window_.reset();
    } else if (base_ != nullptr) {
        cudaFree(base_);
    }
}

Status CudaWorkspace::create_local(Device device, size_t bytes, std::shared_ptr<Workspace>* out) {
    DeviceGuard guard;
    MOK_RETURN_IF_ERROR(guard.use(device.index));
    void* base = nullptr;
    if (bytes > 0) {
        cudaError_t error = cudaMalloc(&base, bytes);
        // Zero is every flag's and counter's initial value (the transport's flags only grow from there).
        if (error == cudaSuccess) {
            error = cudaMemset(base, 0, bytes);
            if (error == cudaSuccess) {
                error = cudaDeviceSynchronize();
            }
            if (error != cudaSuccess) {
                cudaFree(base);
            }
        }
        if (error != cudaSuccess) {
            return {StatusCode::kCudaError, "allocating a workspace of " + std::to_string(bytes) + " bytes on " +
                                                to_string(device) + ": " + cudaGetErrorString(error)};
        }
    }
    out->reset(new CudaWorkspace(device, bytes, static_cast<char*>(base), nullptr, nullptr));
    return Status::ok();
}

Status CudaWorkspace::create_shared(Device device, size_t bytes, std::shared_ptr<Communicator> communicator,
                                    std::shared_ptr<Workspace>* out) {
    const comm::EpCommunicator* ep = comm::as_ep_communicator(communicator.get());
    if (ep == nullptr) {
        return Status::invalid_argument("communicator", "a Communicator made by Communicator::create or borrow");
    }
    if (ep->device() != device.index) {
        return Status::invalid_argument("device", "the communicator's device (cuda:" + std::to_string(ep->device()) +
                                                      "), got " + to_string(device));
    }
    DeviceGuard guard;
    MOK_RETURN_IF_ERROR(guard.use(device.index));
    // NCCL windows come in whole granules, and every rank registers the same size.
    const uint64_t window_bytes = layout::align_up(bytes > 0 ? bytes : 1, layout::kWindowGranularity);
    std::unique_ptr<comm::NcclWindow> window;
    MOK_RETURN_IF_ERROR(comm::NcclWindow::create(ep->nccl(), window_bytes, &window));
    char* base = window->window();
    out->reset(new CudaWorkspace(device, window_bytes, base, std::move(window), std::move(communicator)));
    return Status::ok();
}

Status CudaWorkspace::bind(const TransportStateKey& key) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!key_) {
        key_ = key;
        return Status::ok();
    }
    if (*key_ != key) {
        return Status::invalid_argument(
            "workspace", "a Workspace whose transport state is laid out for this layer (" + key.describe() +
                             "); this one serves layers of " + key_->describe() +
                             ", and layers of another T, H, k, E/R or topology need a Workspace of their own");
    }
    return Status::ok();
}

std::shared_ptr<SyncEpoch> CudaWorkspace::epoch() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return epoch_;
}

void CudaWorkspace::close_epoch(bool failed) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (failed) {
        epoch_->failed = true;
    }
    epoch_ = std::make_shared<SyncEpoch>();
}

}  // namespace mok::cuda
