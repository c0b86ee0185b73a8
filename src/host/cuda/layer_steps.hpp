// The GPU layer's kernel sequence for the ranks this process drives (docs/layer.md, "Kernel sequence"):
//
//   forward     stage x -> routing exchange -> plan -> dispatch x rows -> row gate (+ router weight per row)
//               -> gate/up + SwiGLU, down (routed, then shared) -> push outputs -> combine -> y
//   recompute   stage x -> routing exchange -> plan -> dispatch x rows -> row gate -> gate/up + SwiGLU -> barrier
//   backward    stage dy -> routing exchange -> barrier -> announce dy -> dispatch dy rows -> row gate
//               -> dgrad, router gradients, dW (routed, then shared) -> push dx rows and d weights -> combine
//               -> dx, d router weights
//
// Everything is enqueued on one stream with no host synchronisation, so a whole step can be captured in a CUDA
// graph. One implementation serves both peer providers: virtual ranks (all R in one launch) and one real rank.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <span>
#include <vector>

#include "common/device_status.hpp"
#include "host/cuda/cuda_context.hpp"
#include "host/cuda/cuda_workspace.hpp"
#include "host/cuda/layer_constants.hpp"
#include "host/cuda/layer_layout.hpp"
#include "host/cuda/side_stream.hpp"
#include "host/cuda/stage_timeline.hpp"
#include "mok/layer.hpp"

namespace mok::cuda {

class LayerSteps {
  public:
    virtual ~LayerSteps() = default;
    // `y` holds one output per local rank for a forward, and is empty for a recompute_forward.
    virtual Status forward(std::span<const RankInputs* const> inputs, std::span<const TensorView* const> y,
                           const CudaContext& context, cudaStream_t stream) = 0;
    virtual Status backward(std::span<const RankInputs> inputs, std::span<const BackwardArgs> args,
                            const CudaContext& context, cudaStream_t stream) = 0;
    // Every local rank's DeviceStatus, in local-rank order.
    virtual std::vector<DeviceStatus*> status_records() const = 0;
};

// What the steps need besides the peers: the layer's dimensions and knobs, its workspace and its tables.
struct StepsSetup {
    LayerDims dims;
    Config config;
    WorkspaceLayout layout;
    CudaWorkspace* workspace = nullptr;
    const LayerConstants* constants = nullptr;
    StageTimeline* timeline = nullptr;  // the layer's; records only when Config::record_stage_times
    SideStream* side_stream = nullptr;  // the layer's, for the shared experts (docs/layer.md, "Kernel sequence")
    int32_t num_sms = 0;                // SMs of the layer's device
};

// Virtual ranks: every EP rank on this GPU. Real ranks: one, through the workspace's NCCL window.
std::unique_ptr<LayerSteps> make_virtual_steps(const StepsSetup& setup);
std::unique_ptr<LayerSteps> make_nccl_steps(const StepsSetup& setup);

}  // namespace mok::cuda
