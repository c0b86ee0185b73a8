// Bounded waits: every spin on the device goes through here.
//
// A wait polls its condition; only after the first few failed polls does it read the clock, so the fast path
// costs nothing extra. When the deadline passes it records a DeviceStatus naming the rank, the block and the
// site, and returns false; the caller then unwinds (skips its remaining work) instead of hanging. Other
// blocks that later find the status set give up at once (abort_requested), so one lost peer ends the whole
// launch within one timeout.
#pragma once

#include <cstdint>

#include "common/device_status.hpp"
#include "device/ptx/timer.cuh"

namespace mok::device {

struct WaitContext {
    DeviceStatus* status;  // the launch's record (global memory, host-visible)
    int32_t rank;          // EP rank of this block, for the report
    uint64_t timeout_ns;   // the budget of one wait
};

// True once any block of this launch has recorded an error.
__device__ __forceinline__ bool abort_requested(const WaitContext& ctx) {
    // A relaxed volatile read is enough: the flag only makes other waiters give up sooner, it orders nothing.
    return *reinterpret_cast<volatile int32_t*>(&ctx.status->code) != 0;
}

// Records the first error of the launch; later ones are dropped so the record names the root cause.
__device__ __forceinline__ void record_error(const WaitContext& ctx, DeviceErrorCode code, WaitSite site,
                                             int64_t observed, int64_t expected) {
    // Claim the record with a CAS on a separate word (the rank field) before filling it, then publish the code
    // last behind a fence, so a host that sees a non-zero code sees the whole record.
    if (atomicCAS(reinterpret_cast<int32_t*>(&ctx.status->rank), 0, ctx.rank + 1) == 0) {
        ctx.status->block = static_cast<int32_t>(blockIdx.x);
        ctx.status->site = static_cast<int32_t>(site);
        ctx.status->observed = observed;
        ctx.status->expected = expected;
        __threadfence_system();
        atomicExch(&ctx.status->code, static_cast<int32_t>(code));
    }
}

namespace detail {

// The loop of both waits below; kGiveUpOnAbort: also return (false) as soon as another block has failed.
template <bool kGiveUpOnAbort, typename ReadyFn, typename ObserveFn>
__device__ __forceinline__ bool bounded_poll(const WaitContext& ctx, WaitSite site, int64_t expected, ReadyFn&& ready,
                                             ObserveFn&& observe) {
    // Polls before the clock is first read: most waits end within them, at the cost of one poll each.
    constexpr int kPollsBeforeClock = 64;
#pragma unroll 1
    for (int i = 0; i < kPollsBeforeClock; ++i) {
        if (ready()) {
            return true;
        }
    }
    const uint64_t deadline = ptx::global_timer_ns() + ctx.timeout_ns;
    while (true) {
        if (ready()) {
            return true;
        }
        if constexpr (kGiveUpOnAbort) {
            if (abort_requested(ctx)) {
                return false;
            }
        }
        if (ptx::global_timer_ns() > deadline) {
            record_error(ctx, DeviceErrorCode::kTimeout, site, observe(), expected);
            return false;
        }
    }
}

}  // namespace detail

// Polls `ready()` until it returns true (-> true) or the timeout passes or another block failed (-> false).
// `observe()` gives the value reported on timeout; `expected` is what the wait needed.
template <typename ReadyFn, typename ObserveFn>
__device__ __forceinline__ bool bounded_wait(const WaitContext& ctx, WaitSite site, int64_t expected, ReadyFn&& ready,
                                             ObserveFn&& observe) {
    return detail::bounded_poll<true>(ctx, site, expected, ready, observe);
}

// The same for a wait on an asynchronous operation of this block's own, such as a bulk load into its shared memory:
// it gives up on its timeout only, not when another block has failed. Such an operation completes whatever other
// blocks do, and a thread that left it early would leave it writing into shared memory the block may reuse.
template <typename ReadyFn, typename ObserveFn>
__device__ __forceinline__ bool bounded_wait_own(const WaitContext& ctx, WaitSite site, int64_t expected,
                                                 ReadyFn&& ready, ObserveFn&& observe) {
    return detail::bounded_poll<false>(ctx, site, expected, ready, observe);
}

}  // namespace mok::device
