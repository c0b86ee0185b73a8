#include "host/cuda/layer_constants.hpp"

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "host/cuda/cuda_status.hpp"

namespace mok::cuda {
namespace {

Status upload(void* device, const void* source, size_t bytes) {
    return host::cuda_status(cudaMemcpy(device, source, bytes, cudaMemcpyHostToDevice), "uploading the layer's tables");
}

}  // namespace

Status LayerConstants::create(const LayerDims& dims, const std::vector<ScratchBuffers>& scratch, LayerConstants* out) {
    const int64_t tiles = dims.padded_tokens / plan::kExpertRowAlignment;
    const int32_t num_shared = dims.num_shared();
    layout::RegionAllocator a;
    const Region tile_expert = a.take(static_cast<uint64_t>(tiles) * sizeof(int32_t));
    const Region segment_begin = a.take(sizeof(int32_t));
    const Region row_counts = a.take(2 * sizeof(int32_t));
    const Region ones = a.take(static_cast<uint64_t>(dims.padded_tokens) * sizeof(float));
    const Region pointers = a.take(static_cast<uint64_t>(dims.num_local_ranks) * num_shared * sizeof(uint16_t*));

    LayerConstants c;
    void* base = nullptr;
    MOK_RETURN_IF_ERROR(host::cuda_status(cudaMalloc(&base, a.next),
                                          "allocating the layer's tables of " + std::to_string(a.next) + " bytes"));
    c.base_ = static_cast<char*>(base);
    c.tile_expert_ = at<int32_t>(base, tile_expert);
    c.segment_begin_ = at<int32_t>(base, segment_begin);
    c.ones_ = at<float>(base, ones);
    c.row_counts_ = at<int32_t>(base, row_counts);
    c.shared_rows_ = at<const uint16_t*>(base, pointers);
    c.num_shared_ = num_shared;

    // Every token tile belongs to the one shared "expert" 0, whose segment starts at row 0.
    const std::vector<int32_t> zeros(static_cast<size_t>(tiles), 0);
    MOK_RETURN_IF_ERROR(upload(c.tile_expert_, zeros.data(), zeros.size() * sizeof(int32_t)));
    const int32_t first_row = 0;
    MOK_RETURN_IF_ERROR(upload(c.segment_begin_, &first_row, sizeof(first_row)));
    const int32_t counts[2] = {static_cast<int32_t>(dims.padded_tokens), static_cast<int32_t>(dims.tokens)};
    MOK_RETURN_IF_ERROR(upload(c.row_counts_, counts, sizeof(counts)));
    const std::vector<float> weights(static_cast<size_t>(dims.padded_tokens), 1.0f);
    MOK_RETURN_IF_ERROR(upload(c.ones_, weights.data(), weights.size() * sizeof(float)));
    std::vector<const uint16_t*> rows;
    for (const ScratchBuffers& s : scratch) {
        for (const __nv_bfloat16* shared : s.shared_out) {
            rows.push_back(reinterpret_cast<const uint16_t*>(shared));
        }
    }
    if (!rows.empty()) {
        MOK_RETURN_IF_ERROR(upload(c.shared_rows_, rows.data(), rows.size() * sizeof(const uint16_t*)));
    }
    *out = std::move(c);
    return Status::ok();
}

LayerConstants::~LayerConstants() {
    if (base_ != nullptr) {
        cudaFree(base_);
    }
}

LayerConstants::LayerConstants(LayerConstants&& other) noexcept {
    *this = std::move(other);
}

LayerConstants& LayerConstants::operator=(LayerConstants&& other) noexcept {
    std::swap(base_, other.base_);
    std::swap(tile_expert_, other.tile_expert_);
    std::swap(segment_begin_, other.segment_begin_);
    std::swap(ones_, other.ones_);
    std::swap(row_counts_, other.row_counts_);
    std::swap(shared_rows_, other.shared_rows_);
    std::swap(num_shared_, other.num_shared_);
    return *this;
}

}  // namespace mok::cuda
