// The CUDA backend's ForwardContext: device memory of its own (ContextLayout per local rank), allocated on the
// first forward or recompute_forward and reused by every later one, because the workspace is shared by all
// layers of a model and so cannot keep anything from one layer's forward until its backward.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "host/api/backend.hpp"
#include "host/cuda/cuda_workspace.hpp"
#include "host/cuda/layer_buffers.hpp"
#include "host/cuda/layer_layout.hpp"

namespace mok::cuda {

class CudaContext final : public api::ContextBase {
  public:
    CudaContext(uint64_t layer_id, const LayerDims& dims, const ContextLayout& layout, Device device);
    ~CudaContext() override;
    CudaContext(const CudaContext&) = delete;
    CudaContext& operator=(const CudaContext&) = delete;

    bool ready() const override { return filled_ != nullptr; }
    // Reads the plan's row counts back from the device (a blocking copy): call it after synchronize().
    const RoutingStats& stats(int local_rank) const override;

    // Allocates the memory on first use (a host-synchronous cudaMalloc: the first call, not the hot path).
    Status ensure_allocated();
    // Before a forward or recompute_forward enqueues: forgets the previous fill.
    void begin_fill() { filled_ = nullptr; }
    // After it enqueued successfully: the fill belongs to the workspace's current synchronize epoch.
    void end_fill(std::shared_ptr<SyncEpoch> epoch);
    // True when synchronize reported a failure of the step that filled the context.
    bool fill_failed() const { return filled_ != nullptr && filled_->failed; }

    ContextBuffers buffers(int32_t local_rank) const;

  private:
    RoutingStats read_stats(int32_t local_rank) const;

    LayerDims dims_;
    ContextLayout layout_;
    Device device_;
    char* base_ = nullptr;                     // num_local_ranks blocks of layout_.bytes
    std::shared_ptr<SyncEpoch> filled_;        // the epoch of the call that filled it; null while empty
    mutable std::vector<RoutingStats> stats_;  // [local ranks], read on demand
    mutable std::vector<bool> stats_read_;     // [local ranks]
};

}  // namespace mok::cuda
