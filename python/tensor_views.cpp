// Status to exception, at::Tensor to TensorView, and the device and stream of a call (tensor_views.hpp).
#include "tensor_views.hpp"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdint>
#include <string>

namespace mok::torch_binding {

// ---------------------------------------------------------------------------------------------------------------
// Errors

[[noreturn]] void raise(const char* op, const Status& status) {
    const std::string text = std::string(op) + ": " + status.to_string();
    switch (status.code()) {
        case StatusCode::kInvalidArgument:
            TORCH_CHECK_VALUE(false, text);
        case StatusCode::kNotSupported:
            TORCH_CHECK_NOT_IMPLEMENTED(false, text);
        default:
            TORCH_CHECK(false, text);
    }
}

void check(const char* op, const Status& status) {
    if (!status.is_ok()) {
        raise(op, status);
    }
}

[[noreturn]] void invalid(const char* op, const std::string& argument, const std::string& expected) {
    raise(op, Status::invalid_argument(argument, expected));
}

std::string shape_text(const at::Tensor& t) {
    std::string text = "[";
    for (int64_t d = 0; d < t.dim(); ++d) {
        text += (d == 0 ? "" : ", ") + std::to_string(t.size(d));
    }
    return text + "]";
}

// ---------------------------------------------------------------------------------------------------------------
// Tensors and devices

c10::Device torch_device(const Device& device) {
    if (device.type == DeviceType::kCuda) {
        return {c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device.index)};
    }
    return {c10::DeviceType::CPU};
}

TensorView to_view(const char* op, const std::string& name, const at::Tensor& t) {
    TensorView view;
    switch (t.scalar_type()) {
        case at::kBFloat16:
            view.dtype = DType::kBF16;
            break;
        case at::kFloat:
            view.dtype = DType::kF32;
            break;
        case at::kInt:
            view.dtype = DType::kI32;
            break;
        default:
            invalid(op, name,
                    std::string("a bfloat16, float32 or int32 tensor (the dtypes mok takes), got torch.") +
                        std::string(c10::getDtypeNames(t.scalar_type()).first));
    }
    if (t.layout() != at::kStrided) {
        invalid(op, name, "a dense (strided) tensor, got layout " + c10::str(t.layout()));
    }
    if (t.is_cuda()) {
        view.device = Device::cuda(t.get_device());
    } else if (!t.is_cpu()) {
        invalid(op, name, "a tensor on the CPU or a CUDA device, got one on " + t.device().str());
    }
    if (t.dim() > TensorView::kMaxRank) {
        invalid(op, name,
                "at most " + std::to_string(TensorView::kMaxRank) + " dimensions per rank, got " + shape_text(t));
    }
    view.data = t.data_ptr();
    view.rank = static_cast<int>(t.dim());
    for (int d = 0; d < view.rank; ++d) {
        view.shape[d] = t.size(d);
        view.stride[d] = t.stride(d);
    }
    return view;
}

TensorView Stacked::view(const std::string& name, const at::Tensor& t, int64_t rank) const {
    if (t.dim() < 1 || t.size(0) != num_local_ranks_) {
        invalid(op_, name,
                "a leading local-rank dimension of " + std::to_string(num_local_ranks_) +
                    " (tensors are stacked over the layer's local ranks), got shape " + shape_text(t));
    }
    return to_view(op_, name, t.select(0, rank));
}

DeviceScope::DeviceScope(const Device& device) {
    if (device.type == DeviceType::kCuda) {
        const c10::Device cuda = torch_device(device);
        guard_.emplace(cuda);
        stream_ = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(cuda).native_handle();
    }
}

}  // namespace mok::torch_binding
