// The standalone transport kernels, as host functions that enqueue them on a stream.
//
// A step of the transport, per rank (docs/transport.md has the full sequence and its memory orders):
//   forward   stage x rows into the window (stage_rows, host/comm), enqueue_routing_exchange, enqueue_plan,
//             enqueue_dispatch(kForward, kTokens), ... expert FFNs ..., enqueue_push(kForward), enqueue_combine
//   backward  stage dy rows, enqueue_grads_announce, enqueue_dispatch(kBackwardGrads, kGrads) (and
//             kBackwardReplay, kTokens, for replayed macrobatches), ... , enqueue_push(kBackwardGrads),
//             enqueue_combine(kBackwardGrads)
// Nothing here synchronises with the host: grids are sized from the shapes (for the worst case), the real row
// counts stay on the device, and every call can be captured in a CUDA graph. Failures inside the kernels are
// recorded in each rank's DeviceStatus (read it with host/comm/device_status.hpp after the stream completes);
// the Status these functions return reports only invalid arguments and launch errors.
//
// One call drives every rank of a LaunchGroup: one rank with real ranks (NcclPeers), all R ranks with virtual
// ranks (VirtualPeers); each rank gets its own slice of the launch's blocks.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device/comm/peers.hpp"
#include "device/comm/rank_set.hpp"
#include "device/layout/transport_layout.hpp"
#include "mok/status.hpp"
#include "plan/routing_plan.hpp"

namespace mok::comm {

// One rank a launch drives.
template <typename Peers>
struct RankEndpoint {
    Peers peers;                 // its rank, the group size and its view of the peers' windows
    char* window = nullptr;      // its own window (local address)
    layout::LocalBuffers local;  // its local block (plan, rings, control, status)
};

// How the dispatch pulls the rows of a source token that sends this rank several (dispatch.cuh). The ring's bytes
// are the same either way. kEveryRow is the default: on one GPU (EP 1) the groups measured 2-6% slower, since
// there the ring's stores, not the loads, bound the copy; their gain at EP 2, where they cut the rows loaded over
// NVLink about threefold for DeepSeek-V3, is not measured yet (docs/transport.md, section 15).
enum class DispatchPull : uint8_t {
    kEveryRow,     // each row on its own
    kTokenGroups,  // once per group of up to kMaxRowFanout of them, where the ring holds every row of the pass
};

template <typename Peers>
struct LaunchGroup {
    layout::SymmetricLayout window;  // the same on every rank
    layout::LocalLayout local;       // the same on every rank, except plan.rank (taken from each rank's peers)
    uint64_t timeout_ns = 0;         // budget of every bounded wait (Config::peer_timeout_ms)
    DispatchPull dispatch_pull = DispatchPull::kEveryRow;
    int32_t num_ranks = 0;
    RankEndpoint<Peers> ranks[kMaxLaunchRanks];
};

// Per rank: its [T, k] routing (device pointers).
struct RankRouting {
    const int32_t* expert_ids = nullptr;
    const float* router_weights = nullptr;
};

// Per rank: the output rows its push sends, by owner row (row r at r mod out_ring_rows).
struct PushSource {
    const void* out_rows = nullptr;       // [out_ring_rows, H] bf16
    int64_t out_ring_rows = 0;            // a multiple of 128, or at least the padded rows
    const uint64_t* out_ready = nullptr;  // [capacity_rows / 128] per-tile readiness from the producer, or null
    uint64_t* out_free = nullptr;         // [capacity_rows / 128] set once a tile was sent, or null
    const float* weight_grads = nullptr;  // [out_ring_rows] backward: d router weight per owner row, else null
};

// Per rank: what its combine reads and writes.
struct CombineTarget {
    const int32_t* expert_ids = nullptr;           // [T, k]
    const float* router_weights = nullptr;         // [T, k]
    const uint16_t* const* shared_rows = nullptr;  // device array of num_shared pointers to [T, H] bf16
    int32_t num_shared = 0;
    int64_t shared_row_stride = 0;      // elements
    uint16_t* out = nullptr;            // [T, H] bf16: y or dx
    int64_t out_row_stride = 0;         // elements
    float* weight_grads_out = nullptr;  // [T, k] backward only
};

// Checks the shapes and knobs the kernels rely on (the group's layouts and sizes); the enqueue functions call it.
template <typename Peers>
Status validate_group(const LaunchGroup<Peers>& group);

// Rank s writes its ids and weights into every rank's window and flags them; advances each rank's step.
template <typename Peers>
Status enqueue_routing_exchange(const LaunchGroup<Peers>& group, const RankRouting* routing, cudaStream_t stream);

// Each rank's plan, from the gathered ids (waits for them).
template <typename Peers>
Status enqueue_plan(const LaunchGroup<Peers>& group, cudaStream_t stream);

// Rank s announces its staged dy rows to every rank (for the current step).
template <typename Peers>
Status enqueue_grads_announce(const LaunchGroup<Peers>& group, cudaStream_t stream);

// Blocks (SMs) per rank of a dispatch or push. `remote` blocks copy the rows that cross NVLink; `local` blocks,
// when there are any, copy the rows that stay on the GPU (a rank's own tokens), else the remote blocks copy
// every row. The NVLink budget (Config::num_comm_sms_*) is the remote count; rows that stay local cost the
// same SM copy throughput as remote ones, so moving them off the communication SMs keeps those on the link.
struct CopyBlocks {
    int32_t remote = 0;
    int32_t local = 0;
};

// Pulls each rank's routed rows into ring `ring`.
template <typename Peers>
Status enqueue_dispatch(const LaunchGroup<Peers>& group, layout::TransportPass pass, layout::RingId ring,
                        CopyBlocks blocks, cudaStream_t stream);
// The same with `blocks_per_rank` blocks copying every row.
template <typename Peers>
Status enqueue_dispatch(const LaunchGroup<Peers>& group, layout::TransportPass pass, layout::RingId ring,
                        int32_t blocks_per_rank, cudaStream_t stream);

// Pushes each rank's output rows to their sources' combine rows.
template <typename Peers>
Status enqueue_push(const LaunchGroup<Peers>& group, layout::TransportPass pass, const PushSource* sources,
                    CopyBlocks blocks, cudaStream_t stream);
template <typename Peers>
Status enqueue_push(const LaunchGroup<Peers>& group, layout::TransportPass pass, const PushSource* sources,
                    int32_t blocks_per_rank, cudaStream_t stream);

// Each rank combines its tokens' rows (forward: y; backward: dx and d router weights).
template <typename Peers>
Status enqueue_combine(const LaunchGroup<Peers>& group, layout::TransportPass pass, const CombineTarget* targets,
                       cudaStream_t stream);

// Each rank's table of every rank's combine rows and flags (LocalLayout::combine_targets), for a down projection
// that stores its rows straight into them instead of a push (gemm::SourceTargets).
template <typename Peers>
Status enqueue_combine_targets(const LaunchGroup<Peers>& group, cudaStream_t stream);

// A barrier across the EP group (one block per rank).
template <typename Peers>
Status enqueue_barrier(const LaunchGroup<Peers>& group, cudaStream_t stream);

}  // namespace mok::comm
