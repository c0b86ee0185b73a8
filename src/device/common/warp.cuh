// Warp-level vocabulary shared by the device components: the warp's width, the mask of all its lanes, and a
// prefix sum over its lanes.
#pragma once

#include <cstdint>

namespace mok::device {

inline constexpr uint32_t kWarpSize = 32;
inline constexpr uint32_t kFullWarpMask = 0xffffffffu;

// The inclusive prefix sum of `value` over the warp's lanes; `lane` is the caller's. Every lane must call it.
template <typename T>
__device__ __forceinline__ T warp_inclusive_sum(T value, uint32_t lane) {
#pragma unroll
    for (uint32_t offset = 1; offset < kWarpSize; offset *= 2) {
        const T below = __shfl_up_sync(kFullWarpMask, value, offset);
        value += lane >= offset ? below : T{0};
    }
    return value;
}

}  // namespace mok::device
