#include "api/host_tensor.hpp"

#include <cstring>
#include <new>
#include <utility>

#include "common/bf16.hpp"

namespace mok::testing {
namespace {

// Aligned past the API's 16-byte rule, so that a test can misalign a view deliberately by offsetting it.
constexpr size_t kAlignment = 64;

}  // namespace

void HostTensor::AlignedDelete::operator()(std::byte* p) const {
    ::operator delete[](p, std::align_val_t{kAlignment});
}

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape, int64_t row_padding)
    : dtype_(dtype), shape_(std::move(shape)), stride_(shape_.size(), 1) {
    const int rank = static_cast<int>(shape_.size());
    int64_t step = shape_[rank - 1] + (rank >= 2 ? row_padding : 0);
    for (int d = rank - 2; d >= 0; --d) {
        stride_[d] = step;
        step *= shape_[d];
    }
    bytes_ = static_cast<size_t>(step) * dtype_size(dtype_);
    data_.reset(new (std::align_val_t{kAlignment}) std::byte[bytes_ > 0 ? bytes_ : 1]);
    std::memset(data_.get(), 0, bytes_);
}

TensorView HostTensor::view() const {
    TensorView v;
    v.data = data_.get();
    v.dtype = dtype_;
    v.rank = static_cast<int>(shape_.size());
    for (int d = 0; d < v.rank; ++d) {
        v.shape[d] = shape_[d];
        v.stride[d] = stride_[d];
    }
    return v;
}

int64_t HostTensor::numel() const {
    int64_t count = 1;
    for (int64_t extent : shape_) {
        count *= extent;
    }
    return count;
}

int64_t HostTensor::offset(int64_t n) const {
    int64_t result = 0;
    for (int d = static_cast<int>(shape_.size()) - 1; d >= 0; --d) {
        result += (n % shape_[d]) * stride_[d];
        n /= shape_[d];
    }
    return result;
}

void HostTensor::set(int64_t n, double value) {
    std::byte* p = data_.get() + offset(n) * dtype_size(dtype_);
    switch (dtype_) {
        case DType::kBF16: {
            const uint16_t bits = round_to_bf16_bits(static_cast<float>(value));
            std::memcpy(p, &bits, sizeof(bits));
            break;
        }
        case DType::kF32: {
            const auto f = static_cast<float>(value);
            std::memcpy(p, &f, sizeof(f));
            break;
        }
        case DType::kI32: {
            const auto i = static_cast<int32_t>(value);
            std::memcpy(p, &i, sizeof(i));
            break;
        }
    }
}

double HostTensor::get(int64_t n) const {
    const std::byte* p = data_.get() + offset(n) * dtype_size(dtype_);
    switch (dtype_) {
        case DType::kBF16: {
            uint16_t bits;
            std::memcpy(&bits, p, sizeof(bits));
            return bf16_bits_to_float(bits);
        }
        case DType::kF32: {
            float f;
            std::memcpy(&f, p, sizeof(f));
            return f;
        }
        case DType::kI32: {
            int32_t i;
            std::memcpy(&i, p, sizeof(i));
            return i;
        }
    }
    return 0.0;
}

void HostTensor::assign(std::span<const double> values) {
    for (size_t n = 0; n < values.size(); ++n) {
        set(static_cast<int64_t>(n), values[n]);
    }
}

void HostTensor::assign(std::span<const int32_t> values) {
    for (size_t n = 0; n < values.size(); ++n) {
        set(static_cast<int64_t>(n), values[n]);
    }
}

std::vector<double> HostTensor::values() const {
    std::vector<double> out(numel());
    for (int64_t n = 0; n < numel(); ++n) {
        out[n] = get(n);
    }
    return out;
}

void HostTensor::poison() {
    std::memset(data_.get(), 0xff, bytes_);
}

}  // namespace mok::testing
