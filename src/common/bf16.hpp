// bfloat16 on the host, and the one rounding rule (fp32 -> bf16, round to nearest even) both sides use.
//
// The device side converts with cvt.rn.bf16.f32 (__float2bfloat16_rn), which rounds to nearest even as
// round_to_bf16_bits does; the two differ only in the payload of NaNs, which no check accepts anyway. On the
// device round_to_bf16_bits and round_to_bf16 are that one instruction too, not the ten integer operations of the
// host's version: the SwiGLU-backward epilogue rounds every h it recomputes, and its arithmetic bounds its time
// (docs/gemm.md). The GPU test mok_bf16_device_test compares the two for every fp32 bit pattern.
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__)
#include <cuda_bf16.h>
#endif

#include "common/fp32_ops.hpp"
#include "common/host_device.hpp"

namespace mok {

// The host's rounding of a non-NaN fp32 bit pattern to bf16, in integer arithmetic: add 0x7fff plus the kept
// part's lowest bit (ties go to the even neighbour), then truncate. Also the oracle of mok_bf16_device_test.
MOK_HOST_DEVICE MOK_INLINE uint16_t round_bits_to_nearest_even(uint32_t bits) {
    const uint32_t round_bias = 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>((bits + round_bias) >> 16);
}

// Rounds to nearest, ties to even; a NaN stays a NaN (on the host a quiet one with its sign and the payload's
// high bits; on the device the hardware's).
MOK_HOST_DEVICE MOK_INLINE uint16_t round_to_bf16_bits(float v) {
#if defined(__CUDA_ARCH__)
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
#else
    const uint32_t bits = fp32::bits_of(v);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return static_cast<uint16_t>((bits >> 16) | 0x0040u);
    }
    return round_bits_to_nearest_even(bits);
#endif
}

MOK_HOST_DEVICE MOK_INLINE float bf16_bits_to_float(uint16_t b) {
    return fp32::from_bits(static_cast<uint32_t>(b) << 16);
}

// The value v takes after a round trip through bf16.
MOK_HOST_DEVICE MOK_INLINE float round_to_bf16(float v) {
    return bf16_bits_to_float(round_to_bf16_bits(v));
}

// Host-side storage type: 16 raw bits, no arithmetic.
struct Bf16 {
    uint16_t bits = 0;

    static Bf16 from_float(float v) { return Bf16{round_to_bf16_bits(v)}; }
    float to_float() const { return bf16_bits_to_float(bits); }
    bool operator==(const Bf16&) const = default;
};
static_assert(sizeof(Bf16) == 2, "Bf16 must be two bytes: host buffers alias device bf16 tensors");

}  // namespace mok
