// Host tensors for the API tests: owned, 16-byte aligned storage with optionally padded rows, read and written
// as doubles in row-major element order whatever the dtype and padding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "mok/tensor.hpp"

namespace mok::testing {

class HostTensor {
  public:
    HostTensor() = default;
    // Zero-filled. Rows of 2-D and 3-D tensors hold `row_padding` extra elements past their width.
    HostTensor(DType dtype, std::vector<int64_t> shape, int64_t row_padding = 0);

    TensorView view() const;
    int64_t numel() const;
    DType dtype() const { return dtype_; }

    // Element n in row-major order. bf16 and fp32 tensors round the value to their precision.
    void set(int64_t n, double value);
    double get(int64_t n) const;
    void assign(std::span<const double> values);
    void assign(std::span<const int32_t> values);
    std::vector<double> values() const;
    // Every byte 0xff (NaN in bf16 and fp32, -1 in int32), padding included: a result never written shows up.
    void poison();

  private:
    int64_t offset(int64_t n) const;

    struct AlignedDelete {
        void operator()(std::byte* p) const;
    };

    DType dtype_ = DType::kBF16;
    std::vector<int64_t> shape_;
    std::vector<int64_t> stride_;
    size_t bytes_ = 0;
    std::unique_ptr<std::byte[], AlignedDelete> data_;
};

}  // namespace mok::testing
