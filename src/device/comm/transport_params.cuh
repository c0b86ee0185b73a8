// Host-side builders of the components' Params for one rank of a LaunchGroup. The standalone launch functions use
// them, and so does any kernel that composes the components itself (the fused megakernel, the tests' pipelines).
#pragma once

#include <cstdint>

#include "device/comm/combine_push.cuh"
#include "device/comm/combine_reduce.cuh"
#include "device/comm/dispatch.cuh"
#include "device/comm/transport_launch.hpp"
#include "device/common/bounded_wait.cuh"

namespace mok::comm {

template <typename Peers>
device::WaitContext wait_context(const LaunchGroup<Peers>& group, int32_t slot) {
    const RankEndpoint<Peers>& endpoint = group.ranks[slot];
    return device::WaitContext{endpoint.local.status, endpoint.peers.rank, group.timeout_ns};
}

// The plan shape of the rank in `slot`.
template <typename Peers>
plan::PlanShape plan_shape_of(const LaunchGroup<Peers>& group, int32_t slot) {
    plan::PlanShape shape = group.local.plan;
    shape.rank = group.ranks[slot].peers.rank;
    return shape;
}

template <typename Peers>
DispatchParams<Peers> dispatch_params(const LaunchGroup<Peers>& group, int32_t slot, layout::TransportPass pass,
                                      layout::RingId ring) {
    const RankEndpoint<Peers>& r = group.ranks[slot];
    const int32_t ring_idx = static_cast<int32_t>(ring);
    return DispatchParams<Peers>{
        r.peers,
        group.window,
        pass,
        group.window.shape.top_k,
        r.local.plan.row_source,
        r.local.plan.owner_padded_rows,
        reinterpret_cast<char*>(r.local.ring_rows[ring_idx]),
        group.local.plan.ring_rows,
        r.local.ring_ready[ring_idx],
        r.local.ring_free[ring_idx],
        r.local.control,
        wait_context(group, slot),
        r.local.ring_parts[ring_idx],
        r.local.ring_claims[ring_idx],
        group.dispatch_pull == DispatchPull::kTokenGroups ? r.local.plan.owned_slot_rows : nullptr};
}

template <typename Peers>
PushParams<Peers> push_params(const LaunchGroup<Peers>& group, int32_t slot, layout::TransportPass pass,
                              const PushSource& source) {
    const RankEndpoint<Peers>& r = group.ranks[slot];
    return PushParams<Peers>{r.peers,
                             group.window,
                             pass,
                             r.local.plan.row_source,
                             r.local.plan.owner_padded_rows,
                             static_cast<const char*>(source.out_rows),
                             source.out_ring_rows,
                             source.out_ready,
                             source.out_free,
                             source.weight_grads,
                             r.local.control,
                             wait_context(group, slot),
                             r.local.push_parts,
                             r.local.push_claims};
}

template <typename Peers>
CombineParams combine_params(const LaunchGroup<Peers>& group, int32_t slot, layout::TransportPass pass,
                             const CombineTarget& target) {
    const RankEndpoint<Peers>& r = group.ranks[slot];
    return CombineParams{r.window,
                         group.window,
                         pass,
                         target.expert_ids,
                         target.router_weights,
                         target.shared_rows,
                         target.num_shared,
                         target.shared_row_stride,
                         target.out,
                         target.out_row_stride,
                         target.weight_grads_out,
                         r.local.control,
                         wait_context(group, slot)};
}

}  // namespace mok::comm
