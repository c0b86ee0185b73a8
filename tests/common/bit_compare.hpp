// Bitwise comparison of results for the determinism tests: identical bits, not merely equal values (+0 and
// -0 differ, and a NaN equals only the same NaN).
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <span>
#include <string>

namespace mok::testing {

// Success when `got` and `want` have the same size and every element the same bits; otherwise names the
// first differing element of `what`.
inline ::testing::AssertionResult same_bits(const std::string& what, std::span<const double> got,
                                            std::span<const double> want) {
    if (got.size() != want.size()) {
        return ::testing::AssertionFailure() << what << ": " << got.size() << " elements, expected " << want.size();
    }
    for (size_t i = 0; i < got.size(); ++i) {
        if (std::bit_cast<uint64_t>(got[i]) != std::bit_cast<uint64_t>(want[i])) {
            return ::testing::AssertionFailure()
                   << what << "[" << i << "] = " << got[i] << ", expected " << want[i] << " (bits differ)";
        }
    }
    return ::testing::AssertionSuccess();
}

}  // namespace mok::testing
