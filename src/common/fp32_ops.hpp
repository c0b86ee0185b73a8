// Correctly rounded fp32 operations that give the same bits on the CPU and the GPU.
//
// Why: the contract (docs/semantics.md) fixes where results are rounded, and the CPU reference's device-rounding
// mode reproduces the GPU bit for bit wherever the arithmetic is not a GEMM reduction (SwiGLU, its backward,
// the combine). On the GPU, nvcc contracts a*b+c into one fma unless told not to, so every operation here is
// an explicit round-to-nearest intrinsic; on the CPU, mok builds with -std=c++20 (no GNU extensions), under
// which g++ does not contract (-ffp-contract=off), and fma is std::fma, correctly rounded by the C library.
// Neither side may build with fast-math flags; CMakeLists.txt sets none.
#pragma once

#include <cstdint>

#include "common/host_device.hpp"

#if !defined(__CUDA_ARCH__)
#include <cmath>
#include <cstring>
#endif

namespace mok::fp32 {

MOK_HOST_DEVICE MOK_INLINE float add(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

MOK_HOST_DEVICE MOK_INLINE float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

MOK_HOST_DEVICE MOK_INLINE float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

MOK_HOST_DEVICE MOK_INLINE float div(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

// a * b + c with one rounding.
MOK_HOST_DEVICE MOK_INLINE float fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    return __fmaf_rn(a, b, c);
#else
    return std::fma(a, b, c);
#endif
}

MOK_HOST_DEVICE MOK_INLINE uint32_t bits_of(float v) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(v);
#else
    uint32_t b;
    std::memcpy(&b, &v, sizeof(b));
    return b;
#endif
}

MOK_HOST_DEVICE MOK_INLINE float from_bits(uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(b);
#else
    float v;
    std::memcpy(&v, &b, sizeof(v));
    return v;
#endif
}

// e^x to within 2 ulp over the whole fp32 range, from the operations above only, so that the CPU and the GPU
// agree bit for bit (the CUDA and C library expf differ in their last bits). Cody-Waite reduction
// x = n ln2 + r with |r| <= ln2/2, a degree-6 minimax polynomial for e^r (Cephes' expf coefficients), then an
// exact scaling by 2^n done in two power-of-two factors so that neither overflows early.
MOK_HOST_DEVICE MOK_INLINE float exp(float x) {
    constexpr float kMaxArg = 88.72283935546875f;    // above: e^x overflows fp32
    constexpr float kMinArg = -103.97208404541016f;  // below: e^x underflows to 0
    constexpr float kLog2e = 1.44269502162933349609f;
    constexpr float kRoundShift = 12582912.0f;    // 1.5 * 2^23: adding it rounds to an integer
    constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 split so that n * kLn2Hi is exact for |n| < 2^9
    constexpr float kLn2Lo = 1.428606765330187e-06f;
    if (!(x == x)) {
        return x;  // NaN
    }
    if (x > kMaxArg) {
        return from_bits(0x7f800000u);  // +inf
    }
    if (x < kMinArg) {
        return 0.0f;
    }
    const float n = sub(fma(x, kLog2e, kRoundShift), kRoundShift);
    float r = fma(n, -kLn2Hi, x);
    r = fma(n, -kLn2Lo, r);
    float p = 1.9875691500e-4f;
    p = fma(p, r, 1.3981999507e-3f);
    p = fma(p, r, 8.3334519073e-3f);
    p = fma(p, r, 4.1665795894e-2f);
    p = fma(p, r, 1.6666665459e-1f);
    p = fma(p, r, 5.0000001201e-1f);
    const float r2 = mul(r, r);
    const float er = add(fma(p, r2, r), 1.0f);
    // 2^n as two factors 2^a * 2^b with a = n / 2: each stays a normal float for n in [-150, 128].
    const int32_t ni = static_cast<int32_t>(n);
    const int32_t a = ni / 2;
    const int32_t b = ni - a;
    const float scale_a = from_bits(static_cast<uint32_t>(a + 127) << 23);
    const float scale_b = from_bits(static_cast<uint32_t>(b + 127) << 23);
    return mul(mul(er, scale_a), scale_b);
}

}  // namespace mok::fp32
