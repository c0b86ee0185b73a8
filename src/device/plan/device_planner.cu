// The device planner's kernels (device_planner.cuh says what each computes) and their launch function.
#include "device/comm/launch_support.cuh"
#include "device/comm/signals.cuh"
#include "device/plan/device_planner.cuh"
#include "host/cuda/kernel_attributes.hpp"

namespace mok::comm {
namespace {

using device_plan::kLayoutThreads;
using device_plan::kPlanThreads;
using device_plan::PlannerParams;

// The launch does nothing when an earlier kernel of the step failed; all threads take the same branch.
__device__ __forceinline__ bool block_skips(const PlannerParams& p) {
    return __syncthreads_or(step_failed(p.ctx));
}

__global__ void __launch_bounds__(kPlanThreads) plan_count_kernel(const __grid_constant__ RankSet<PlannerParams> set) {
    extern __shared__ int32_t histogram[];
    const BlockSlice slice = block_slice(set);
    const PlannerParams& p = set.ranks[slice.rank_slot];
    if (block_skips(p)) {
        return;
    }
    const int32_t groups = device_plan::count_groups_per_source(p.shape);
    const int32_t src = slice.block_idx / groups;
    const int32_t group = slice.block_idx % groups;
    bool arrived = true;
    if (threadIdx.x == 0) {
        // The source's ids for this step: its release after writing them, this acquire before reading them.
        const uint64_t step = p.control->step;
        const auto* ready =
            reinterpret_cast<const uint64_t*>(p.window + p.layout.route_ready_of(static_cast<int32_t>(step & 1), src));
        arrived = wait_flag_sys(p.ctx, WaitSite::kRoutingExchange, ready, step);
    }
    // The barrier also carries thread 0's acquire to the block's other threads.
    if (!__syncthreads_and(arrived)) {
        return;
    }
    device_plan::count_group(p, src, group, histogram);
    device_plan::check_group(p, src, group);
}

__global__ void __launch_bounds__(kLayoutThreads)
    plan_layout_kernel(const __grid_constant__ RankSet<PlannerParams> set) {
    const PlannerParams& p = set.ranks[block_slice(set).rank_slot];
    if (block_skips(p)) {
        return;
    }
    device_plan::reset_tile_joins(p);
    device_plan::layout_all(p);
}

__global__ void __launch_bounds__(kPlanThreads) plan_place_kernel(const __grid_constant__ RankSet<PlannerParams> set) {
    const BlockSlice slice = block_slice(set);
    const PlannerParams& p = set.ranks[slice.rank_slot];
    if (block_skips(p)) {
        return;
    }
    const int64_t item = static_cast<int64_t>(slice.block_idx) * blockDim.x + threadIdx.x;
    if (item < static_cast<int64_t>(p.shape.ep_size) * p.shape.slots_per_rank()) {
        device_plan::place_item(p, item);
    }
}

__global__ void __launch_bounds__(kPlanThreads) plan_finish_kernel(const __grid_constant__ RankSet<PlannerParams> set) {
    const BlockSlice slice = block_slice(set);
    const PlannerParams& p = set.ranks[slice.rank_slot];
    if (block_skips(p)) {
        return;
    }
    const int64_t item = static_cast<int64_t>(slice.block_idx) * blockDim.x + threadIdx.x;
    if (item < device_plan::finish_items(p.shape)) {
        device_plan::finish_item(p, item);
    }
}

int32_t blocks_for(int64_t items) {
    return static_cast<int32_t>(plan::ceil_div(items, kPlanThreads));
}

}  // namespace

Status load_plan_kernels() {
    return host::load_kernels<plan_count_kernel, plan_layout_kernel, plan_place_kernel, plan_finish_kernel>(
        "routing plan");
}

template <typename Peers>
Status enqueue_plan(const LaunchGroup<Peers>& group, cudaStream_t stream) {
    MOK_RETURN_IF_ERROR(validate_group(group));
    const plan::PlanShape& shape = group.local.plan;
    auto make = [&](int32_t slot) {
        const RankEndpoint<Peers>& r = group.ranks[slot];
        return PlannerParams{plan_shape_of(group, slot),
                             r.window,
                             group.window,
                             r.local.plan,
                             r.local.control,
                             wait_context(group, slot),
                             {r.local.ring_parts[0], r.local.ring_parts[1]},
                             r.local.push_parts};
    };
    const int32_t count_blocks = shape.ep_size * device_plan::count_groups_per_source(shape);
    const size_t histogram_bytes =
        static_cast<size_t>(device_plan::chunks_per_count_block(shape)) * shape.num_experts * sizeof(int32_t);
    MOK_RETURN_IF_ERROR(host::allow_max_dynamic_shared_memory<plan_count_kernel>());
    auto count_set = rank_set<PlannerParams>(group, count_blocks, make);
    plan_count_kernel<<<count_set.num_ranks * count_blocks, kPlanThreads, histogram_bytes, stream>>>(count_set);
    MOK_RETURN_IF_ERROR(launch_status("plan_count_kernel"));

    auto layout_set = rank_set<PlannerParams>(group, 1, make);
    plan_layout_kernel<<<layout_set.num_ranks, kLayoutThreads, 0, stream>>>(layout_set);
    MOK_RETURN_IF_ERROR(launch_status("plan_layout_kernel"));

    const int32_t place_blocks = blocks_for(static_cast<int64_t>(shape.ep_size) * shape.slots_per_rank());
    auto place_set = rank_set<PlannerParams>(group, place_blocks, make);
    plan_place_kernel<<<place_set.num_ranks * place_blocks, kPlanThreads, 0, stream>>>(place_set);
    MOK_RETURN_IF_ERROR(launch_status("plan_place_kernel"));

    const int32_t finish_blocks = blocks_for(device_plan::finish_items(shape));
    auto finish_set = rank_set<PlannerParams>(group, finish_blocks, make);
    plan_finish_kernel<<<finish_set.num_ranks * finish_blocks, kPlanThreads, 0, stream>>>(finish_set);
    return launch_status("plan_finish_kernel");
}

template Status enqueue_plan(const LaunchGroup<VirtualPeers>&, cudaStream_t);
template Status enqueue_plan(const LaunchGroup<NcclPeers>&, cudaStream_t);

}  // namespace mok::comm
