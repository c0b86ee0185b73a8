// Waiting for a flag to reach a sequence number: the one "observe" pattern of the transport.
//
// Flags only grow (layout/transport_layout.hpp), so a wait is "until *flag >= target". Each poll is an acquire load
// (never satisfied from a stale register or L1 line): the one that sees the target orders every later read of the
// guarded data after the writer's release. Every wait is bounded (bounded_wait): a flag
// that never arrives records a DeviceStatus naming the rank, the block and the site, and the caller unwinds.
#pragma once

#include <cstdint>

#include "common/device_status.hpp"
#include "device/common/bounded_wait.cuh"
#include "device/ptx/atomics.cuh"

namespace mok::comm {

// Waits for a flag written by another rank (or by this rank through its own window). System scope. Every poll is an
// acquire load: the one that sees the target synchronizes with the writer's release, so the writer's data (stored
// before its release) is visible from here on. An acquire load rather than relaxed polls and a fence.acq_rel: the
// fence's release half would also wait for this thread's earlier writes to drain system-wide (MEMBAR.SYS), which a
// profile of the dispatch showed at every team's first gates and which the combine ran for every slot it waits for
// (docs/transport.md, section 12, "Flags observed by acquire loads").
__device__ __forceinline__ bool wait_flag_sys(const device::WaitContext& ctx, WaitSite site, const uint64_t* flag,
                                              uint64_t target) {
    return device::bounded_wait(
        ctx, site, static_cast<int64_t>(target), [&] { return ptx::ld_acquire_sys(flag) >= target; },
        [&] { return static_cast<int64_t>(ptx::ld_relaxed_sys(flag)); });
}

// Waits for a flag written on this device (ring readiness, ring slots freed). GPU scope, acquire loads as above.
__device__ __forceinline__ bool wait_flag_gpu(const device::WaitContext& ctx, WaitSite site, const uint64_t* flag,
                                              uint64_t target) {
    return device::bounded_wait(
        ctx, site, static_cast<int64_t>(target), [&] { return ptx::ld_acquire_gpu(flag) >= target; },
        [&] { return static_cast<int64_t>(ptx::ld_relaxed_gpu(flag)); });
}

// Non-blocking forms: true (the load that saw it an acquire) when the flag already reached `target`. A caller that
// must not block while it still holds unpublished work polls first, publishes, and only then waits.
__device__ __forceinline__ bool flag_reached_sys(const uint64_t* flag, uint64_t target) {
    return ptx::ld_acquire_sys(flag) >= target;
}

__device__ __forceinline__ bool flag_reached_gpu(const uint64_t* flag, uint64_t target) {
    return ptx::ld_acquire_gpu(flag) >= target;
}

// True when an earlier kernel of this rank's step (or another block of this launch) failed: the kernel then
// does nothing, so one failure ends the step within one timeout instead of one timeout per kernel.
__device__ __forceinline__ bool step_failed(const device::WaitContext& ctx) {
    return device::abort_requested(ctx);
}

}  // namespace mok::comm
