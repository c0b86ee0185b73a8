// round_to_bf16_bits (src/common/bf16.hpp) against a model of IEEE round-to-nearest-even written differently:
// pick the nearer of the two bf16 neighbours by exact double arithmetic, the even one on a tie, with +-inf
// standing for +-2^128 (so values at or past the midpoint between the largest bf16 and 2^128 overflow).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "common/bf16.hpp"

namespace mok {
namespace {

constexpr uint32_t kSignBit = 0x80000000u;
constexpr uint32_t kBf16LowBits = 0xffffu;  // the fp32 bits a bf16 drops
constexpr double kFp32Overflow = 0x1.0p128;

double value_of_bf16(uint16_t bits) {
    const float v = bf16_bits_to_float(bits);
    return std::isinf(v) ? std::copysign(kFp32Overflow, v) : static_cast<double>(v);
}

// The expected bf16 of a finite or infinite (not NaN) fp32 value.
uint16_t model_round(float v) {
    const uint32_t bits = fp32::bits_of(v);
    const auto toward_zero = static_cast<uint16_t>(bits >> 16);
    if ((bits & kBf16LowBits) == 0) {
        return toward_zero;
    }
    const auto away = static_cast<uint16_t>(toward_zero + 1);  // the next bf16 away from zero (inf past the max)
    const double below = std::abs(static_cast<double>(v) - value_of_bf16(toward_zero));
    const double above = std::abs(value_of_bf16(away) - static_cast<double>(v));
    if (below != above) {
        return below < above ? toward_zero : away;
    }
    return (toward_zero & 1u) == 0 ? toward_zero : away;
}

bool is_bf16_nan(uint16_t b) {
    return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0;
}

void expect_matches_model(uint32_t bits) {
    const float v = fp32::from_bits(bits);
    const uint16_t got = round_to_bf16_bits(v);
    if (std::isnan(v)) {
        EXPECT_TRUE(is_bf16_nan(got)) << std::hex << "fp32 0x" << bits << " -> 0x" << got;
        EXPECT_EQ(got & 0x8000u, (bits & kSignBit) >> 16) << std::hex << "sign of NaN 0x" << bits;
        return;
    }
    EXPECT_EQ(got, model_round(v)) << std::hex << "fp32 0x" << bits;
}

// Every low half under the high halves where rounding is special: zero and the subnormals, the smallest
// normals, one, the largest finite values (rounding to inf), and inf/NaN; both signs.
TEST(Bf16, EveryLowHalfOfSpecialBinades) {
    const uint32_t high_halves[] = {0x0000u, 0x007fu, 0x0080u, 0x3f80u, 0x3fffu, 0x7f7eu, 0x7f7fu, 0x7f80u, 0x7fffu};
    for (const uint32_t high : high_halves) {
        for (const uint32_t sign : {0u, kSignBit}) {
            for (uint32_t low = 0; low <= kBf16LowBits; ++low) {
                expect_matches_model(sign | (high << 16) | low);
            }
        }
    }
}

// A stride through all 2^32 bit patterns; the stride is odd (a prime), so the dropped low bits take every
// residue along the way.
TEST(Bf16, StridedSweepOfAllBitPatterns) {
    constexpr uint64_t kStride = 4093;
    for (uint64_t bits = 0; bits <= 0xffffffffull; bits += kStride) {
        expect_matches_model(static_cast<uint32_t>(bits));
    }
}

TEST(Bf16, NamedCases) {
    // Ties go to even.
    EXPECT_EQ(round_to_bf16_bits(fp32::from_bits(0x3f808000u)), 0x3f80u);  // 1 + 2^-8 -> 1
    EXPECT_EQ(round_to_bf16_bits(fp32::from_bits(0x3f818000u)), 0x3f82u);  // 1 + 3 2^-8 -> 1 + 2^-6
    EXPECT_EQ(round_to_bf16_bits(fp32::from_bits(0x3f808001u)), 0x3f81u);  // just above the tie rounds up
    EXPECT_EQ(round_to_bf16_bits(fp32::from_bits(0x3f807fffu)), 0x3f80u);  // just below rounds down
    // The largest finite fp32 is past the midpoint to 2^128: it rounds to inf, as does the tie above 0x7f7f.
    EXPECT_EQ(round_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80u);
    EXPECT_EQ(round_to_bf16_bits(-std::numeric_limits<float>::max()), 0xff80u);
    EXPECT_EQ(round_to_bf16_bits(fp32::from_bits(0x7f7f8000u)), 0x7f80u);
    EXPECT_EQ(round_to_bf16_bits(fp32::from_bits(0x7f7f7fffu)), 0x7f7fu);
    // Infinities and zeros keep their sign.
    EXPECT_EQ(round_to_bf16_bits(std::numeric_limits<float>::infinity()), 0x7f80u);
    EXPECT_EQ(round_to_bf16_bits(-std::numeric_limits<float>::infinity()), 0xff80u);
    EXPECT_EQ(round_to_bf16_bits(0.0f), 0x0000u);
    EXPECT_EQ(round_to_bf16_bits(-0.0f), 0x8000u);
    // Subnormals: the tie at half the smallest bf16 subnormal goes to zero (even), the next tie up.
    EXPECT_EQ(round_to_bf16_bits(fp32::from_bits(0x00008000u)), 0x0000u);
    EXPECT_EQ(round_to_bf16_bits(fp32::from_bits(0x00018000u)), 0x0002u);
    EXPECT_EQ(round_to_bf16_bits(fp32::from_bits(0x00008001u)), 0x0001u);
    EXPECT_EQ(round_to_bf16_bits(fp32::from_bits(0x007fffffu)), 0x0080u);  // largest subnormal -> smallest normal
    // A signalling NaN whose payload lies in the dropped bits must not become inf.
    EXPECT_TRUE(is_bf16_nan(round_to_bf16_bits(fp32::from_bits(0x7f800001u))));
    EXPECT_TRUE(is_bf16_nan(round_to_bf16_bits(fp32::from_bits(0xff800001u))));
    EXPECT_TRUE(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
}

TEST(Bf16, StorageRoundTrip) {
    for (uint32_t b = 0; b <= 0xffffu; ++b) {
        const Bf16 value{static_cast<uint16_t>(b)};
        if (is_bf16_nan(value.bits)) {
            EXPECT_TRUE(std::isnan(value.to_float()));
            continue;
        }
        EXPECT_EQ(Bf16::from_float(value.to_float()), value) << std::hex << "bf16 0x" << b;
        EXPECT_EQ(round_to_bf16(value.to_float()), value.to_float());
    }
}

}  // namespace
}  // namespace mok
