// Wall-clock time on the device, for bounded waits.
#pragma once

#include <cstdint>

namespace mok::ptx {

// %globaltimer counts nanoseconds and is the same clock on every SM (clock64 is per SM and scales with the
// clock frequency), so a timeout in nanoseconds means the same on every block. It ticks coarsely (about a
// microsecond), which is plenty for timeouts of milliseconds to seconds.
__device__ __forceinline__ uint64_t global_timer_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

}  // namespace mok::ptx
