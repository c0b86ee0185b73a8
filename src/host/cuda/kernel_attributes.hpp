// Kernel set-up done once per (kernel, device), never on the enqueue path of every step: attributes, and loading.
//
// Why loading: CUDA loads a kernel's code lazily, at its first launch, by default (CUDA_MODULE_LOADING=LAZY), and
// loading may synchronise the context. With virtual ranks, the kernels of ranks enqueued earlier spin (bounded)
// on a rank enqueued later; the first launch of a kernel on the way (the backward's first grads_announce, say)
// then blocked the host until the spinning kernels timed out, and the later rank was never enqueued in time.
// (CUDA_MODULE_LOADING=EAGER made the same test pass on an H200.) The layer's pipelined steps have the same shape
// within one rank: a GEMM that waits for the dispatch's row tiles is enqueued before the dispatch, so the first
// launch of any kernel between the two (the down projection's, say) stalled until the GEMM timed out. So every
// kernel a step can launch is loaded before its first step: load_kernels below, called once per device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "host/cuda/cuda_status.hpp"
#include "mok/status.hpp"

namespace mok::host {

// Runs `set_up()` once per CUDA device (the current one), for the static `state` of one kind of set-up; a failed
// set-up runs again on the next call.
struct PerDeviceOnce {
    std::mutex mutex;
    uint64_t devices_done = 0;  // bit d: done on device d
};

template <typename SetUpFn>
Status once_per_device(PerDeviceOnce& state, SetUpFn&& set_up) {
    constexpr int kMaxDevices = 64;
    int device = 0;
    const cudaError_t error = cudaGetDevice(&device);
    MOK_RETURN_IF_ERROR(cuda_status(error, "cudaGetDevice"));
    if (device >= kMaxDevices) {
        return {StatusCode::kNotSupported, "CUDA device " + std::to_string(device) + ": at most " +
                                               std::to_string(kMaxDevices) + " devices per process"};
    }
    const std::lock_guard<std::mutex> lock(state.mutex);
    if ((state.devices_done >> device) & 1u) {
        return Status::ok();
    }
    MOK_RETURN_IF_ERROR(set_up(device));
    state.devices_done |= uint64_t{1} << device;
    return Status::ok();
}

template <auto kKernel>
Status allow_max_dynamic_shared_memory() {
    static PerDeviceOnce state;
    return once_per_device(state, [](int device) -> Status {
        // A block's limit covers its static shared memory too (the grouped GEMM's tail table), so the dynamic
        // part may have what the static part leaves.
        int max_bytes = 0;
        cudaFuncAttributes attributes{};
        cudaError_t error = cudaDeviceGetAttribute(&max_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
        if (error == cudaSuccess) {
            error = cudaFuncGetAttributes(&attributes, kKernel);
        }
        if (error == cudaSuccess) {
            const int dynamic_bytes = max_bytes - static_cast<int>(attributes.sharedSizeBytes);
            error = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_bytes);
        }
        return cuda_status(error, "raising a kernel's dynamic shared-memory limit");
    });
}

// Loads each kernel's code now (cudaFuncGetAttributes forces a lazily loaded kernel in), once per device.
template <auto... kKernels>
Status load_kernels(const char* what) {
    static PerDeviceOnce state;
    return once_per_device(state, [what](int) -> Status {
        for (const void* kernel : {reinterpret_cast<const void*>(kKernels)...}) {
            cudaFuncAttributes attributes{};
            const cudaError_t error = cudaFuncGetAttributes(&attributes, kernel);
            MOK_RETURN_IF_ERROR(cuda_status(error, std::string("loading the ") + what + " kernels"));
        }
        return Status::ok();
    });
}

}  // namespace mok::host
