// Cache hints: requests that move data toward an SM ahead of its loads, with no effect on what any load returns.
#pragma once

#include <cstdint>

namespace mok::ptx {

// Asks for the line holding `address` (global memory) to be brought into this SM's L1. A hint only: it orders
// nothing and may be dropped, so it needs no fence; the later load reads memory as it would have without it.
__device__ __forceinline__ void prefetch_global_l1(const void* address) {
    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(reinterpret_cast<uint64_t>(address)));
}

}  // namespace mok::ptx
