// Non-owning tensor views: the only way tensors cross mok's public API.
//
// A view is a pointer, a dtype, a device, a shape and strides in elements (not bytes). mok never takes
// ownership and never reallocates; the validation in MoeLayer checks every view against the contract in
// docs/semantics.md before any work starts.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace mok {

enum class DType : uint8_t {
    kBF16,  // bfloat16, stored as its 16 raw bits
    kF32,
    kI32,
};

size_t dtype_size(DType dtype);
const char* to_string(DType dtype);

enum class DeviceType : uint8_t { kCpu, kCuda };

struct Device {
    DeviceType type = DeviceType::kCpu;
    int index = 0;  // CUDA ordinal; 0 for the CPU

    static Device cpu() { return {DeviceType::kCpu, 0}; }
    static Device cuda(int index) { return {DeviceType::kCuda, index}; }
    bool operator==(const Device&) const = default;
};

std::string to_string(const Device& device);

struct TensorView {
    static constexpr int kMaxRank = 4;

    void* data = nullptr;
    DType dtype = DType::kBF16;
    Device device{};
    int rank = 0;
    std::array<int64_t, kMaxRank> shape{};   // elements per dimension, outermost first
    std::array<int64_t, kMaxRank> stride{};  // elements between neighbours in each dimension

    // A row-major view over `shape`; more than kMaxRank dimensions give an undefined view (null data).
    static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                 Device device = Device::cpu());

    bool defined() const { return data != nullptr; }
    int64_t numel() const;
    bool is_contiguous() const;
    // Whether the two views may share a byte: their spans, from the first element's first byte to the last
    // element's last byte, intersect (views whose elements interleave within one span count as overlapping).
    bool overlaps(const TensorView& other) const;
    // "[4096, 7168] bf16 cpu" -- for error messages.
    std::string describe() const;

    template <typename T>
    T* data_as() const {
        return static_cast<T*>(data);
    }
};

}  // namespace mok
