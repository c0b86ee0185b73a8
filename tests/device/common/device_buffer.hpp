// Device memory for GPU tests: an owning buffer with typed upload/download, and CUDA error checks that fail
// the test (never abort it silently).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/device_status.hpp"

namespace mok::test {

#define MOK_ASSERT_CUDA(call)                                                                  \
    do {                                                                                       \
        const cudaError_t mok_error_ = (call);                                                 \
        ASSERT_EQ(mok_error_, cudaSuccess) << #call << ": " << cudaGetErrorString(mok_error_); \
    } while (false)

// An owning device allocation of `count` elements of T.
template <typename T>
class DeviceBuffer {
  public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t count) : count_(count) {
        if (count_ > 0 && cudaMalloc(&data_, count_ * sizeof(T)) != cudaSuccess) {
            data_ = nullptr;
            count_ = 0;
            ADD_FAILURE() << "cudaMalloc of " << count * sizeof(T) << " bytes failed";
        }
    }
    explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
        swap(other);
        return *this;
    }
    ~DeviceBuffer() {
        if (data_ != nullptr) {
            cudaFree(data_);
        }
    }

    T* get() const { return data_; }
    size_t size() const { return count_; }

    void upload(const std::vector<T>& host) {
        ASSERT_EQ(host.size(), count_);
        if (count_ > 0) {
            MOK_ASSERT_CUDA(cudaMemcpy(data_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
        }
    }
    std::vector<T> download() const {
        std::vector<T> host(count_);
        if (count_ > 0 && cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess) {
            ADD_FAILURE() << "cudaMemcpy device -> host failed";
        }
        return host;
    }
    // Fills every byte with `byte` (poisoning: 0xff makes every bf16 and fp32 element a NaN).
    void fill_bytes(int byte) {
        if (count_ > 0) {
            MOK_ASSERT_CUDA(cudaMemset(data_, byte, count_ * sizeof(T)));
        }
    }

  private:
    void swap(DeviceBuffer& other) {
        std::swap(data_, other.data_);
        std::swap(count_, other.count_);
    }
    T* data_ = nullptr;
    size_t count_ = 0;
};

// Byte pattern that makes every bf16 and fp32 element a NaN.
inline constexpr int kPoisonByte = 0xff;

// A zeroed device error record and a check that it stayed clean.
class DeviceStatusRecord {
  public:
    DeviceStatusRecord() : buffer_(1) { buffer_.fill_bytes(0); }
    DeviceStatus* get() const { return buffer_.get(); }
    void reset() { buffer_.fill_bytes(0); }
    DeviceStatus read() const { return buffer_.download()[0]; }

  private:
    DeviceBuffer<DeviceStatus> buffer_;
};

inline bool has_gpu() {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

inline int gpu_count() {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

}  // namespace mok::test
