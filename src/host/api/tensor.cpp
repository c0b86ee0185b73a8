#include "mok/tensor.hpp"

#include <cstdint>
#include <string>
#include <utility>

namespace mok {
namespace {

std::string join(const std::array<int64_t, TensorView::kMaxRank>& values, int rank) {
    std::string text = "[";
    for (int d = 0; d < rank; ++d) {
        text += (d == 0 ? "" : ", ") + std::to_string(values[d]);
    }
    return text + "]";
}

}  // namespace

size_t dtype_size(DType dtype) {
    switch (dtype) {
        case DType::kBF16:
            return 2;
        case DType::kF32:
        case DType::kI32:
            return 4;
    }
    return 0;
}

const char* to_string(DType dtype) {
    switch (dtype) {
        case DType::kBF16:
            return "bf16";
        case DType::kF32:
            return "fp32";
        case DType::kI32:
            return "int32";
    }
    return "unknown dtype";
}

std::string to_string(const Device& device) {
    switch (device.type) {
        case DeviceType::kCpu:
            return "cpu";
        case DeviceType::kCuda:
            return "cuda:" + std::to_string(device.index);
    }
    return "unknown device";
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device) {
    TensorView view;
    if (shape.size() > static_cast<size_t>(kMaxRank)) {
        return view;
    }
    view.data = data;
    view.dtype = dtype;
    view.device = device;
    view.rank = static_cast<int>(shape.size());
    int d = 0;
    for (int64_t extent : shape) {
        view.shape[d++] = extent;
    }
    int64_t stride = 1;
    for (d = view.rank - 1; d >= 0; --d) {
        view.stride[d] = stride;
        stride *= view.shape[d];
    }
    return view;
}

int64_t TensorView::numel() const {
    int64_t count = 1;
    for (int d = 0; d < rank; ++d) {
        count *= shape[d];
    }
    return count;
}

bool TensorView::is_contiguous() const {
    // As in PyTorch, the stride of an extent-1 dimension never matters: no two elements are apart along it.
    int64_t expected = 1;
    for (int d = rank - 1; d >= 0; --d) {
        if (shape[d] != 1 && stride[d] != expected) {
            return false;
        }
        expected *= shape[d];
    }
    return true;
}

bool TensorView::overlaps(const TensorView& other) const {
    if (!defined() || !other.defined() || numel() == 0 || other.numel() == 0) {
        return false;
    }
    auto span = [](const TensorView& v) {
        int64_t last = 0;
        for (int d = 0; d < v.rank; ++d) {
            last += (v.shape[d] - 1) * v.stride[d];
        }
        const auto element = static_cast<int64_t>(dtype_size(v.dtype));
        const auto first = reinterpret_cast<uintptr_t>(v.data);
        return std::pair<uintptr_t, uintptr_t>{first, first + static_cast<uintptr_t>((last + 1) * element)};
    };
    const auto [begin, end] = span(*this);
    const auto [other_begin, other_end] = span(other);
    return begin < other_end && other_begin < end;
}

std::string TensorView::describe() const {
    if (!defined()) {
        return "an undefined tensor (null data)";
    }
    std::string text = join(shape, rank) + " " + to_string(dtype) + " " + to_string(device);
    if (!is_contiguous()) {
        text += " strides " + join(stride, rank);
    }
    return text;
}

}  // namespace mok
