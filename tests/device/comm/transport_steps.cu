#include "comm/transport_steps.hpp"

#include <vector>

#include "comm/test_consumer.cuh"
#include "device/comm/launch_support.cuh"
#include "device/comm/row_copy.cuh"
#include "device/comm/transport_params.cuh"
#include "host/comm/device_status.hpp"
#include "host/comm/transport_memory.hpp"
#include "host/cuda/cuda_status.hpp"

namespace mok::comm::testing {
namespace {

constexpr int32_t kConsumerThreads = 256;
// The copy team's first named barrier in dispatch and push blocks (0 is __syncthreads').
constexpr uint32_t kCopyFirstBarrier = 1;

template <typename Peers>
struct PipelineParams {
    DispatchParams<Peers> dispatch;
    ConsumerParams consumer;
    PushParams<Peers> push;
    int32_t dispatch_blocks;
    int32_t consumer_blocks;
    int32_t push_blocks;
    int32_t local_blocks;  // per copy role: its blocks for the rows that stay on the GPU (0: none, no split)
};

__global__ void __launch_bounds__(kConsumerThreads)
    consumer_kernel(const __grid_constant__ RankSet<ConsumerParams> set) {
    const BlockSlice slice = block_slice(set);
    const ConsumerParams& p = set.ranks[slice.rank_slot];
    if (__syncthreads_or(step_failed(p.ctx))) {
        return;
    }
    consume_tiles(p, slice.block_idx, slice.num_blocks);
}

// The roles of one rank's slice: dispatch blocks, then consumer blocks, then push blocks; each role uses the
// whole block (dispatch and push as one copy team, or two when local_blocks splits their tiles).
template <typename Peers>
__global__ void __launch_bounds__(kConsumerThreads)
    pipeline_kernel(const __grid_constant__ RankSet<PipelineParams<Peers>> set) {
    __shared__ RowCopyStorage storage;
    const BlockSlice slice = block_slice(set);
    const PipelineParams<Peers>& p = set.ranks[slice.rank_slot];
    const int32_t block = slice.block_idx;
    const int32_t dispatch_span = p.dispatch_blocks + p.local_blocks;
    const int32_t push_begin = dispatch_span + p.consumer_blocks;
    if (__syncthreads_or(step_failed(p.consumer.ctx))) {
        return;
    }
    const CopyTeam team{threadIdx.x, blockDim.x, kCopyFirstBarrier};
    if (block < dispatch_span) {
        const TeamShare r = team_share(block, p.dispatch_blocks, p.local_blocks);
        dispatch_tiles(p.dispatch, storage, team, r);
    } else if (block < push_begin) {
        consume_tiles(p.consumer, block - dispatch_span, p.consumer_blocks);
    } else {
        const TeamShare r = team_share(block - push_begin, p.push_blocks, p.local_blocks);
        push_tiles(p.push, storage, team, r);
    }
}

layout::RingId ring_of(layout::TransportPass pass) {
    return pass == layout::TransportPass::kBackwardGrads ? layout::RingId::kGrads : layout::RingId::kTokens;
}

template <typename Peers>
ConsumerParams consumer_params(const LaunchGroup<Peers>& group, int32_t slot, layout::TransportPass pass,
                               const RankDeviceData& data, bool per_tile_flags) {
    const RankEndpoint<Peers>& r = group.ranks[slot];
    const int32_t ring = static_cast<int32_t>(ring_of(pass));
    const int32_t local_experts = group.local.plan.num_local_experts();
    return ConsumerParams{pass,
                          r.local.ring_rows[ring],
                          group.local.plan.ring_rows,
                          r.local.ring_ready[ring],
                          r.local.ring_free[ring],
                          r.local.plan.row_source,
                          r.local.plan.tile_expert,
                          r.local.plan.owner_padded_rows,
                          r.peers.rank,
                          r.peers.rank * local_experts,
                          group.window.shape.hidden,
                          data.captured.data(),
                          data.out_rows.data(),
                          data.out_ring_rows,
                          data.out_ready.data(),
                          per_tile_flags ? data.out_free.data() : nullptr,
                          data.out_weight_grads.data(),
                          r.local.control,
                          wait_context(group, slot)};
}

template <typename Peers>
Status launch_consumer(const LaunchGroup<Peers>& group, layout::TransportPass pass,
                       std::span<RankDeviceData* const> data, int32_t blocks, cudaStream_t stream) {
    const auto set = rank_set<ConsumerParams>(
        group, blocks, [&](int32_t slot) { return consumer_params(group, slot, pass, *data[slot], false); });
    consumer_kernel<<<set.num_ranks * blocks, kConsumerThreads, 0, stream>>>(set);
    return launch_status("consumer_kernel");
}

template <typename Peers>
Status launch_pipeline(const LaunchGroup<Peers>& group, layout::TransportPass pass,
                       std::span<RankDeviceData* const> data, const StepOptions& options, cudaStream_t stream) {
    const int32_t blocks =
        options.dispatch_blocks + options.consumer_blocks + options.push_blocks + 2 * options.local_blocks;
    const auto set = rank_set<PipelineParams<Peers>>(group, blocks, [&](int32_t slot) {
        return PipelineParams<Peers>{dispatch_params(group, slot, pass, ring_of(pass)),
                                     consumer_params(group, slot, pass, *data[slot], true),
                                     push_params(group, slot, pass, data[slot]->push_source(pass, true)),
                                     options.dispatch_blocks,
                                     options.consumer_blocks,
                                     options.push_blocks,
                                     options.local_blocks};
    });
    // The copy teams' bulk stages (row_copy.cuh).
    MOK_RETURN_IF_ERROR(
        host::cuda_status(cudaFuncSetAttribute(pipeline_kernel<Peers>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(kBulkStagingBytes)),
                          "raising the pipeline kernel's shared-memory limit"));
    pipeline_kernel<Peers><<<set.num_ranks * blocks, kConsumerThreads, kBulkStagingBytes, stream>>>(set);
    return launch_status("pipeline_kernel");
}

template <typename Peers>
Status enqueue_data_path(const LaunchGroup<Peers>& group, layout::TransportPass pass,
                         std::span<RankDeviceData* const> data, const StepOptions& options, cudaStream_t stream) {
    const int32_t n = group.num_ranks;
    std::vector<PushSource> sources;
    std::vector<CombineTarget> targets;
    for (int32_t slot = 0; slot < n; ++slot) {
        sources.push_back(data[slot]->push_source(pass, options.path == DataPath::kPipelined));
        targets.push_back(data[slot]->combine_target(pass, group.window.shape.hidden));
    }
    if (options.path == DataPath::kPipelined) {
        MOK_RETURN_IF_ERROR(launch_pipeline(group, pass, data, options, stream));
    } else {
        MOK_RETURN_IF_ERROR(enqueue_dispatch(group, pass, ring_of(pass),
                                             CopyBlocks{options.dispatch_blocks, options.local_blocks}, stream));
        MOK_RETURN_IF_ERROR(launch_consumer(group, pass, data, options.consumer_blocks, stream));
        MOK_RETURN_IF_ERROR(
            enqueue_push(group, pass, sources.data(), CopyBlocks{options.push_blocks, options.local_blocks}, stream));
    }
    return enqueue_combine(group, pass, targets.data(), stream);
}

}  // namespace

template <typename Peers>
std::vector<DeviceStatus*> status_records(const LaunchGroup<Peers>& group) {
    std::vector<DeviceStatus*> records;
    for (int32_t slot = 0; slot < group.num_ranks; ++slot) {
        records.push_back(group.ranks[slot].local.status);
    }
    return records;
}

template <typename Peers>
void poison_transport(const LaunchGroup<Peers>& group) {
    for (int32_t slot = 0; slot < group.num_ranks; ++slot) {
        const RankEndpoint<Peers>& r = group.ranks[slot];
        for (int32_t ring = 0; ring < layout::kNumRings; ++ring) {
            check_cuda(cudaMemset(r.local.ring_rows[ring], kPoisonByte, group.local.ring_rows[ring].bytes),
                       "poison ring");
        }
        check_cuda(
            cudaMemset(r.window + group.window.combine_rows.offset, kPoisonByte, group.window.combine_rows.bytes),
            "poison combine rows");
        check_cuda(
            cudaMemset(r.window + group.window.weight_grads.offset, kPoisonByte, group.window.weight_grads.bytes),
            "poison weight gradients");
    }
    check_cuda(cudaDeviceSynchronize(), "poison");
}

template <typename Peers>
Status enqueue_forward(const LaunchGroup<Peers>& group, std::span<RankDeviceData* const> data,
                       const StepOptions& options, cudaStream_t stream) {
    const std::vector<DeviceStatus*> records = status_records(group);
    MOK_RETURN_IF_ERROR(clear_device_status(records, stream));
    std::vector<RankRouting> routing;
    for (int32_t slot = 0; slot < group.num_ranks; ++slot) {
        MOK_RETURN_IF_ERROR(stage_rows(group.ranks[slot].window, group.window, SourceRows::kTokens,
                                       data[slot]->x.data(), group.window.shape.hidden, stream));
        routing.push_back(data[slot]->routing());
    }
    MOK_RETURN_IF_ERROR(enqueue_routing_exchange(group, routing.data(), stream));
    MOK_RETURN_IF_ERROR(enqueue_plan(group, stream));
    return enqueue_data_path(group, layout::TransportPass::kForward, data, options, stream);
}

template <typename Peers>
Status enqueue_backward(const LaunchGroup<Peers>& group, std::span<RankDeviceData* const> data,
                        const StepOptions& options, cudaStream_t stream) {
    for (int32_t slot = 0; slot < group.num_ranks; ++slot) {
        MOK_RETURN_IF_ERROR(stage_rows(group.ranks[slot].window, group.window, SourceRows::kGrads,
                                       data[slot]->dy.data(), group.window.shape.hidden, stream));
    }
    MOK_RETURN_IF_ERROR(enqueue_grads_announce(group, stream));
    return enqueue_data_path(group, layout::TransportPass::kBackwardGrads, data, options, stream);
}

template Status enqueue_forward(const LaunchGroup<VirtualPeers>&, std::span<RankDeviceData* const>, const StepOptions&,
                                cudaStream_t);
template Status enqueue_forward(const LaunchGroup<NcclPeers>&, std::span<RankDeviceData* const>, const StepOptions&,
                                cudaStream_t);
template Status enqueue_backward(const LaunchGroup<VirtualPeers>&, std::span<RankDeviceData* const>, const StepOptions&,
                                 cudaStream_t);
template Status enqueue_backward(const LaunchGroup<NcclPeers>&, std::span<RankDeviceData* const>, const StepOptions&,
                                 cudaStream_t);
template std::vector<DeviceStatus*> status_records(const LaunchGroup<VirtualPeers>&);
template std::vector<DeviceStatus*> status_records(const LaunchGroup<NcclPeers>&);
template void poison_transport(const LaunchGroup<VirtualPeers>&);
template void poison_transport(const LaunchGroup<NcclPeers>&);

}  // namespace mok::comm::testing
