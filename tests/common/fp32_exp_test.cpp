// fp32::exp, the one exp both the CPU and the GPU use (src/common/fp32_ops.hpp), against the C library's
// double-precision exp. Its promise: within 2 ulp of e^x everywhere, +inf above the overflow threshold, 0 below
// the underflow threshold, NaN for NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "common/fp32_ops.hpp"

namespace mok {
namespace {

constexpr double kMaxUlpError = 2.0;  // the promise of fp32::exp
constexpr double kFp32SubnormalSpacing = 0x1.0p-149;
constexpr double kFp32MinNormal = 0x1.0p-126;
constexpr double kFp32MaxSpacing = 0x1.0p104;  // ulp of the largest binade [2^127, 2^128)
constexpr double kFp32Overflow = 0x1.0p128;    // +inf counts as this value, one ulp past FLT_MAX

// Below -ln(2^-150) every result rounds to 0; above ln(FLT_MAX) to +inf (the sweep runs past both).
constexpr float kSweepLowest = -105.0f;
constexpr float kSweepHighest = 90.0f;

double fp32_ulp(double magnitude) {
    if (magnitude < kFp32MinNormal) {
        return kFp32SubnormalSpacing;
    }
    int binade = 0;
    std::frexp(magnitude, &binade);  // magnitude = m 2^binade, m in [0.5, 1)
    return std::min(std::ldexp(1.0, binade - 1 - 23), kFp32MaxSpacing);
}

// |fp32::exp(x) - e^x| in units of the fp32 spacing at e^x. The double exp is accurate to about 2^-53
// relative, far below the 2^-24 resolution measured here. Past 2^128 the exact value counts as 2^128, where
// the only right answer, +inf, also stands.
double ulp_error(float x) {
    const float got = fp32::exp(x);
    const double exact = std::min(std::exp(static_cast<double>(x)), kFp32Overflow);
    const double got_value = std::isinf(got) ? kFp32Overflow : static_cast<double>(got);
    return std::abs(got_value - exact) / fp32_ulp(exact);
}

float float_of_bits(uint32_t bits) {
    return fp32::from_bits(bits);
}

// Checks every `stride`-th fp32 value of [lo, hi] (same sign), by bit pattern, and returns the worst error.
double worst_error_over_bits(float lo, float hi, uint32_t stride, float* worst_x) {
    uint32_t first = fp32::bits_of(lo);
    uint32_t last = fp32::bits_of(hi);
    if (first > last) {
        std::swap(first, last);
    }
    double worst = 0.0;
    for (uint64_t bits = first; bits <= last; bits += stride) {
        const float x = float_of_bits(static_cast<uint32_t>(bits));
        const double error = ulp_error(x);
        if (!(error <= worst)) {
            worst = error;
            *worst_x = x;
        }
    }
    return worst;
}

// Every 61st fp32 value of the whole range in which e^x is neither 0 nor +inf, by bit pattern: dense near
// zero (where exp is 1 + x) and across every binade of x.
TEST(Fp32Exp, WithinTwoUlpOverBitPatternSweep) {
    constexpr uint32_t kStride = 61;
    float worst_x = 0.0f;
    const double negative = worst_error_over_bits(-0.0f, kSweepLowest, kStride, &worst_x);
    EXPECT_LE(negative, kMaxUlpError) << "at x = " << worst_x;
    const double positive = worst_error_over_bits(0.0f, kSweepHighest, kStride, &worst_x);
    EXPECT_LE(positive, kMaxUlpError) << "at x = " << worst_x;
}

// Evenly spaced x over the whole range: every reduction interval n (x = n ln2 + r) many times over.
TEST(Fp32Exp, WithinTwoUlpOverValueSweep) {
    constexpr int kPoints = 1 << 22;
    double worst = 0.0;
    float worst_x = 0.0f;
    for (int i = 0; i <= kPoints; ++i) {
        const float x = kSweepLowest + (kSweepHighest - kSweepLowest) * static_cast<float>(i) / kPoints;
        const double error = ulp_error(x);
        if (!(error <= worst)) {
            worst = error;
            worst_x = x;
        }
    }
    EXPECT_LE(worst, kMaxUlpError) << "at x = " << worst_x;
}

// Every fp32 value near the thresholds: overflow (ln FLT_MAX), the normal/subnormal boundary of the result
// (ln 2^-126) and underflow to zero (ln 2^-150), where the final scaling by 2^n is most delicate.
TEST(Fp32Exp, WithinTwoUlpAtThresholds) {
    constexpr uint32_t kNeighbours = 1 << 16;
    const double thresholds[] = {std::log(static_cast<double>(std::numeric_limits<float>::max())),
                                 std::log(kFp32MinNormal), std::log(0x1.0p-150)};
    for (const double threshold : thresholds) {
        const uint32_t centre = fp32::bits_of(static_cast<float>(threshold));
        float worst_x = 0.0f;
        const double worst = worst_error_over_bits(float_of_bits(centre - kNeighbours),
                                                   float_of_bits(centre + kNeighbours), 1, &worst_x);
        EXPECT_LE(worst, kMaxUlpError) << "near x = " << threshold << ", worst at x = " << worst_x;
    }
}

// exp scales by 2^n in one multiplication where 2^n is a normal float and in two elsewhere (exp_general); both
// round once, so they must give the same bits wherever the first applies. Every 61st fp32 value of the whole
// range (both signs, NaN patterns included), and every value near the ends of the one-factor range, n = -126 and
// n = 127, where it hands over.
TEST(Fp32Exp, OneFactorScalingHasTheTwoFactorBits) {
    constexpr uint32_t kStride = 61;
    constexpr uint32_t kNeighbours = 1 << 16;
    auto same_bits = [](float x) {
        const float got = fp32::exp(x);
        const float general = fp32::exp_detail::exp_general(x);
        return fp32::bits_of(got) == fp32::bits_of(general) || (std::isnan(got) && std::isnan(general));
    };
    for (uint64_t bits = 0; bits <= 0xffffffffull; bits += kStride) {
        const float x = float_of_bits(static_cast<uint32_t>(bits));
        ASSERT_TRUE(same_bits(x)) << "at x = " << x << " (bits " << bits << ")";
    }
    for (const double n : {-126.5, 127.5}) {
        const uint32_t centre = fp32::bits_of(static_cast<float>(n * std::log(2.0)));
        for (uint32_t bits = centre - kNeighbours; bits <= centre + kNeighbours; ++bits) {
            const float x = float_of_bits(bits);
            ASSERT_TRUE(same_bits(x)) << "at x = " << x;
        }
    }
}

TEST(Fp32Exp, SpecialValues) {
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(fp32::bits_of(fp32::exp(0.0f)), fp32::bits_of(1.0f));
    EXPECT_EQ(fp32::bits_of(fp32::exp(-0.0f)), fp32::bits_of(1.0f));
    EXPECT_EQ(fp32::exp(inf), inf);
    EXPECT_EQ(fp32::bits_of(fp32::exp(-inf)), fp32::bits_of(0.0f));
    EXPECT_TRUE(std::isnan(fp32::exp(std::numeric_limits<float>::quiet_NaN())));
    EXPECT_TRUE(std::isnan(fp32::exp(-std::numeric_limits<float>::quiet_NaN())));
    EXPECT_EQ(fp32::exp(89.0f), inf);
    EXPECT_EQ(fp32::exp(std::numeric_limits<float>::max()), inf);
    EXPECT_EQ(fp32::bits_of(fp32::exp(-110.0f)), fp32::bits_of(0.0f));
    EXPECT_EQ(fp32::bits_of(fp32::exp(-std::numeric_limits<float>::max())), fp32::bits_of(0.0f));
    // Finite just below the overflow threshold, positive just above the underflow threshold.
    EXPECT_TRUE(std::isfinite(fp32::exp(88.7f)));
    EXPECT_GT(fp32::exp(-103.0f), 0.0f);
}

}  // namespace
}  // namespace mok
