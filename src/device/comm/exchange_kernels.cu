// Standalone kernels of the transport's signalling: the routing exchange, the dy announcement and the barrier;
// and the argument checks shared by every launch function.
#include <string>

#include "device/comm/copy_geometry.hpp"
#include "device/comm/dispatch.cuh"
#include "device/comm/launch_support.cuh"
#include "device/comm/peer_barrier.cuh"
#include "device/comm/routing_exchange.cuh"
#include "host/cuda/kernel_attributes.hpp"

namespace mok::comm {
namespace {

// Threads of the announcement and barrier blocks: one warp per 32 peers is plenty for flags.
constexpr int32_t kSignalThreads = 64;

template <typename Peers>
__global__ void __launch_bounds__(kExchangeThreads)
    routing_exchange_kernel(const __grid_constant__ RankSet<ExchangeParams<Peers>> set) {
    const BlockSlice slice = block_slice(set);
    const ExchangeParams<Peers>& p = set.ranks[slice.rank_slot];
    // Read before this block's add to exchange_blocks_done, so before the last block advances it.
    const uint64_t step = p.control->step + 1;
    push_routing(p, slice.block_idx, step);
    if (threadIdx.x == 0) {
        finish_exchange_block(p.control, step, static_cast<uint32_t>(slice.num_blocks));
    }
}

template <typename Peers>
struct AnnounceParams {
    Peers peers;
    layout::SymmetricLayout window;
    const layout::TransportControl* control;
};

template <typename Peers>
__global__ void __launch_bounds__(kSignalThreads)
    grads_announce_kernel(const __grid_constant__ RankSet<AnnounceParams<Peers>> set) {
    const AnnounceParams<Peers>& p = set.ranks[block_slice(set).rank_slot];
    const uint64_t step = p.control->step;
    for (int32_t peer = threadIdx.x; peer < p.peers.ep_size; peer += blockDim.x) {
        announce_grads(p.peers, p.window, peer, step);
    }
}

template <typename Peers>
__global__ void __launch_bounds__(kSignalThreads)
    barrier_kernel(const __grid_constant__ RankSet<BarrierParams<Peers>> set) {
    peer_barrier(set.ranks[block_slice(set).rank_slot]);
}

template <typename Peers>
struct CombineTargetsParams {
    Peers peers;
    layout::SymmetricLayout window;
    uint16_t** rank_rows;
    uint64_t** rank_flags;
};

// Each rank's combine rows and flags as this rank addresses them. A window is one contiguous mapping on every
// peer (both providers), so an entry plus a row's offset within the region addresses that row.
template <typename Peers>
__global__ void __launch_bounds__(kSignalThreads)
    combine_targets_kernel(const __grid_constant__ RankSet<CombineTargetsParams<Peers>> set) {
    const CombineTargetsParams<Peers>& p = set.ranks[block_slice(set).rank_slot];
    for (int32_t peer = threadIdx.x; peer < p.peers.ep_size; peer += blockDim.x) {
        p.rank_rows[peer] = static_cast<uint16_t*>(p.peers.peer_ptr(peer, p.window.combine_row(0)));
        p.rank_flags[peer] = static_cast<uint64_t*>(p.peers.peer_ptr(peer, p.window.combine_ready_of(0)));
    }
}

Status invalid(const std::string& what, const std::string& expected) {
    return Status::invalid_argument("transport " + what, expected);
}

}  // namespace

Status load_exchange_kernels() {
    return host::load_kernels<routing_exchange_kernel<VirtualPeers>, routing_exchange_kernel<NcclPeers>,
                              grads_announce_kernel<VirtualPeers>, grads_announce_kernel<NcclPeers>,
                              barrier_kernel<VirtualPeers>, barrier_kernel<NcclPeers>,
                              combine_targets_kernel<VirtualPeers>, combine_targets_kernel<NcclPeers>>(
        "transport exchange");
}

template <typename Peers>
Status validate_group(const LaunchGroup<Peers>& group) {
    const layout::TransportShape& shape = group.window.shape;
    const plan::PlanShape& plan = group.local.plan;
    if (group.num_ranks < 1 || group.num_ranks > kMaxLaunchRanks) {
        return invalid("num_ranks", "1 to " + std::to_string(kMaxLaunchRanks) + " ranks per launch");
    }
    if (shape.ep_size < 1 || shape.ep_size > kMaxEpRanks || shape.ep_size != plan.ep_size) {
        return invalid("ep_size", "1 to " + std::to_string(kMaxEpRanks) + ", the same in both layouts");
    }
    if (shape.hidden <= 0 || shape.hidden % 8 != 0 || shape.row_bytes() > kMaxCopyRowBytes ||
        shape.hidden != group.local.hidden) {
        return invalid("hidden", "a positive multiple of 8 of at most " + std::to_string(kMaxCopyRowBytes / 2) +
                                     ", the same in both layouts");
    }
    if (shape.tokens_per_rank < 1 || shape.tokens_per_rank != plan.tokens_per_rank || shape.top_k < 1 ||
        shape.top_k != plan.top_k || plan.num_experts < shape.top_k || plan.num_experts % shape.ep_size != 0) {
        return invalid("shape", "T >= 1, 1 <= k <= E, E a multiple of R, the same in both layouts");
    }
    if (plan.capacity_rows < kTileRows || plan.capacity_rows % kTileRows != 0) {
        return invalid("capacity_rows", "a positive multiple of " + std::to_string(kTileRows));
    }
    if (plan.ring_rows < kMinRingTiles * kTileRows || plan.ring_rows % kTileRows != 0) {
        return invalid("ring_rows", "a multiple of " + std::to_string(kTileRows) + " of at least " +
                                        std::to_string(kMinRingTiles * kTileRows));
    }
    if (group.timeout_ns == 0) {
        return invalid("timeout", "a positive peer timeout");
    }
    for (int32_t slot = 0; slot < group.num_ranks; ++slot) {
        const RankEndpoint<Peers>& endpoint = group.ranks[slot];
        if (endpoint.peers.ep_size != shape.ep_size || endpoint.peers.rank < 0 ||
            endpoint.peers.rank >= shape.ep_size || endpoint.window == nullptr || endpoint.local.status == nullptr) {
            return invalid("ranks[" + std::to_string(slot) + "]", "a rank of the group with its window and buffers");
        }
    }
    // Every kernel a step can launch is loaded before the first one runs (host/cuda/kernel_attributes.hpp says
    // why); after the first call this is a check of a bit.
    MOK_RETURN_IF_ERROR(load_exchange_kernels());
    MOK_RETURN_IF_ERROR(load_row_kernels());
    return load_plan_kernels();
}

template <typename Peers>
Status enqueue_routing_exchange(const LaunchGroup<Peers>& group, const RankRouting* routing, cudaStream_t stream) {
    MOK_RETURN_IF_ERROR(validate_group(group));
    const auto set = rank_set<ExchangeParams<Peers>>(group, group.window.shape.ep_size, [&](int32_t slot) {
        const RankEndpoint<Peers>& r = group.ranks[slot];
        return ExchangeParams<Peers>{r.peers, group.window, routing[slot].expert_ids, routing[slot].router_weights,
                                     r.local.control};
    });
    routing_exchange_kernel<Peers><<<set.num_ranks * set.blocks_per_rank, kExchangeThreads, 0, stream>>>(set);
    return launch_status("routing_exchange_kernel");
}

template <typename Peers>
Status enqueue_grads_announce(const LaunchGroup<Peers>& group, cudaStream_t stream) {
    MOK_RETURN_IF_ERROR(validate_group(group));
    const auto set = rank_set<AnnounceParams<Peers>>(group, 1, [&](int32_t slot) {
        const RankEndpoint<Peers>& r = group.ranks[slot];
        return AnnounceParams<Peers>{r.peers, group.window, r.local.control};
    });
    grads_announce_kernel<Peers><<<set.num_ranks, kSignalThreads, 0, stream>>>(set);
    return launch_status("grads_announce_kernel");
}

template <typename Peers>
Status enqueue_barrier(const LaunchGroup<Peers>& group, cudaStream_t stream) {
    MOK_RETURN_IF_ERROR(validate_group(group));
    const auto set = rank_set<BarrierParams<Peers>>(group, 1, [&](int32_t slot) {
        const RankEndpoint<Peers>& r = group.ranks[slot];
        return BarrierParams<Peers>{r.peers, group.window, r.local.control, wait_context(group, slot)};
    });
    barrier_kernel<Peers><<<set.num_ranks, kSignalThreads, 0, stream>>>(set);
    return launch_status("barrier_kernel");
}

template <typename Peers>
Status enqueue_combine_targets(const LaunchGroup<Peers>& group, cudaStream_t stream) {
    MOK_RETURN_IF_ERROR(validate_group(group));
    const auto set = rank_set<CombineTargetsParams<Peers>>(group, 1, [&](int32_t slot) {
        const RankEndpoint<Peers>& r = group.ranks[slot];
        return CombineTargetsParams<Peers>{r.peers, group.window, r.local.combine_rank_rows,
                                           r.local.combine_rank_flags};
    });
    combine_targets_kernel<Peers><<<set.num_ranks, kSignalThreads, 0, stream>>>(set);
    return launch_status("combine_targets_kernel");
}

// The closed list of providers.
template Status validate_group(const LaunchGroup<VirtualPeers>&);
template Status validate_group(const LaunchGroup<NcclPeers>&);
template Status enqueue_routing_exchange(const LaunchGroup<VirtualPeers>&, const RankRouting*, cudaStream_t);
template Status enqueue_routing_exchange(const LaunchGroup<NcclPeers>&, const RankRouting*, cudaStream_t);
template Status enqueue_grads_announce(const LaunchGroup<VirtualPeers>&, cudaStream_t);
template Status enqueue_grads_announce(const LaunchGroup<NcclPeers>&, cudaStream_t);
template Status enqueue_barrier(const LaunchGroup<VirtualPeers>&, cudaStream_t);
template Status enqueue_barrier(const LaunchGroup<NcclPeers>&, cudaStream_t);
template Status enqueue_combine_targets(const LaunchGroup<VirtualPeers>&, cudaStream_t);
template Status enqueue_combine_targets(const LaunchGroup<NcclPeers>&, cudaStream_t);

}  // namespace mok::comm
