#include "host/cuda/cuda_context.hpp"

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "host/cuda/device_guard.hpp"

namespace mok::cuda {
namespace {

template <typename T>
std::vector<T> download(const T* device, int64_t count) {
    std::vector<T> host(static_cast<size_t>(count));
    if (count > 0 && cudaMemcpy(host.data(), device, host.size() * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess) {
        host.clear();
    }
    return host;
}

}  // namespace

CudaContext::CudaContext(uint64_t layer_id, const LayerDims& dims, const ContextLayout& layout, Device device)
    : ContextBase(layer_id),
      dims_(dims),
      layout_(layout),
      device_(device),
      stats_(static_cast<size_t>(dims.num_local_ranks)),
      stats_read_(static_cast<size_t>(dims.num_local_ranks), false) {}

CudaContext::~CudaContext() {
    if (base_ != nullptr) {
        DeviceGuard guard;
        if (guard.use(device_.index).is_ok()) {
            cudaFree(base_);
        }
    }
}

Status CudaContext::ensure_allocated() {
    if (base_ != nullptr) {
        return Status::ok();
    }
    const uint64_t bytes = layout_.bytes * static_cast<uint64_t>(dims_.num_local_ranks);
    void* base = nullptr;
    const cudaError_t error = cudaMalloc(&base, bytes);
    if (error != cudaSuccess) {
        return {StatusCode::kCudaError,
                "allocating a ForwardContext of " + std::to_string(bytes) + " bytes on " + to_string(device_) + ": " +
                    cudaGetErrorString(error) +
                    " (a context allocates on its first forward: run one before capturing a CUDA graph)"};
    }
    base_ = static_cast<char*>(base);
    return Status::ok();
}

void CudaContext::end_fill(std::shared_ptr<SyncEpoch> epoch) {
    filled_ = std::move(epoch);
    stats_read_.assign(stats_read_.size(), false);
}

ContextBuffers CudaContext::buffers(int32_t local_rank) const {
    return ContextBuffers::bind(layout_, base_ + static_cast<uint64_t>(local_rank) * layout_.bytes);
}

const RoutingStats& CudaContext::stats(int local_rank) const {
    static const RoutingStats kNoStats;
    if (local_rank < 0 || local_rank >= dims_.num_local_ranks || !ready()) {
        return kNoStats;
    }
    if (!stats_read_[local_rank]) {
        stats_[local_rank] = read_stats(local_rank);
        stats_read_[local_rank] = true;
    }
    return stats_[local_rank];
}

RoutingStats CudaContext::read_stats(int32_t local_rank) const {
    DeviceGuard guard;
    RoutingStats stats;
    if (!guard.use(device_.index).is_ok()) {
        return stats;
    }
    const int32_t rank = dims_.first_local_rank + local_rank;
    const plan::PlanShape shape = dims_.plan_shape(rank, plan::kExpertRowAlignment);
    const ContextBuffers b = buffers(local_rank);
    const int32_t first = rank * dims_.num_local_experts;
    const int64_t chunks_per_expert = static_cast<int64_t>(shape.ep_size) * shape.num_chunks();
    // This rank's experts' entries of the [E][R][C] counts are consecutive.
    const std::vector<int32_t> counts =
        download(b.plan.chunk_counts + shape.chunk_index(first, 0, 0), chunks_per_expert * dims_.num_local_experts);
    const std::vector<int32_t> expert_rows = download(b.plan.expert_rows + first, dims_.num_local_experts);
    const std::vector<int32_t> padded = download(b.plan.owner_padded_rows + rank, 1);
    if (counts.empty() || expert_rows.empty() || padded.empty()) {
        return stats;
    }
    stats.rows_from_rank.assign(static_cast<size_t>(dims_.ep_size), 0);
    for (int32_t l = 0; l < dims_.num_local_experts; ++l) {
        stats.rows_per_local_expert.push_back(expert_rows[l]);
        for (int32_t src = 0; src < shape.ep_size; ++src) {
            for (int32_t c = 0; c < shape.num_chunks(); ++c) {
                stats.rows_from_rank[src] +=
                    counts[(static_cast<int64_t>(l) * shape.ep_size + src) * shape.num_chunks() + c];
            }
        }
    }
    stats.padded_rows = padded[0];
    return stats;
}

}  // namespace mok::cuda
