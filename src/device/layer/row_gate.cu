// The row gate (row_gate.hpp): plan row counts for the GEMMs, zeroed on a failed step, and the forward's router
// weight per owner row.
#include <string>

#include "device/comm/signals.cuh"
#include "device/common/bounded_wait.cuh"
#include "device/layer/row_gate.hpp"
#include "host/cuda/kernel_attributes.hpp"

namespace mok::layer {
namespace {

constexpr int32_t kGateThreads = 256;
// Blocks per rank: enough to gather a worst-case row table quickly; the blocks stride over the rest.
constexpr int64_t kMaxGateBlocksPerRank = 256;

__global__ void __launch_bounds__(kGateThreads) row_gate_kernel(const __grid_constant__ RowGateLaunch p) {
    const int32_t blocks_per_rank = static_cast<int32_t>(gridDim.x) / p.num_ranks;
    const int32_t slot = static_cast<int32_t>(blockIdx.x) / blocks_per_rank;
    const int32_t block = static_cast<int32_t>(blockIdx.x) % blocks_per_rank;
    const RowGateRank& r = p.ranks[slot];
    // Nothing else on this rank's stream runs while this kernel does, so the record cannot change under it: every
    // block reaches the same verdict. The block barrier hands thread 0's view to the others.
    const device::WaitContext ctx{r.status, r.rank, 0};
    const bool failed = __syncthreads_or(threadIdx.x == 0 && comm::step_failed(ctx)) != 0;
    const int64_t routed = failed ? 0 : min(static_cast<int64_t>(r.owner_padded_rows[r.rank]), p.capacity_rows);
    if (block == 0) {
        if (threadIdx.x == 0) {
            if (r.ready_sequence != nullptr) {
                // The dispatch that follows publishes this step's tiles with this number (signals.cuh).
                *r.ready_sequence = layout::pass_sequence(r.control->step, p.pass);
            }
            *r.routed_rows = static_cast<int32_t>(routed);
            *r.shared_rows = failed ? 0 : static_cast<int32_t>(p.padded_tokens);
            *r.shared_segment_rows = failed ? 0 : static_cast<int32_t>(p.tokens);
        }
        const int32_t first_expert = r.rank * p.num_local_experts;
        for (int32_t l = static_cast<int32_t>(threadIdx.x); l < p.num_local_experts; l += kGateThreads) {
            r.routed_segment_rows[l] = failed ? 0 : r.expert_rows[first_expert + l];
        }
    }
    if (r.row_weight == nullptr) {
        return;
    }
    // The plan's exchange slot for this step: the weights sit beside the ids the planner read.
    const int32_t parity = static_cast<int32_t>(r.control->step & 1);
    const int64_t stride = static_cast<int64_t>(blocks_per_rank) * kGateThreads;
    for (int64_t row = static_cast<int64_t>(block) * kGateThreads + threadIdx.x; row < routed; row += stride) {
        const plan::RowSource source = r.row_source[row];
        float weight = 0.0f;
        if (!source.is_padding()) {
            const auto* weights =
                reinterpret_cast<const float*>(r.window + p.window.route_weights_of(parity, source.src_rank));
            weight = weights[source.token_slot];
        }
        r.row_weight[row] = weight;
    }
}

}  // namespace

Status load_row_gate_kernel() {
    return host::load_kernels<row_gate_kernel>("row gate");
}

Status enqueue_row_gate(const RowGateLaunch& launch, cudaStream_t stream) {
    MOK_RETURN_IF_ERROR(load_row_gate_kernel());
    if (launch.num_ranks < 1 || launch.num_ranks > comm::kMaxLaunchRanks || launch.capacity_rows < 0) {
        return Status::invalid_argument("row gate ranks", "1 to " + std::to_string(comm::kMaxLaunchRanks) + " ranks");
    }
    const int64_t wanted = (launch.capacity_rows + kGateThreads - 1) / kGateThreads;
    const int64_t blocks_per_rank = wanted < 1 ? 1 : (wanted < kMaxGateBlocksPerRank ? wanted : kMaxGateBlocksPerRank);
    row_gate_kernel<<<static_cast<unsigned>(blocks_per_rank * launch.num_ranks), kGateThreads, 0, stream>>>(launch);
    const cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) {
        return {StatusCode::kCudaError, std::string("row_gate_kernel: ") + cudaGetErrorString(error)};
    }
    return Status::ok();
}

}  // namespace mok::layer
