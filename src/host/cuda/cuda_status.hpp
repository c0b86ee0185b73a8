// A CUDA runtime result as a Status: ok for cudaSuccess, otherwise kCudaError with "<what>: <CUDA's message>".
// The one translation every host-side caller of the runtime uses, so that every such error reads alike.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "mok/status.hpp"

namespace mok::host {

inline Status cuda_status(cudaError_t error, const std::string& what) {
    if (error == cudaSuccess) {
        return Status::ok();
    }
    return {StatusCode::kCudaError, what + ": " + cudaGetErrorString(error)};
}

}  // namespace mok::host
