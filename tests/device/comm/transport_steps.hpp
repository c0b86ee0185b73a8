// A forward and a backward pass of the transport for the tests, on any LaunchGroup (all virtual ranks of a GPU,
// or the one real rank of a thread), with the stand-in consumer between dispatch and push.
//
// Two ways to run the data path:
//   kStandalone  the library's standalone kernels in stream order: dispatch, then the consumer, then push, then
//                combine. The ring holds every row (no laps).
//   kPipelined   dispatch, consumer and push as roles of one launch (as the fused kernel will run them), with
//                per-tile flags between them, so rings smaller than the routed rows take several laps.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "comm/rank_data.hpp"
#include "device/comm/transport_launch.hpp"
#include "mok/status.hpp"

namespace mok::comm::testing {

enum class DataPath : uint8_t { kStandalone, kPipelined };

struct StepOptions {
    DataPath path = DataPath::kStandalone;
    int32_t dispatch_blocks = 2;  // per rank
    int32_t consumer_blocks = 2;
    int32_t push_blocks = 2;
    int32_t local_blocks = 0;  // per copy role: blocks for the rows that stay on the GPU (CopyBlocks::local)
};

// Stages x, exchanges the routing, plans, dispatches, runs the stand-in experts, pushes and combines (y).
// `data[slot]` belongs to group.ranks[slot]. Enqueues only; the caller reads the DeviceStatus afterwards.
template <typename Peers>
Status enqueue_forward(const LaunchGroup<Peers>& group, std::span<RankDeviceData* const> data,
                       const StepOptions& options, cudaStream_t stream);

// Stages dy, announces it, dispatches dy rows, runs the stand-in experts' backward, pushes dx rows and router
// weight gradients, and combines (dx, d router weights). Follows a forward of the same step.
template <typename Peers>
Status enqueue_backward(const LaunchGroup<Peers>& group, std::span<RankDeviceData* const> data,
                        const StepOptions& options, cudaStream_t stream);

// The status records of the group's ranks.
template <typename Peers>
std::vector<DeviceStatus*> status_records(const LaunchGroup<Peers>& group);

// Fills the group's ring rows and combine rows with NaNs (between steps, with no kernel running).
template <typename Peers>
void poison_transport(const LaunchGroup<Peers>& group);

}  // namespace mok::comm::testing
