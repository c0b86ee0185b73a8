// Waiting for a flag to reach a sequence number: the one "observe" pattern of the transport.
//
// Flags only grow (layout/transport_layout.hpp), so a wait is "until *flag >= target". The poll is relaxed
// (cheap, and never satisfied from a stale register or L1 line); once it succeeds, one acquire fence orders
// every later read of the guarded data after the writer's release. Every wait is bounded (bounded_wait): a flag
// that never arrives records a DeviceStatus naming the rank, the block and the site, and the caller unwinds.
#pragma once

#include <cstdint>

#include "common/device_status.hpp"
#include "device/common/bounded_wait.cuh"
#include "device/ptx/atomics.cuh"

namespace mok::comm {

// Waits for a flag written by another rank (or by this rank through its own window). System scope.
__device__ __forceinline__ bool wait_flag_sys(const device::WaitContext& ctx, WaitSite site, const uint64_t* flag,
                                              uint64_t target) {
    const bool arrived = device::bounded_wait(
        ctx, site, static_cast<int64_t>(target), [&] { return ptx::ld_relaxed_sys(flag) >= target; },
        [&] { return static_cast<int64_t>(ptx::ld_relaxed_sys(flag)); });
    if (arrived) {
        // Acquire half of the pattern: the writer's data (stored before its release) is visible from here on.
        ptx::fence_acq_rel_sys();
    }
    return arrived;
}

// Waits for a flag written on this device (ring readiness, ring slots freed). GPU scope.
__device__ __forceinline__ bool wait_flag_gpu(const device::WaitContext& ctx, WaitSite site, const uint64_t* flag,
                                              uint64_t target) {
    const bool arrived = device::bounded_wait(
        ctx, site, static_cast<int64_t>(target), [&] { return ptx::ld_relaxed_gpu(flag) >= target; },
        [&] { return static_cast<int64_t>(ptx::ld_relaxed_gpu(flag)); });
    if (arrived) {
        ptx::fence_acq_rel_gpu();
    }
    return arrived;
}

// Non-blocking forms: true (with the acquire fence issued) when the flag already reached `target`. A caller that
// must not block while it still holds unpublished work polls first, publishes, and only then waits.
__device__ __forceinline__ bool flag_reached_sys(const uint64_t* flag, uint64_t target) {
    if (ptx::ld_relaxed_sys(flag) < target) {
        return false;
    }
    ptx::fence_acq_rel_sys();
    return true;
}

__device__ __forceinline__ bool flag_reached_gpu(const uint64_t* flag, uint64_t target) {
    if (ptx::ld_relaxed_gpu(flag) < target) {
        return false;
    }
    ptx::fence_acq_rel_gpu();
    return true;
}

// True when an earlier kernel of this rank's step (or another block of this launch) failed: the kernel then
// does nothing, so one failure ends the step within one timeout instead of one timeout per kernel.
__device__ __forceinline__ bool step_failed(const device::WaitContext& ctx) {
    return device::abort_requested(ctx);
}

}  // namespace mok::comm
