#include "host/comm/virtual_window.hpp"

#include <cuda_runtime.h>

#include <string>

namespace mok::comm {

Status VirtualWindows::create(const layout::SymmetricLayout& layout, int32_t ep_size,
                              std::unique_ptr<VirtualWindows>* out) {
    if (ep_size < 1) {
        return Status::invalid_argument("virtual ranks", "at least one rank");
    }
    const uint64_t bytes = layout.window_bytes * static_cast<uint64_t>(ep_size);
    void* base = nullptr;
    cudaError_t error = cudaMalloc(&base, bytes);
    if (error == cudaSuccess) {
        error = cudaMemset(base, 0, bytes);
        if (error != cudaSuccess) {
            cudaFree(base);
        }
    }
    if (error != cudaSuccess) {
        return {StatusCode::kCudaError, "allocating " + std::to_string(ep_size) + " virtual-rank windows of " +
                                            std::to_string(layout.window_bytes) +
                                            " bytes: " + cudaGetErrorString(error)};
    }
    out->reset(new VirtualWindows(static_cast<char*>(base), layout.window_bytes, ep_size));
    return Status::ok();
}

VirtualWindows::~VirtualWindows() {
    cudaFree(base_);
}

}  // namespace mok::comm
