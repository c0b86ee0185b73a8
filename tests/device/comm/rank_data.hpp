// One rank's test tensors on the device: its inputs, the stand-in experts' output rows, and the outputs the
// transport writes (poisoned before every run).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/device_buffer.hpp"
#include "comm/transport_problem.hpp"
#include "device/comm/transport_launch.hpp"
#include "host/plan/host_plan.hpp"

namespace mok::comm::testing {

struct RankDeviceData {
    DeviceBuffer<int32_t> expert_ids;               // [T * k]
    DeviceBuffer<float> router_weights;             // [T * k]
    DeviceBuffer<uint16_t> x;                       // [T * H]
    DeviceBuffer<uint16_t> dy;                      // [T * H]
    DeviceBuffer<uint16_t> shared_out;              // [S * T * H]
    DeviceBuffer<uint16_t> shared_dx;               // [S * T * H]
    DeviceBuffer<const uint16_t*> shared_out_rows;  // [S] pointers into shared_out
    DeviceBuffer<const uint16_t*> shared_dx_rows;   // [S]
    DeviceBuffer<uint16_t> captured;                // [capacity * H] every dispatched row, as the consumer saw it
    DeviceBuffer<uint16_t> out_rows;                // [out_ring_rows * H] the stand-in experts' outputs
    DeviceBuffer<float> out_weight_grads;           // [out_ring_rows]
    DeviceBuffer<uint64_t> out_ready;               // [capacity / 128]
    DeviceBuffer<uint64_t> out_free;                // [capacity / 128]
    DeviceBuffer<uint16_t> y;                       // [T * H]
    DeviceBuffer<uint16_t> dx;                      // [T * H]
    DeviceBuffer<float> d_weights;                  // [T * k]
    int64_t out_ring_rows = 0;
    int32_t num_shared = 0;

    // Uploads rank `rank`'s inputs; output rows go round a ring of out_ring_rows rows (at least the capacity
    // unless the run publishes per tile).
    void upload(const TransportProblem& problem, int32_t rank, int64_t out_ring_rows);
    // Fills every output and intermediate with NaNs.
    void poison();

    RankRouting routing() const { return {expert_ids.data(), router_weights.data()}; }
    PushSource push_source(layout::TransportPass pass, bool per_tile_flags) const;
    CombineTarget combine_target(layout::TransportPass pass, int64_t hidden) const;
};

// A rank's device plan tables, downloaded into a HostPlan for comparison with the host's.
plan::HostPlan download_plan(const plan::PlanTables& tables, const plan::PlanShape& shape);

}  // namespace mok::comm::testing
