// The row counts the layer's grouped GEMMs read, and the router weight of every routed row.
//
// The GEMMs read their row space from device memory (gemm::RowGroups) and, unlike the transport's kernels, do not
// look at the step's DeviceStatus. So between the dispatch and the first GEMM of a step, one small launch copies
// the plan's row counts into the RowGroups the GEMMs read -- or zeros when the step has already failed (a schedule
// overflow, invalid routing, a peer timeout). A failed step then runs GEMMs over no rows: nothing reads a plan
// that overflowed or was never finished, and no weight gradient is accumulated from it.
//
// On the pipelined path (docs/layer.md, "Pipelined dispatch") the launch runs before the dispatch, and also writes
// the number the dispatch's ring flags will carry this step, which the GEMM reading the arriving rows waits for.
//
// In the forward the same launch gathers each owner row's router weight from the exchanged weights in the rank's
// window (the plan's RowSource names the slot), for the backward's scaling of dy and dh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/device_status.hpp"
#include "device/comm/rank_set.hpp"
#include "device/layout/transport_layout.hpp"
#include "mok/status.hpp"
#include "plan/routing_plan.hpp"

namespace mok::layer {

// One rank's share of the launch. Pointers are device memory of that rank.
struct RowGateRank {
    DeviceStatus* status = nullptr;              // the rank's record: a claimed one means the step failed
    int32_t rank = 0;                            // EP rank
    const int32_t* owner_padded_rows = nullptr;  // [R] the plan's
    const int32_t* expert_rows = nullptr;        // [E] the plan's (global experts)
    int32_t* routed_rows = nullptr;              // [1] written: RowGroups::num_padded_rows of the routed experts
    int32_t* routed_segment_rows = nullptr;      // [E/R] written: RowGroups::segment_rows of the routed experts
    int32_t* shared_rows = nullptr;              // [1] written: the shared experts' padded token rows, or 0
    int32_t* shared_segment_rows = nullptr;      // [1] written: T, or 0
    uint64_t* ready_sequence = nullptr;          // [1] written when set: this step's ring-flag number for `pass`
    // Forward only; null in the backward, whose row weights the forward saved.
    const plan::RowSource* row_source = nullptr;        // [capacity_rows] the plan's
    const char* window = nullptr;                       // the rank's window: the exchanged router weights
    const layout::TransportControl* control = nullptr;  // the step: its parity selects the weights' buffer, and
                                                        // it numbers the ring flags (set with ready_sequence too)
    float* row_weight = nullptr;                        // [capacity_rows] written for the used rows
};

struct RowGateLaunch {
    layout::SymmetricLayout window;                                // the windows' offsets
    int32_t num_local_experts = 0;                                 // E/R
    int64_t tokens = 0;                                            // T
    int64_t padded_tokens = 0;                                     // T rounded up to 128
    int64_t capacity_rows = 0;                                     // the plan's row table
    layout::TransportPass pass = layout::TransportPass::kForward;  // whose ring flags ready_sequence names
    int32_t num_ranks = 0;
    RowGateRank ranks[comm::kMaxLaunchRanks];
};

// Enqueues the launch on `stream`: one slice of blocks per rank, sized for the capacity (no host sync).
Status enqueue_row_gate(const RowGateLaunch& launch, cudaStream_t stream);

// Loads the kernel's code on the current device, once (enqueue_row_gate calls it; the layer calls it at creation,
// before any step enqueues a kernel that waits on later work: host/cuda/kernel_attributes.hpp says why).
Status load_row_gate_kernel();

}  // namespace mok::layer
