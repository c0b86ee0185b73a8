// swiglu::forward and swiglu::backward (src/common/swiglu.hpp) against the same math in double, with error
// bounds derived from the operation sequence (u = 2^-24, the unit roundoff of fp32):
//   sigmoid s = 1 / (1 + e^-g): the exp's 2 ulp (<= 2^-22 = 4u relative) plus two roundings: 6u.
//   h = (g s) u and du = dh (g s): two more roundings each: 8u relative.
//   dsilu = s (1 + g (1 - s)): the subtraction can cancel, so the error is absolute; following each
//   rounding gives |err| <= 16 u s (1 + |g|), and dg = (dh u) dsilu adds 2u relative.
// Each bound is doubled to cover second-order terms (products of errors, each below 2^-19).
// Where a result or an intermediate is an fp32 subnormal, its rounding error is absolute, up to half the
// spacing 2^-149, carried through the later factors: kSubnormalFloor covers it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "common/bf16.hpp"
#include "common/swiglu.hpp"
#include "common/test_seed.hpp"

namespace mok {
namespace {

constexpr double kUnitRoundoff = 0x1.0p-24;
constexpr double kSecondOrderSlack = 2.0;
constexpr double kProductBound = kSecondOrderSlack * 8.0 * kUnitRoundoff;     // h and du, relative
constexpr double kDsiluBound = kSecondOrderSlack * 16.0 * kUnitRoundoff;      // dsilu, in units of s (1 + |g|)
constexpr double kDgRoundingBound = kSecondOrderSlack * 2.0 * kUnitRoundoff;  // dh u, then times dsilu
constexpr double kFp32SubnormalSpacing = 0x1.0p-149;
// Pre-activations whose sigmoid stays a normal fp32 (e^-80 > 2^-126), so relative bounds hold.
constexpr float kNormalRange = 80.0f;

struct Exact {
    double h;
    double dg;
    double du;
    double s;
};

Exact exact_swiglu(float g, float u, float dh) {
    const double gd = g;
    const double s = 1.0 / (1.0 + std::exp(-gd));
    const double silu = gd * s;
    const double dsilu = s * (1.0 + gd * (1.0 - s));
    return {silu * u, static_cast<double>(dh) * u * dsilu, static_cast<double>(dh) * silu, s};
}

void expect_within_bounds(float g, float u, float dh) {
    const Exact exact = exact_swiglu(g, u, dh);
    const float h = swiglu::forward(g, u);
    const swiglu::Grads grads = swiglu::backward(g, u, dh);
    const double dh_u = std::abs(static_cast<double>(dh) * u);
    // Two roundings (the product and the one before it), each carried through at most the later factors.
    const double subnormal_floor =
        kSecondOrderSlack * kFp32SubnormalSpacing * (1.0 + std::abs(u) + std::abs(dh) + dh_u);
    const double dg_bound =
        dh_u * kDsiluBound * exact.s * (1.0 + std::abs(g)) + kDgRoundingBound * std::abs(exact.dg) + subnormal_floor;
    EXPECT_LE(std::abs(h - exact.h), kProductBound * std::abs(exact.h) + subnormal_floor)
        << "h at g " << g << ", u " << u;
    EXPECT_LE(std::abs(grads.du - exact.du), kProductBound * std::abs(exact.du) + subnormal_floor)
        << "du at g " << g << ", dh " << dh;
    EXPECT_LE(std::abs(grads.dg - exact.dg), dg_bound) << "dg at g " << g << ", u " << u << ", dh " << dh;
}

// Random fp32 operands of both signs over several binades.
TEST(Swiglu, RandomOperandsWithinBounds) {
    const uint64_t seed = testing::case_seed(0);
    SCOPED_TRACE(testing::replay_hint());
    std::mt19937_64 engine(seed);
    std::uniform_real_distribution<float> pre_activation(-kNormalRange / 2, kNormalRange / 2);
    std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
    std::uniform_int_distribution<int> binade(-8, 8);
    constexpr int kSamples = 1 << 16;
    for (int i = 0; i < kSamples; ++i) {
        const float g = pre_activation(engine);
        const float u = std::ldexp(mantissa(engine), binade(engine));
        const float dh = std::ldexp(mantissa(engine), binade(engine));
        expect_within_bounds(g, u, dh);
    }
}

// Every bf16 g in the normal range -- the pre-activations the GEMM stores -- including the zero of dsilu
// near g = -1.28, where dg cancels.
TEST(Swiglu, EveryBf16PreActivationWithinBounds) {
    const uint64_t seed = testing::case_seed(1);
    SCOPED_TRACE(testing::replay_hint());
    std::mt19937_64 engine(seed);
    std::uniform_real_distribution<float> operand(0.25f, 4.0f);
    for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
        const float g = bf16_bits_to_float(static_cast<uint16_t>(bits));
        if (!(std::abs(g) <= kNormalRange)) {
            continue;
        }
        expect_within_bounds(g, operand(engine), -operand(engine));
    }
}

// Any finite g, however large, gives no NaN: e^-g overflows to inf or underflows to 0 and the formulas
// still give silu -> 0 or g, dsilu -> 0 or 1.
TEST(Swiglu, NoNanForAnyFiniteBf16PreActivation) {
    for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
        const float g = bf16_bits_to_float(static_cast<uint16_t>(bits));
        if (!std::isfinite(g)) {
            continue;
        }
        const float h = swiglu::forward(g, 1.0f);
        const swiglu::Grads grads = swiglu::backward(g, 1.0f, 1.0f);
        EXPECT_FALSE(std::isnan(h)) << "g " << g;
        EXPECT_FALSE(std::isnan(grads.dg)) << "g " << g;
        EXPECT_FALSE(std::isnan(grads.du)) << "g " << g;
    }
    const float large = 1.0e30f;
    EXPECT_EQ(swiglu::backward(large, 1.0f, 1.0f).dg, 1.0f);   // dsilu -> 1
    EXPECT_EQ(swiglu::backward(-large, 1.0f, 1.0f).dg, 0.0f);  // dsilu -> 0
    EXPECT_EQ(swiglu::forward(large, 1.0f), large);            // silu -> g
    EXPECT_EQ(swiglu::forward(-large, 1.0f), 0.0f);            // silu -> 0
}

}  // namespace
}  // namespace mok
