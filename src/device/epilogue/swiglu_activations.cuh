// The SwiGLU's activation, s = sigmoid(g) and silu(g) = g s, for several values at once, with the bits of
// swiglu::activation (src/common/swiglu.hpp) for every input, and no branch per value.
//
// Why: swiglu::activation branches twice per value -- exp for arguments whose 2^n is not a normal float, and the
// correctly rounded division 1 / (1 + e^-g) for divisors its fast path cannot take. A branch ends the compiler's
// scheduling region, so the values of an epilogue's pass ran one after another, each a chain of dependent
// instructions (profiled, the dgrad_down epilogue warps' stalls were mostly a dependent instruction's latency,
// docs/gemm.md). Here the common path of every value runs first, straight-line, and one branch per batch takes the
// general path for the values that need it, which real activations never do (|g| < 87 and no NaN).
//
// The reciprocal: for a divisor d in [1, 2^126) (every 1 + e^-g short of the general path), y0 = rcp.approx(d) is
// within one ulp of 1/d, e = 1 - d y0 is exact in one fma (|e| < 2^-22 and d y0 has at most 48 significant bits),
// and y0 + y0 e rounded once is the correctly rounded 1/d, the bits of fp32::div(1, d). That last step is checked,
// not proved: mok_swiglu_activations_test compares it with the division for every fp32 d in [1, 2^126) on the GPU.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "common/fp32_ops.hpp"
#include "common/swiglu.hpp"
#include "device/ptx/math.cuh"

namespace mok::epilogue {

// Below this divisor, 1/d is a normal float and rcp.approx.ftz's flush to zero cannot touch it. Larger divisors,
// infinity and NaN take fp32::div.
inline constexpr float kReciprocalDivisorLimit = 0x1p126f;

// 1/d, correctly rounded, for d in [1, kReciprocalDivisorLimit).
__device__ __forceinline__ float reciprocal_in_range(float d) {
    const float y0 = ptx::rcp_approx_ftz(d);
    const float e = fp32::fma(-d, y0, 1.0f);
    return fp32::fma(y0, e, y0);
}

// a[i] = swiglu::activation(g[i]) for kCount values, bit for bit.
template <int kCount>
__device__ __forceinline__ void swiglu_activations(const float* g, swiglu::Activation* a) {
    // e^-g by the one-factor path; -g is exact.
    float e[kCount];
    bool any_exp_out_of_range = false;
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
        const fp32::ExpInRange r = fp32::exp_in_normal_range(-g[i]);
        e[i] = r.value;
        any_exp_out_of_range |= !r.in_range;
    }
    if (any_exp_out_of_range) {
#pragma unroll
        for (int i = 0; i < kCount; ++i) {
            e[i] = fp32::exp(-g[i]);
        }
    }
    // s = 1 / (1 + e^-g): the refined reciprocal where it holds, the division where it may not.
    float d[kCount];
    bool any_divisor_out_of_range = false;
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
        d[i] = fp32::add(1.0f, e[i]);
        a[i].s = reciprocal_in_range(d[i]);
        any_divisor_out_of_range |= !(d[i] < kReciprocalDivisorLimit);  // also infinity and NaN
    }
    if (any_divisor_out_of_range) {
#pragma unroll
        for (int i = 0; i < kCount; ++i) {
            a[i].s = fp32::div(1.0f, d[i]);
        }
    }
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
        a[i].silu = fp32::mul(g[i], a[i].s);
    }
}

// The low and high halves of bf16 pairs, as fp32, in order.
template <int kPairs>
__device__ __forceinline__ void unpack_bf16_pairs(const __nv_bfloat162* pairs, float* out) {
#pragma unroll
    for (int p = 0; p < kPairs; ++p) {
        out[2 * p] = __low2float(pairs[p]);
        out[2 * p + 1] = __high2float(pairs[p]);
    }
}

}  // namespace mok::epilogue
