// Device tables a layer builds once, at creation, from its shape and its workspace: the shared experts' row
// space (their T token rows as one expert of a grouped GEMM, so that their bits follow the routed experts'
// code), their row counts, their router weight of 1 per row, and each rank's array of shared-expert output pointers
// that its combine reads.
#pragma once

#include <cstdint>
#include <vector>

#include "host/cuda/layer_buffers.hpp"
#include "host/cuda/layer_layout.hpp"
#include "mok/layer.hpp"

namespace mok::cuda {

class LayerConstants {
  public:
    // Allocates and fills the tables on the current device (host-synchronous: creation, not the hot path).
    static Status create(const LayerDims& dims, const std::vector<ScratchBuffers>& scratch, LayerConstants* out);
    LayerConstants() = default;
    ~LayerConstants();
    LayerConstants(const LayerConstants&) = delete;
    LayerConstants& operator=(const LayerConstants&) = delete;
    LayerConstants(LayerConstants&& other) noexcept;
    LayerConstants& operator=(LayerConstants&& other) noexcept;

    const int32_t* shared_tile_expert() const { return tile_expert_; }      // [T_pad / 128] zeros
    const int32_t* shared_segment_begin() const { return segment_begin_; }  // [1] zero
    const float* shared_row_weight() const { return ones_; }                // [T_pad] ones
    // The shared experts' row counts for the GEMMs that may run before the row gate (the forward's, and the
    // backward's dgrads): they write only scratch and context, which a failed step leaves unread, so they need
    // no gate. The weight gradients read the row gate's counts instead (zeros after a failure).
    const int32_t* shared_padded_rows() const { return row_counts_; }       // [1] T_pad
    const int32_t* shared_segment_rows() const { return row_counts_ + 1; }  // [1] T
    // [S] pointers to local rank `local_rank`'s shared-expert rows in its scratch (device array).
    const uint16_t* const* shared_rows(int32_t local_rank) const { return shared_rows_ + local_rank * num_shared_; }

  private:
    char* base_ = nullptr;
    int32_t* tile_expert_ = nullptr;
    int32_t* segment_begin_ = nullptr;
    float* ones_ = nullptr;
    int32_t* row_counts_ = nullptr;
    const uint16_t** shared_rows_ = nullptr;
    int32_t num_shared_ = 0;
};

}  // namespace mok::cuda
