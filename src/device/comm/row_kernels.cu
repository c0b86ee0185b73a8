// Standalone kernels of the data movement: pull dispatch, push combine and the source's combine reduction.
// Each is a thin wrapper that hands a block its share of the work and calls the device component; the fused
// megakernel calls the same components from its communication warps.
#include <string>

#include "device/comm/combine_push.cuh"
#include "device/comm/combine_reduce.cuh"
#include "device/comm/dispatch.cuh"
#include "device/comm/launch_support.cuh"
#include "device/comm/row_copy.cuh"
#include "device/comm/signals.cuh"
#include "host/cuda/kernel_attributes.hpp"

namespace mok::comm {
namespace {

// Threads per block of the standalone dispatch and push kernels: the whole block is one copy team, its control warp and
// one warp per bulk issuer (row_copy.cuh), with kBulkStagingBytes of dynamic shared memory for the issuers' stages.
// That staging takes an SM's shared memory, so one block runs per SM, which the launch bounds say: without the
// minimum, ptxas held the 160-thread block to 56 registers and spilled.
constexpr uint32_t kRowCopyThreads = device::kWarpSize * (1 + kBulkIssuers);
// The team's first named barrier: barrier 0 is __syncthreads'.
constexpr uint32_t kRowCopyFirstBarrier = 1;

__device__ __forceinline__ CopyTeam block_team() {
    return CopyTeam{threadIdx.x, blockDim.x, kRowCopyFirstBarrier};
}

template <typename Peers>
__global__ void __launch_bounds__(kRowCopyThreads, 1)
    dispatch_kernel(const __grid_constant__ RankSet<DispatchParams<Peers>> set, int32_t remote_blocks) {
    __shared__ RowCopyStorage storage;
    const BlockSlice slice = block_slice(set);
    const DispatchParams<Peers>& p = set.ranks[slice.rank_slot];
    if (__syncthreads_or(step_failed(p.ctx))) {
        return;
    }
    // The rank's first remote_blocks blocks take the rows that cross NVLink, the others the rows that stay.
    const TeamShare t = team_share(slice.block_idx, remote_blocks, slice.num_blocks - remote_blocks);
    dispatch_tiles(p, storage, block_team(), t);
}

template <typename Peers>
__global__ void __launch_bounds__(kRowCopyThreads, 1)
    push_kernel(const __grid_constant__ RankSet<PushParams<Peers>> set, int32_t remote_blocks) {
    __shared__ RowCopyStorage storage;
    const BlockSlice slice = block_slice(set);
    const PushParams<Peers>& p = set.ranks[slice.rank_slot];
    if (__syncthreads_or(step_failed(p.ctx))) {
        return;
    }
    const TeamShare t = team_share(slice.block_idx, remote_blocks, slice.num_blocks - remote_blocks);
    push_tiles(p, storage, block_team(), t);
}

__global__ void __launch_bounds__(kCombineThreads) combine_kernel(const __grid_constant__ RankSet<CombineParams> set) {
    const BlockSlice slice = block_slice(set);
    const CombineParams& p = set.ranks[slice.rank_slot];
    if (__syncthreads_or(step_failed(p.ctx))) {
        return;
    }
    const int64_t tokens = p.layout.shape.tokens_per_rank;
    const int64_t begin = static_cast<int64_t>(slice.block_idx) * kCombineTokensPerBlock;
    const int64_t end = begin + kCombineTokensPerBlock < tokens ? begin + kCombineTokensPerBlock : tokens;
    combine_tokens(p, begin, end);
}

}  // namespace

Status load_row_kernels() {
    MOK_RETURN_IF_ERROR(
        (host::load_kernels<dispatch_kernel<VirtualPeers>, dispatch_kernel<NcclPeers>, push_kernel<VirtualPeers>,
                            push_kernel<NcclPeers>, combine_kernel>("transport row")));
    for (const Status& raised : {host::allow_max_dynamic_shared_memory<dispatch_kernel<VirtualPeers>>(),
                                 host::allow_max_dynamic_shared_memory<dispatch_kernel<NcclPeers>>(),
                                 host::allow_max_dynamic_shared_memory<push_kernel<VirtualPeers>>(),
                                 host::allow_max_dynamic_shared_memory<push_kernel<NcclPeers>>()}) {
        MOK_RETURN_IF_ERROR(raised);
    }
    return Status::ok();
}

namespace {

Status check_blocks(const CopyBlocks& blocks) {
    if (blocks.remote < 1 || blocks.local < 0) {
        return Status::invalid_argument("transport blocks", "at least one remote block per rank and no negative count");
    }
    return Status::ok();
}

}  // namespace

template <typename Peers>
Status enqueue_dispatch(const LaunchGroup<Peers>& group, layout::TransportPass pass, layout::RingId ring,
                        int32_t blocks_per_rank, cudaStream_t stream) {
    return enqueue_dispatch(group, pass, ring, CopyBlocks{blocks_per_rank, 0}, stream);
}

template <typename Peers>
Status enqueue_dispatch(const LaunchGroup<Peers>& group, layout::TransportPass pass, layout::RingId ring,
                        CopyBlocks blocks, cudaStream_t stream) {
    MOK_RETURN_IF_ERROR(validate_group(group));
    MOK_RETURN_IF_ERROR(check_blocks(blocks));
    const int32_t blocks_per_rank = blocks.remote + blocks.local;
    const auto set = rank_set<DispatchParams<Peers>>(
        group, blocks_per_rank, [&](int32_t slot) { return dispatch_params(group, slot, pass, ring); });
    dispatch_kernel<Peers>
        <<<set.num_ranks * blocks_per_rank, kRowCopyThreads, kBulkStagingBytes, stream>>>(set, blocks.remote);
    return launch_status("dispatch_kernel");
}

template <typename Peers>
Status enqueue_push(const LaunchGroup<Peers>& group, layout::TransportPass pass, const PushSource* sources,
                    int32_t blocks_per_rank, cudaStream_t stream) {
    return enqueue_push(group, pass, sources, CopyBlocks{blocks_per_rank, 0}, stream);
}

template <typename Peers>
Status enqueue_push(const LaunchGroup<Peers>& group, layout::TransportPass pass, const PushSource* sources,
                    CopyBlocks blocks, cudaStream_t stream) {
    MOK_RETURN_IF_ERROR(validate_group(group));
    MOK_RETURN_IF_ERROR(check_blocks(blocks));
    const int32_t blocks_per_rank = blocks.remote + blocks.local;
    for (int32_t slot = 0; slot < group.num_ranks; ++slot) {
        const PushSource& source = sources[slot];
        // Without per-tile flags the rows must all be there already: no ring.
        const int64_t min_rows =
            source.out_ready != nullptr ? kMinRingTiles * kTileRows : group.local.plan.capacity_rows;
        if (source.out_rows == nullptr || source.out_ring_rows < min_rows || source.out_ring_rows % kTileRows != 0) {
            return Status::invalid_argument("transport push sources[" + std::to_string(slot) + "]",
                                            "output rows in a ring of a multiple of 128 rows, of at least " +
                                                std::to_string(min_rows) +
                                                " rows (one tile with per-tile flags, the schedule capacity without)");
        }
    }
    const auto set = rank_set<PushParams<Peers>>(
        group, blocks_per_rank, [&](int32_t slot) { return push_params(group, slot, pass, sources[slot]); });
    push_kernel<Peers>
        <<<set.num_ranks * blocks_per_rank, kRowCopyThreads, kBulkStagingBytes, stream>>>(set, blocks.remote);
    return launch_status("push_kernel");
}

template <typename Peers>
Status enqueue_combine(const LaunchGroup<Peers>& group, layout::TransportPass pass, const CombineTarget* targets,
                       cudaStream_t stream) {
    MOK_RETURN_IF_ERROR(validate_group(group));
    if (pass == layout::TransportPass::kBackwardReplay) {
        return Status::invalid_argument("transport combine pass", "kForward or kBackwardGrads");
    }
    for (int32_t slot = 0; slot < group.num_ranks; ++slot) {
        const CombineTarget& t = targets[slot];
        const bool strides_ok = t.out_row_stride >= group.window.shape.hidden && t.out_row_stride % 8 == 0 &&
                                (t.num_shared == 0 || (t.shared_row_stride >= group.window.shape.hidden &&
                                                       t.shared_row_stride % 8 == 0 && t.shared_rows != nullptr));
        const bool grads_ok = pass != layout::TransportPass::kBackwardGrads || t.weight_grads_out != nullptr;
        if (t.expert_ids == nullptr || t.router_weights == nullptr || t.out == nullptr || t.num_shared < 0 ||
            !strides_ok || !grads_ok) {
            return Status::invalid_argument("transport combine targets[" + std::to_string(slot) + "]",
                                            "ids, weights and outputs, 16-byte aligned rows (strides multiples of 8)");
        }
    }
    const int32_t blocks_per_rank =
        static_cast<int32_t>(plan::ceil_div(group.window.shape.tokens_per_rank, kCombineTokensPerBlock));
    const auto set = rank_set<CombineParams>(
        group, blocks_per_rank, [&](int32_t slot) { return combine_params(group, slot, pass, targets[slot]); });
    combine_kernel<<<set.num_ranks * blocks_per_rank, kCombineThreads, 0, stream>>>(set);
    return launch_status("combine_kernel");
}

// The closed list of providers.
template Status enqueue_dispatch(const LaunchGroup<VirtualPeers>&, layout::TransportPass, layout::RingId, int32_t,
                                 cudaStream_t);
template Status enqueue_dispatch(const LaunchGroup<NcclPeers>&, layout::TransportPass, layout::RingId, int32_t,
                                 cudaStream_t);
template Status enqueue_dispatch(const LaunchGroup<VirtualPeers>&, layout::TransportPass, layout::RingId, CopyBlocks,
                                 cudaStream_t);
template Status enqueue_dispatch(const LaunchGroup<NcclPeers>&, layout::TransportPass, layout::RingId, CopyBlocks,
                                 cudaStream_t);
template Status enqueue_push(const LaunchGroup<VirtualPeers>&, layout::TransportPass, const PushSource*, CopyBlocks,
                             cudaStream_t);
template Status enqueue_push(const LaunchGroup<NcclPeers>&, layout::TransportPass, const PushSource*, CopyBlocks,
                             cudaStream_t);
template Status enqueue_push(const LaunchGroup<VirtualPeers>&, layout::TransportPass, const PushSource*, int32_t,
                             cudaStream_t);
template Status enqueue_push(const LaunchGroup<NcclPeers>&, layout::TransportPass, const PushSource*, int32_t,
                             cudaStream_t);
template Status enqueue_combine(const LaunchGroup<VirtualPeers>&, layout::TransportPass, const CombineTarget*,
                                cudaStream_t);
template Status enqueue_combine(const LaunchGroup<NcclPeers>&, layout::TransportPass, const CombineTarget*,
                                cudaStream_t);

}  // namespace mok::comm
