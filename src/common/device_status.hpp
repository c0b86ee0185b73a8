// The record a kernel leaves when it cannot finish: shared by host and device.
//
// Nothing on the GPU traps or hangs. A bounded wait that runs out, or a schedule that overflows, writes one
// DeviceStatus (the first writer wins, so the record names the first failure) and the kernel winds down; the
// host turns the record into a mok::Status naming the rank, the block and what was awaited.
#pragma once

#include <cstdint>

namespace mok {

enum class DeviceErrorCode : int32_t {
    kNone = 0,
    kTimeout = 1,           // a bounded wait ran out
    kScheduleOverflow = 2,  // the routing plan needs more rows than the schedule capacity
    kInvalidRouting = 3,    // an expert id out of range or repeated in a token, or a non-finite router weight
};

// What a wait was waiting for; names the site in the host's error message.
enum class WaitSite : int32_t {
    kNone = 0,
    kPipelineFull,     // a GEMM consumer waited for a TMA stage to land
    kPipelineEmpty,    // a GEMM producer waited for a consumer to free a stage
    kRowsReady,        // a GEMM waited for dispatched rows
    kRingSlotFree,     // dispatch waited for a ring slot's previous occupant to be consumed
    kCombineArrivals,  // a source waited for its expert outputs to arrive
    kRoutingExchange,  // a rank waited for the peers' expert ids
    kPeerBarrier,      // a barrier across ranks
    kBulkCopy,         // a bulk copy's completion
    kEpilogueLoad,     // a weight-gradient epilogue waited for main_grad's TMA load
    kWarpgroupTurn,    // a ping-pong GEMM warpgroup waited for the other's K loop to end
    kEpilogueHandoff,  // a GEMM's consumers and its epilogue warpgroup waited for each other's tile hand-off
    kRowsLanded,       // dispatch waited for a tile's rows that other teams store with their token's first row
};

const char* to_string(WaitSite site);

// One record per launch (or per step of a persistent kernel), zeroed by the host before the launch.
struct alignas(16) DeviceStatus {
    int32_t code;      // DeviceErrorCode; written last, by the first failing thread
    int32_t rank;      // EP rank of the failing block plus one (0 while the record is unclaimed)
    int32_t block;     // blockIdx.x of the failing block
    int32_t site;      // WaitSite
    int64_t observed;  // the value seen when the wait gave up (or rows needed, on overflow)
    int64_t expected;  // the value waited for (or the capacity, on overflow)
};

}  // namespace mok
