// The CUDA backend's MoeLayer: checks the CUDA-specific argument rules, owns the layer's device tables and the
// kernel sequence (layer_steps.hpp), and turns the ranks' DeviceStatus records into synchronize()'s Status.
#pragma once

#include <memory>
#include <vector>

#include "host/api/backend.hpp"
#include "host/cuda/cuda_workspace.hpp"
#include "host/cuda/layer_constants.hpp"
#include "host/cuda/layer_layout.hpp"
#include "host/cuda/layer_steps.hpp"
#include "host/cuda/side_stream.hpp"
#include "host/cuda/stage_timeline.hpp"

namespace mok::cuda {

class CudaLayer final : public api::CheckedLayer {
  public:
    // `options` passed every check; `workspace` is a CudaWorkspace of the options' device, large enough.
    static Status create(const LayerOptions& options, std::shared_ptr<Workspace> workspace,
                         std::unique_ptr<MoeLayer>* out);

    Status create_context(std::unique_ptr<ForwardContext>* out) const override;

  protected:
    Status run_forward(std::span<const ForwardArgs> args, api::ContextBase& context, void* stream) override;
    Status run_recompute_forward(std::span<const RankInputs> inputs, api::ContextBase& context, void* stream) override;
    Status run_backward(std::span<const RankInputs> inputs, std::span<const BackwardArgs> args,
                        const api::ContextBase& context, void* stream) override;
    Status run_synchronize(void* stream) override;
    std::vector<StageTime> run_stage_times() override;

  private:
    CudaLayer(const LayerOptions& options, std::shared_ptr<Workspace> workspace);

    CudaWorkspace& cuda_workspace() const { return static_cast<CudaWorkspace&>(workspace()); }
    // Both forward and recompute_forward: `y` empty for the latter.
    Status fill_context(std::span<const RankInputs* const> inputs, std::span<const TensorView* const> y,
                        CudaContext& context, cudaStream_t stream);

    LayerDims dims_;
    WorkspaceLayout layout_;
    ContextLayout context_layout_;
    LayerConstants constants_;
    std::unique_ptr<StageTimeline> timeline_;  // before steps_, which points at it
    SideStream side_stream_;                   // likewise
    std::unique_ptr<LayerSteps> steps_;
};

}  // namespace mok::cuda
