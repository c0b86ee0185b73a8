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

namespace exp_detail {

inline constexpr float kLog2e = 1.44269502162933349609f;
inline constexpr float kRoundShift = 12582912.0f;    // 1.5 * 2^23: adding it rounds to an integer
inline constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 split so that n * kLn2Hi is exact for |n| < 2^9
inline constexpr float kLn2Lo = 1.428606765330187e-06f;

// e^r for the reduced argument r = x - n ln 2, |r| <= ln2/2: a degree-6 minimax polynomial (Cephes' expf
// coefficients) as 1 + r + r^2 p(r).
MOK_HOST_DEVICE MOK_INLINE float exp_reduced(float x, float n) {
    float r = fma(n, -kLn2Hi, x);
    r = fma(n, -kLn2Lo, r);
    float p = 1.9875691500e-4f;
    p = fma(p, r, 1.3981999507e-3f);
    p = fma(p, r, 8.3334519073e-3f);
    p = fma(p, r, 4.1665795894e-2f);
    p = fma(p, r, 1.6666665459e-1f);
    p = fma(p, r, 5.0000001201e-1f);
    const float r2 = mul(r, r);
    return add(fma(p, r2, r), 1.0f);
}

// The general path of exp: NaN, the overflow and underflow thresholds, and a scaling by 2^n in two power-of-two
// factors 2^a * 2^b with a = n / 2, each a normal float for n in [-150, 128], so that neither overflows early and
// the product rounds once.
MOK_HOST_DEVICE MOK_INLINE float exp_general(float x) {
    constexpr float kMaxArg = 88.72283935546875f;    // above: e^x overflows fp32
    constexpr float kMinArg = -103.97208404541016f;  // below: e^x underflows to 0
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
    const float er = exp_reduced(x, n);
    const int32_t ni = static_cast<int32_t>(n);
    const int32_t a = ni / 2;
    const int32_t b = ni - a;
    const float scale_a = from_bits(static_cast<uint32_t>(a + 127) << 23);
    const float scale_b = from_bits(static_cast<uint32_t>(b + 127) << 23);
    return mul(mul(er, scale_a), scale_b);
}

}  // namespace exp_detail

// exp's one-factor path: e^x where 2^n is a normal float, and whether it is (`in_range`). Where it is not, `value`
// is meaningless and exp_general gives e^x. No branch: a caller with several arguments computes them all, then
// takes the general path for those out of range, so that the arithmetic of its arguments interleaves.
struct ExpInRange {
    float value;
    bool in_range;
};

MOK_HOST_DEVICE MOK_INLINE ExpInRange exp_in_normal_range(float x) {
    using namespace exp_detail;
    constexpr int32_t kMinNormalExponent = -126;
    constexpr int32_t kExponentBias = 127;
    constexpr uint32_t kNormalExponents = 254;  // n in [-126, 127]
    constexpr int kMantissaBits = 23;
    const float t = fma(x, kLog2e, kRoundShift);
    // t = 1.5 * 2^23 + n exactly while |n| < 2^22, so the bit patterns differ by n; for larger |x| the difference
    // is far outside [-126, 127] and the general path takes x. So does NaN, with no test of its own: t is then a
    // NaN, whose bits (exponent all ones, either sign) differ from the shift's by at least 2^29 in magnitude.
    const auto ni = static_cast<int32_t>(bits_of(t) - bits_of(kRoundShift));
    const float er = exp_reduced(x, sub(t, kRoundShift));
    return {mul(er, from_bits(static_cast<uint32_t>(ni + kExponentBias) << kMantissaBits)),
            static_cast<uint32_t>(ni - kMinNormalExponent) < kNormalExponents};
}

// e^x to within 2 ulp over the whole fp32 range, from the operations above only, so that the CPU and the GPU
// agree bit for bit (the CUDA and C library expf differ in their last bits). Cody-Waite reduction
// x = n ln2 + r with |r| <= ln2/2, a polynomial for e^r (exp_reduced), then an exact scaling by 2^n.
//
// Where 2^n is a normal float (n in [-126, 127], x in about [-87.7, 88.4]: every argument the SwiGLU sees in
// practice) the scaling is one multiplication by 2^n, built from n's bits, which the rounding shift leaves in t's
// low mantissa bits; elsewhere, and for NaN, exp_general's two factors. Both round e^r 2^n once, so they give the
// same bits wherever both apply (tests/common/fp32_exp_test.cpp compares them); the one-factor path saves the
// SwiGLU epilogues about ten instructions per element, which the backward's epilogue is bound by (docs/gemm.md).
MOK_HOST_DEVICE MOK_INLINE float exp(float x) {
    const ExpInRange e = exp_in_normal_range(x);
    return e.in_range ? e.value : exp_detail::exp_general(x);
}

}  // namespace mok::fp32
