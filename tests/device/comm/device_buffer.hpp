// Device memory for the GPU tests: an owning buffer with upload, download and poisoning. Failures throw, which
// GoogleTest reports as a failed test (the library itself never throws).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace mok::comm::testing {

inline void check_cuda(cudaError_t error, const char* what) {
    if (error != cudaSuccess) {
        throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(error));
    }
}

// Every byte 0xff: a NaN as bf16 and as fp32, and never a value a correct run writes.
inline constexpr int kPoisonByte = 0xff;

template <typename T>
class DeviceBuffer {
  public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t count) { allocate(count); }
    ~DeviceBuffer() { cudaFree(data_); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void allocate(size_t count) {
        cudaFree(data_);
        data_ = nullptr;
        count_ = count;
        // One element at least, so that an empty tensor still has a valid address.
        check_cuda(cudaMalloc(&data_, (count > 0 ? count : 1) * sizeof(T)), "cudaMalloc");
        check_cuda(cudaMemset(data_, 0, (count > 0 ? count : 1) * sizeof(T)), "cudaMemset");
    }
    void upload(const std::vector<T>& host) {
        allocate(host.size());
        check_cuda(cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
    }
    std::vector<T> download() const {
        std::vector<T> host(count_);
        check_cuda(cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
        return host;
    }
    void poison() { check_cuda(cudaMemset(data_, kPoisonByte, count_ * sizeof(T)), "poison"); }

    T* data() const { return data_; }
    size_t size() const { return count_; }

  private:
    T* data_ = nullptr;
    size_t count_ = 0;
};

template <typename T>
std::vector<T> download(const T* device, size_t count) {
    std::vector<T> host(count);
    check_cuda(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
}

}  // namespace mok::comm::testing
