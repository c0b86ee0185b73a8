// Kernel attributes set once per (kernel, device), never on the enqueue path of every step.
//
// Why once: cudaFuncSetAttribute is a host-side change to a kernel that other streams may be running. With
// virtual ranks, the kernels of ranks enqueued earlier spin (bounded) on a rank enqueued later; an attribute
// call on that later rank's enqueue path kept it from launching until the spinning ranks timed out. Setting the
// limit once, to the device's opt-in maximum, keeps every later enqueue free of attribute calls.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "mok/status.hpp"

namespace mok::host {

template <auto kKernel>
Status allow_max_dynamic_shared_memory() {
    static std::mutex mutex;
    static uint64_t devices_done = 0;  // bit d: done on device d
    constexpr int kMaxDevices = 64;
    int device = 0;
    cudaError_t error = cudaGetDevice(&device);
    if (error != cudaSuccess || device >= kMaxDevices) {
        return {StatusCode::kCudaError, std::string("cudaGetDevice: ") + cudaGetErrorString(error)};
    }
    const std::lock_guard<std::mutex> lock(mutex);
    if ((devices_done >> device) & 1u) {
        return Status::ok();
    }
    int max_bytes = 0;
    error = cudaDeviceGetAttribute(&max_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (error == cudaSuccess) {
        error = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_bytes);
    }
    if (error != cudaSuccess) {
        return {StatusCode::kCudaError,
                std::string("raising a kernel's dynamic shared-memory limit: ") + cudaGetErrorString(error)};
    }
    devices_done |= uint64_t{1} << device;
    return Status::ok();
}

}  // namespace mok::host
