// The seam between MoeLayer and the backends that run it (the CPU reference now, the CUDA kernels later).
//
// layer.cpp finds a backend per Backend value (find_backend) and owns everything that does not depend on it:
// option and argument validation, context ownership, and keeping exceptions from crossing the API. A backend
// supplies a BackendProvider (its option rules, workspace and layer factories) and a CheckedLayer subclass
// whose run_* methods see only arguments that passed every backend-independent check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "mok/layer.hpp"

namespace mok::api {

class BackendProvider {
  public:
    virtual ~BackendProvider() = default;
    // The backend's own rules on top of check_layer_options (where tensors live, which ranks may be local).
    virtual Status check_options(const LayerOptions& options) const = 0;
    // Called only with options that passed check_options.
    virtual size_t workspace_bytes(const LayerOptions& options) const = 0;
    // `communicator` is null when every rank is local.
    virtual Status create_workspace(Device device, size_t bytes, std::shared_ptr<Communicator> communicator,
                                    std::shared_ptr<Workspace>* out) const = 0;
    // Called only with valid options and a workspace of this backend and device, large enough.
    virtual Status create_layer(const LayerOptions& options, std::shared_ptr<Workspace> workspace,
                                std::unique_ptr<MoeLayer>* out) const = 0;
};

// The provider of `backend`, or kNotSupported when this build does not include it; `path` names the argument
// for a value outside the enum.
Status find_backend(Backend backend, const char* path, const BackendProvider** out);

// What every backend's contexts share: which layer made them, so that a layer refuses another's context.
class ContextBase : public ForwardContext {
  public:
    explicit ContextBase(uint64_t layer_id) : layer_id_(layer_id) {}
    uint64_t layer_id() const { return layer_id_; }

  private:
    uint64_t layer_id_;
};

// The backend-independent half of every MoeLayer: checks every argument (host/api/validate.hpp) and the
// context, then calls the backend's run_* method. An exception escaping a backend (out of memory) becomes
// StatusCode::kInternal; none crosses the API.
class CheckedLayer : public MoeLayer {
  public:
    const LayerOptions& options() const final { return options_; }

    Status forward(std::span<const ForwardArgs> args, ForwardContext* context, void* stream) final;
    Status recompute_forward(std::span<const RankInputs> inputs, ForwardContext* context, void* stream) final;
    Status backward(std::span<const RankInputs> inputs, std::span<const BackwardArgs> args,
                    const ForwardContext& context, void* stream) final;
    Status synchronize(void* stream) final;
    std::vector<StageTime> stage_times() final { return run_stage_times(); }

  protected:
    CheckedLayer(const LayerOptions& options, std::shared_ptr<Workspace> workspace);

    // A number no other layer of this process has; contexts carry it (ContextBase).
    uint64_t id() const { return id_; }
    Workspace& workspace() const { return *workspace_; }

    // `context` is one of this layer's (made by create_context); the backend casts it to its own type.
    virtual Status run_forward(std::span<const ForwardArgs> args, ContextBase& context, void* stream) = 0;
    virtual Status run_recompute_forward(std::span<const RankInputs> inputs, ContextBase& context, void* stream) = 0;
    // `context` is ready (filled by forward or recompute_forward).
    virtual Status run_backward(std::span<const RankInputs> inputs, std::span<const BackwardArgs> args,
                                const ContextBase& context, void* stream) = 0;
    // Waits for the backend's work on `stream` and reports its device-side failures; none by default.
    virtual Status run_synchronize(void* /*stream*/) { return Status::ok(); }
    // The backend's recorded stage times; none by default.
    virtual std::vector<StageTime> run_stage_times() { return {}; }

  private:
    LayerOptions options_;
    std::shared_ptr<Workspace> workspace_;
    uint64_t id_;
};

}  // namespace mok::api
