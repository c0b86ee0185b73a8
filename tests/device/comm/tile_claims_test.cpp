// The claim word of the copy teams (tile_claims.hpp), played out on the host: under any interleaving of the teams'
// claims every tile is taken exactly once and in increasing order, each team claims past the last tile exactly once,
// and the pass's last claim clears the word, so that the pass can run again; a word left by another pass, or by a run
// that failed halfway, counts as no claims.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "device/comm/tile_claims.hpp"

namespace mok::comm {
namespace {

// One pass of `num_teams` teams over `num_tiles` tiles: a random team claims next until every team has claimed past
// the last tile, as the device's teams do, each claim a compare-and-swap against the word as the team last read it.
// A team whose read is stale (another team claimed since) retries with what the swap returned.
::testing::AssertionResult plays_out(uint64_t& word, uint64_t tag, int64_t num_tiles, int64_t num_teams,
                                     std::mt19937_64& rng) {
    std::vector<int> taken(static_cast<size_t>(num_tiles), 0);
    std::vector<uint64_t> last_read(static_cast<size_t>(num_teams), word);
    std::vector<bool> finished(static_cast<size_t>(num_teams), false);
    int64_t unfinished = num_teams;
    int64_t last_tile = -1;
    while (unfinished > 0) {
        const auto team = static_cast<size_t>(std::uniform_int_distribution<int64_t>(0, num_teams - 1)(rng));
        if (finished[team]) {
            continue;
        }
        const ClaimStep step = next_claim(last_read[team], tag);
        if (word != last_read[team]) {
            last_read[team] = word;  // the swap failed and returned the word: the team tries again with it
            continue;
        }
        word = step.desired;
        if (is_last_claim(step.tile, num_tiles, num_teams)) {
            word = kClearedClaimWord;
        }
        for (uint64_t& read : last_read) {
            // Other teams read the word at random times: some stay stale.
            if (std::uniform_int_distribution<int>(0, 1)(rng) == 0) {
                read = word;
            }
        }
        last_read[team] = word;
        if (static_cast<int64_t>(step.tile) >= num_tiles) {
            finished[team] = true;
            --unfinished;
            continue;
        }
        if (static_cast<int64_t>(step.tile) <= last_tile) {
            return ::testing::AssertionFailure() << "tile " << step.tile << " claimed after tile " << last_tile;
        }
        last_tile = static_cast<int64_t>(step.tile);
        ++taken[step.tile];
    }
    for (int64_t tile = 0; tile < num_tiles; ++tile) {
        if (taken[static_cast<size_t>(tile)] != 1) {
            return ::testing::AssertionFailure()
                   << "tile " << tile << " taken " << taken[static_cast<size_t>(tile)] << " times";
        }
    }
    if (word != kClearedClaimWord) {
        return ::testing::AssertionFailure() << "the pass left the word at " << word;
    }
    return ::testing::AssertionSuccess();
}

TEST(TileClaims, EveryTileOnceInOrderAndThePassRepeats) {
    std::mt19937_64 rng(11);
    uint64_t word = kClearedClaimWord;
    for (int trial = 0; trial < 300; ++trial) {
        const int64_t num_tiles = std::uniform_int_distribution<int64_t>(0, 300)(rng);
        const int64_t num_teams = std::uniform_int_distribution<int64_t>(1, 40)(rng);
        // A new pass every few trials; the others repeat the previous pass within its step.
        const uint64_t tag = 3 + static_cast<uint64_t>(trial / 3);
        ASSERT_TRUE(plays_out(word, tag, num_tiles, num_teams, rng))
            << num_tiles << " tiles, " << num_teams << " teams, trial " << trial;
    }
}

TEST(TileClaims, WordsOfOtherPassesCountAsNoClaims) {
    std::mt19937_64 rng(12);
    constexpr uint64_t kTag = 41;
    // Another pass's claims, a run of this pass's predecessor that failed halfway, and a tag that differs from this
    // pass's only above the 32 bits the word keeps (the same pass, to the word).
    const uint64_t other_pass = ((kTag - 1) << kClaimCountBits) | 7;
    const uint64_t wrapped_tag = kTag + (uint64_t{1} << kClaimCountBits);
    uint64_t word = other_pass;
    EXPECT_EQ(next_claim(word, kTag).tile, 0u);
    ASSERT_TRUE(plays_out(word, kTag, 50, 4, rng));
    word = other_pass;
    ASSERT_TRUE(plays_out(word, wrapped_tag, 50, 4, rng));
    // A word this pass's own tag left with claims would skip tiles: only a failed run leaves one, and a failed step
    // runs no pass again before its next step, whose passes have new tags.
    EXPECT_EQ(next_claim((kTag << kClaimCountBits) | 5, kTag).tile, 5u);
}

TEST(TileClaims, LastClaimIsTheOnePastEveryTeam) {
    EXPECT_TRUE(is_last_claim(0, 0, 1));
    EXPECT_FALSE(is_last_claim(0, 1, 1));
    EXPECT_TRUE(is_last_claim(1, 1, 1));
    EXPECT_TRUE(is_last_claim(19, 4, 16));
    EXPECT_FALSE(is_last_claim(18, 4, 16));
}

}  // namespace
}  // namespace mok::comm
