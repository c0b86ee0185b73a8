#include "host/comm/local_workspace.hpp"

#include <cuda_runtime.h>

#include <string>

namespace mok::comm {

Status LocalWorkspace::create(const layout::LocalLayout& layout, std::unique_ptr<LocalWorkspace>* out) {
    void* data = nullptr;
    cudaError_t error = cudaMalloc(&data, layout.total_bytes);
    if (error == cudaSuccess) {
        error = cudaMemset(data, 0, layout.total_bytes);
        if (error != cudaSuccess) {
            cudaFree(data);
        }
    }
    if (error != cudaSuccess) {
        return {StatusCode::kCudaError, "allocating the transport's local block of " +
                                            std::to_string(layout.total_bytes) +
                                            " bytes: " + cudaGetErrorString(error)};
    }
    out->reset(new LocalWorkspace(layout, data));
    return Status::ok();
}

LocalWorkspace::~LocalWorkspace() {
    cudaFree(data_);
}

}  // namespace mok::comm
