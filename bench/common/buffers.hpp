// Owning handles for device memory and streams, so a benchmark case that throws midway frees what it took.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "bench/common/cuda_check.hpp"

namespace mok::bench {

// `count` elements of T on `device`, uninitialised (fill them: benchmarks never run on zeros).
template <typename T>
class DeviceBuffer {
  public:
    DeviceBuffer(int device, size_t count) : device_(device), count_(count) {
        int previous = 0;
        MOK_BENCH_CHECK_CUDA(cudaGetDevice(&previous));
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(device));
        void* data = nullptr;
        const cudaError_t error = cudaMalloc(&data, count * sizeof(T));
        cudaSetDevice(previous);
        MOK_BENCH_CHECK_CUDA(error);
        data_ = static_cast<T*>(data);
    }
    ~DeviceBuffer() { cudaFree(data_); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    T* get() const { return data_; }
    size_t count() const { return count_; }
    size_t bytes() const { return count_ * sizeof(T); }
    int device() const { return device_; }

  private:
    int device_ = 0;
    size_t count_ = 0;
    T* data_ = nullptr;
};

// A non-blocking stream on `device` (it does not synchronise with the legacy default stream).
class Stream {
  public:
    explicit Stream(int device) : device_(device) {
        int previous = 0;
        MOK_BENCH_CHECK_CUDA(cudaGetDevice(&previous));
        MOK_BENCH_CHECK_CUDA(cudaSetDevice(device));
        const cudaError_t error = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
        cudaSetDevice(previous);
        MOK_BENCH_CHECK_CUDA(error);
    }
    ~Stream() { cudaStreamDestroy(stream_); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    cudaStream_t get() const { return stream_; }
    int device() const { return device_; }
    void synchronize() const { MOK_BENCH_CHECK_CUDA(cudaStreamSynchronize(stream_)); }

  private:
    int device_ = 0;
    cudaStream_t stream_ = nullptr;
};

}  // namespace mok::bench
