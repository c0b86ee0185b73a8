#include "host/cuda/cuda_arguments.hpp"

#include <cuda_runtime.h>

#include <string>

namespace mok::cuda {
namespace {

std::string index_path(const std::string& base, size_t i) {
    return base + "[" + std::to_string(i) + "]";
}

// What a call checks: the options, and whether to query where each tensor lives.
struct Checker {
    const LayerOptions& options;
    bool check_memory;
};

Status on_device(const Checker& c, const TensorView& view, const std::string& path) {
    if (!c.check_memory) {
        return Status::ok();
    }
    const LayerOptions& options = c.options;
    cudaPointerAttributes attributes{};
    const cudaError_t error = cudaPointerGetAttributes(&attributes, view.data);
    const std::string wanted = "device memory of " + to_string(options.device) + " (Backend::kCuda), got ";
    if (error != cudaSuccess) {
        // Clears the error the query left, so that it does not surface from a later call.
        cudaGetLastError();
        return Status::invalid_argument(
            path, wanted + "a pointer CUDA does not know (" + std::string(cudaGetErrorString(error)) + ")");
    }
    const bool device_memory = attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
    if (!device_memory) {
        return Status::invalid_argument(path, wanted + "host memory");
    }
    if (attributes.device != options.device.index) {
        return Status::invalid_argument(path, wanted + "memory of cuda:" + std::to_string(attributes.device));
    }
    return Status::ok();
}

// Dense row-major: each dimension steps exactly over the inner block (extent-1 dimensions are never stepped).
Status dense(const TensorView& view, const std::string& path) {
    int64_t inner = 1;
    for (int d = view.rank - 1; d >= 0; --d) {
        if (view.shape[d] > 1 && view.stride[d] != inner) {
            return Status::invalid_argument(path,
                                            "a dense row-major tensor for Backend::kCuda (the grouped GEMMs "
                                            "address weights and weight gradients without a row stride), got " +
                                                view.describe());
        }
        inner *= view.shape[d];
    }
    return Status::ok();
}

Status weight_tensor(const Checker& c, const TensorView& view, const std::string& path) {
    MOK_RETURN_IF_ERROR(dense(view, path));
    return on_device(c, view, path);
}

template <typename Triple>
Status weight_triple(const Checker& c, const Triple& w, const std::string& path) {
    MOK_RETURN_IF_ERROR(weight_tensor(c, w.gate, path + ".gate"));
    MOK_RETURN_IF_ERROR(weight_tensor(c, w.up, path + ".up"));
    return weight_tensor(c, w.down, path + ".down");
}

Status rank_inputs(const Checker& c, const RankInputs& in, const std::string& path) {
    MOK_RETURN_IF_ERROR(on_device(c, in.x, path + ".x"));
    MOK_RETURN_IF_ERROR(on_device(c, in.expert_ids, path + ".expert_ids"));
    MOK_RETURN_IF_ERROR(on_device(c, in.router_weights, path + ".router_weights"));
    MOK_RETURN_IF_ERROR(weight_triple(c, in.experts, path + ".experts"));
    for (size_t s = 0; s < in.shared.size(); ++s) {
        MOK_RETURN_IF_ERROR(weight_triple(c, in.shared[s], index_path(path + ".shared", s)));
    }
    return Status::ok();
}

}  // namespace

Status check_forward_tensors(const LayerOptions& options, std::span<const ForwardArgs> args, bool check_memory) {
    const Checker c{options, check_memory};
    for (size_t r = 0; r < args.size(); ++r) {
        const std::string path = index_path("args", r);
        MOK_RETURN_IF_ERROR(rank_inputs(c, args[r].inputs, path + ".inputs"));
        MOK_RETURN_IF_ERROR(on_device(c, args[r].y, path + ".y"));
    }
    return Status::ok();
}

Status check_recompute_tensors(const LayerOptions& options, std::span<const RankInputs> inputs, bool check_memory) {
    const Checker c{options, check_memory};
    for (size_t r = 0; r < inputs.size(); ++r) {
        MOK_RETURN_IF_ERROR(rank_inputs(c, inputs[r], index_path("inputs", r)));
    }
    return Status::ok();
}

Status check_backward_tensors(const LayerOptions& options, std::span<const RankInputs> inputs,
                              std::span<const BackwardArgs> args, bool check_memory) {
    MOK_RETURN_IF_ERROR(check_recompute_tensors(options, inputs, check_memory));
    const Checker c{options, check_memory};
    for (size_t r = 0; r < args.size(); ++r) {
        const std::string path = index_path("args", r);
        const BackwardArgs& a = args[r];
        MOK_RETURN_IF_ERROR(on_device(c, a.dy, path + ".dy"));
        MOK_RETURN_IF_ERROR(on_device(c, a.dx, path + ".dx"));
        MOK_RETURN_IF_ERROR(on_device(c, a.d_router_weights, path + ".d_router_weights"));
        MOK_RETURN_IF_ERROR(weight_triple(c, a.d_experts, path + ".d_experts"));
        for (size_t s = 0; s < a.d_shared.size(); ++s) {
            MOK_RETURN_IF_ERROR(weight_triple(c, a.d_shared[s], index_path(path + ".d_shared", s)));
        }
    }
    return Status::ok();
}

}  // namespace mok::cuda
