// The dispatch's token groups (token_groups.hpp), played out on the host: for tokens of every top_k up to two slot
// batches and beyond, with any number of their slots on the rank, every row of a token lands in exactly one group, a
// group holds at most kMaxRowFanout rows in row order with its leader first, and the groups are the token's rows taken
// kMaxRowFanout at a time, so that a token with n rows here is loaded ceil(n / kMaxRowFanout) times.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "device/comm/token_groups.hpp"

namespace mok::comm {
namespace {

// One token's k entries: `rows_here` of its slots, chosen at random, hold distinct random rows; the others -1.
std::vector<int32_t> random_token(int32_t top_k, int32_t rows_here, std::mt19937_64& rng) {
    std::vector<int32_t> slots(static_cast<size_t>(top_k), -1);
    std::vector<int32_t> order(static_cast<size_t>(top_k));
    for (int32_t j = 0; j < top_k; ++j) {
        order[static_cast<size_t>(j)] = j;
    }
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int32_t> rows;
    std::uniform_int_distribution<int32_t> row(0, 4095);
    while (static_cast<int32_t>(rows.size()) < rows_here) {
        const int32_t r = row(rng);
        if (std::find(rows.begin(), rows.end(), r) == rows.end()) {
            rows.push_back(r);
        }
    }
    for (int32_t i = 0; i < rows_here; ++i) {
        slots[static_cast<size_t>(order[static_cast<size_t>(i)])] = rows[static_cast<size_t>(i)];
    }
    return slots;
}

::testing::AssertionResult groups_cover_once(const std::vector<int32_t>& slots) {
    const auto top_k = static_cast<int32_t>(slots.size());
    std::vector<int32_t> rows;
    for (const int32_t r : slots) {
        if (r >= 0) {
            rows.push_back(r);
        }
    }
    std::sort(rows.begin(), rows.end());
    std::vector<int> landed(rows.size(), 0);
    int64_t leaders = 0;
    for (size_t p = 0; p < rows.size(); ++p) {
        const TokenGroup g = token_group(rows[p], slots.data(), top_k);
        if (g.leader != (p % kMaxRowFanout == 0)) {
            return ::testing::AssertionFailure()
                   << "row " << rows[p] << " at position " << p << " has leader " << g.leader;
        }
        if (!g.leader) {
            continue;
        }
        ++leaders;
        ++landed[p];
        int32_t previous = rows[p];
        for (uint32_t i = 0; i < kMaxRowFanout - 1; ++i) {
            const size_t want = p + 1 + i;
            const int32_t expected = want < rows.size() ? rows[want] : -1;
            if (g.next[i] != expected) {
                return ::testing::AssertionFailure() << "leader " << rows[p] << " lists " << g.next[i] << " as member "
                                                     << i + 1 << ", expected " << expected;
            }
            if (expected >= 0) {
                if (expected <= previous) {
                    return ::testing::AssertionFailure() << "group of " << rows[p] << " is not in row order";
                }
                previous = expected;
                ++landed[want];
            }
        }
    }
    for (size_t p = 0; p < rows.size(); ++p) {
        if (landed[p] != 1) {
            return ::testing::AssertionFailure() << "row " << rows[p] << " lands " << landed[p] << " times";
        }
    }
    const auto expected_leaders = static_cast<int64_t>((rows.size() + kMaxRowFanout - 1) / kMaxRowFanout);
    if (leaders != expected_leaders) {
        return ::testing::AssertionFailure() << leaders << " loads for " << rows.size() << " rows";
    }
    return ::testing::AssertionSuccess();
}

TEST(TokenGroups, EveryRowLandsOnceInGroupsOfConsecutiveRows) {
    std::mt19937_64 rng(20261201);
    for (const int32_t top_k : {1, 2, 4, 5, 8, 9, 10, 16, 17, 23}) {
        for (int32_t rows_here = 0; rows_here <= top_k; ++rows_here) {
            for (int rep = 0; rep < 20; ++rep) {
                const std::vector<int32_t> slots = random_token(top_k, rows_here, rng);
                ASSERT_TRUE(groups_cover_once(slots)) << "top_k " << top_k << ", rows here " << rows_here;
            }
        }
    }
}

}  // namespace
}  // namespace mok::comm
