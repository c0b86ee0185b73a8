// The stand-in "expert" the transport tests put between dispatch and combine: a per-expert affine map of each
// element, rounded to bf16, and a per-row router-weight gradient. The GPU test consumer and the CPU expectation
// both call these, with the correctly rounded operations of src/common, so their bits agree. Every expert maps
// differently (scale and bias are distinct for every id), so a row routed to the wrong expert, or combined into
// the wrong slot, changes the result.
#pragma once

#include <cstdint>

#include "common/bf16.hpp"
#include "common/fp32_ops.hpp"
#include "common/host_device.hpp"

namespace mok::comm::testing {

// Exact in fp32 for every expert id below 2^16.
MOK_HOST_DEVICE MOK_INLINE float expert_scale(int32_t expert) {
    return 1.0f + static_cast<float>(expert) / 256.0f;
}
MOK_HOST_DEVICE MOK_INLINE float expert_bias(int32_t expert) {
    return static_cast<float>(expert) / 1024.0f;
}

// Forward "expert output" element from an x element.
MOK_HOST_DEVICE MOK_INLINE uint16_t forward_output(uint16_t x, int32_t expert) {
    return round_to_bf16_bits(fp32::fma(bf16_bits_to_float(x), expert_scale(expert), expert_bias(expert)));
}

// Backward "dx row" element from a dy element.
MOK_HOST_DEVICE MOK_INLINE uint16_t backward_output(uint16_t dy, int32_t expert) {
    return round_to_bf16_bits(fp32::fma(bf16_bits_to_float(dy), expert_scale(expert), -expert_bias(expert)));
}

// Backward router-weight gradient of a row, from its first dy element.
MOK_HOST_DEVICE MOK_INLINE float weight_grad(uint16_t first_dy, int32_t expert) {
    return fp32::fma(bf16_bits_to_float(first_dy), expert_scale(expert), static_cast<float>(expert));
}

}  // namespace mok::comm::testing
