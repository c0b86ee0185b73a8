// MoeLayer's life cycle (validate -> workspace size -> initialise -> run) and the backend-independent half of
// every call; the backends live in src/host/cpu and, in builds with CUDA (MOK_WITH_CUDA), src/host/cuda.
#include <atomic>
#include <exception>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "host/api/backend.hpp"
#include "host/api/validate.hpp"
#include "host/cpu/cpu_backend.hpp"
#if MOK_WITH_CUDA
#include "host/cuda/cuda_backend.hpp"
#endif

namespace mok {
namespace api {
namespace {

const char* backend_name(Backend backend) {
    switch (backend) {
        case Backend::kCpuReference:
            return "Backend::kCpuReference";
        case Backend::kCuda:
            return "Backend::kCuda";
    }
    return "an unknown Backend";
}

// Runs a backend call; an exception (out of memory, or a bug) becomes a Status instead of crossing the API.
template <typename Fn>
Status guarded(const char* call, Fn&& fn) {
    try {
        return fn();
    } catch (const std::bad_alloc&) {
        return {StatusCode::kInternal, std::string(call) + ": out of host memory"};
    } catch (const std::exception& e) {
        return {StatusCode::kInternal, std::string(call) + ": " + e.what()};
    }
}

// The context as one of layer `layer_id`'s own, or null when it is null or another layer's.
template <typename Context>
auto* own_context(Context* context, uint64_t layer_id) {
    using Own = std::conditional_t<std::is_const_v<Context>, const ContextBase, ContextBase>;
    auto* own = dynamic_cast<Own*>(context);
    return own != nullptr && own->layer_id() == layer_id ? own : nullptr;
}

Status foreign_context(const ForwardContext* context) {
    return Status::invalid_argument("context",
                                    std::string("a ForwardContext made by this layer's create_context, got ") +
                                        (context == nullptr ? "null" : "another layer's"));
}

uint64_t next_layer_id() {
    static std::atomic<uint64_t> counter{0};
    return ++counter;
}

}  // namespace

Status find_backend(Backend backend, const char* path, const BackendProvider** out) {
    switch (backend) {
        case Backend::kCpuReference:
            *out = &cpu::backend();
            return Status::ok();
        case Backend::kCuda:
#if MOK_WITH_CUDA
            *out = &cuda::backend();
            return Status::ok();
#else
            return {StatusCode::kNotSupported, "Backend::kCuda: the CUDA backend is not built in"};
#endif
    }
    return Status::invalid_argument(
        path, "Backend::kCpuReference or Backend::kCuda, got " + std::to_string(static_cast<int>(backend)));
}

CheckedLayer::CheckedLayer(const LayerOptions& options, std::shared_ptr<Workspace> workspace)
    : options_(options), workspace_(std::move(workspace)), id_(next_layer_id()) {}

Status CheckedLayer::forward(std::span<const ForwardArgs> args, ForwardContext* context, void* stream) {
    ContextBase* own = own_context(context, id_);
    if (own == nullptr) {
        return foreign_context(context);
    }
    MOK_RETURN_IF_ERROR(check_forward_args(options_, args));
    return guarded("forward", [&] { return run_forward(args, *own, stream); });
}

Status CheckedLayer::recompute_forward(std::span<const RankInputs> inputs, ForwardContext* context, void* stream) {
    ContextBase* own = own_context(context, id_);
    if (own == nullptr) {
        return foreign_context(context);
    }
    MOK_RETURN_IF_ERROR(check_recompute_args(options_, inputs));
    return guarded("recompute_forward", [&] { return run_recompute_forward(inputs, *own, stream); });
}

Status CheckedLayer::backward(std::span<const RankInputs> inputs, std::span<const BackwardArgs> args,
                              const ForwardContext& context, void* stream) {
    const ContextBase* own = own_context(&context, id_);
    if (own == nullptr) {
        return foreign_context(&context);
    }
    if (!own->ready()) {
        return Status::invalid_argument("context",
                                        "a context filled by forward or recompute_forward, got an empty one");
    }
    MOK_RETURN_IF_ERROR(check_backward_args(options_, inputs, args));
    return guarded("backward", [&] { return run_backward(inputs, args, *own, stream); });
}

Status CheckedLayer::synchronize(void* stream) {
    return guarded("synchronize", [&] { return run_synchronize(stream); });
}

}  // namespace api

Status Workspace::create(Backend backend, Device device, size_t bytes, std::shared_ptr<Workspace>* out) {
    return create(backend, device, bytes, nullptr, out);
}

Status Workspace::create(Backend backend, Device device, size_t bytes, std::shared_ptr<Communicator> communicator,
                         std::shared_ptr<Workspace>* out) {
    if (out == nullptr) {
        return Status::invalid_argument("out", "a non-null pointer");
    }
    const api::BackendProvider* provider = nullptr;
    MOK_RETURN_IF_ERROR(api::find_backend(backend, "backend", &provider));
    return api::guarded("Workspace::create",
                        [&] { return provider->create_workspace(device, bytes, std::move(communicator), out); });
}

Status MoeLayer::workspace_bytes(const LayerOptions& options, size_t* bytes) {
    if (bytes == nullptr) {
        return Status::invalid_argument("bytes", "a non-null pointer");
    }
    MOK_RETURN_IF_ERROR(validate(options));
    const api::BackendProvider* provider = nullptr;
    MOK_RETURN_IF_ERROR(api::find_backend(options.backend, "options.backend", &provider));
    *bytes = provider->workspace_bytes(options);
    return Status::ok();
}

Status MoeLayer::create(const LayerOptions& options, std::shared_ptr<Workspace> workspace,
                        std::unique_ptr<MoeLayer>* out) {
    if (out == nullptr) {
        return Status::invalid_argument("out", "a non-null pointer");
    }
    size_t needed = 0;
    MOK_RETURN_IF_ERROR(workspace_bytes(options, &needed));
    const std::string wanted = "a workspace of at least " + std::to_string(needed) + " bytes for " +
                               api::backend_name(options.backend) + " on " + to_string(options.device);
    if (workspace == nullptr) {
        return Status::invalid_argument("workspace", wanted + ", got null");
    }
    if (workspace->backend() != options.backend || workspace->device() != options.device ||
        workspace->bytes() < needed) {
        return Status::invalid_argument("workspace", wanted + ", got " + std::to_string(workspace->bytes()) +
                                                         " bytes for " + api::backend_name(workspace->backend()) +
                                                         " on " + to_string(workspace->device()));
    }
    const api::BackendProvider* provider = nullptr;
    MOK_RETURN_IF_ERROR(api::find_backend(options.backend, "options.backend", &provider));
    return api::guarded("MoeLayer::create", [&] { return provider->create_layer(options, std::move(workspace), out); });
}

}  // namespace mok
