// Makes a CUDA device current for the duration of a scope and restores the caller's afterwards, so that mok's
// calls run on the layer's device without changing the calling thread's state.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "mok/status.hpp"

namespace mok::cuda {

class DeviceGuard {
  public:
    DeviceGuard() = default;
    ~DeviceGuard() {
        if (previous_ >= 0) {
            cudaSetDevice(previous_);
        }
    }
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

    // Makes `device` current; a no-op (and no driver call beyond the query) when it already is.
    Status use(int device) {
        int current = -1;
        cudaError_t error = cudaGetDevice(&current);
        if (error == cudaSuccess && current != device) {
            error = cudaSetDevice(device);
            if (error == cudaSuccess) {
                previous_ = current;
            }
        }
        if (error != cudaSuccess) {
            return {StatusCode::kCudaError,
                    "making cuda:" + std::to_string(device) + " current: " + cudaGetErrorString(error)};
        }
        return Status::ok();
    }

  private:
    int previous_ = -1;  // the device to restore, or -1 when nothing was changed
};

}  // namespace mok::cuda
