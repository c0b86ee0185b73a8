// The claim word from which a copy role's teams take their tiles (row_copy.cuh, TileQueue): plain integer arithmetic,
// shared by host and device, so that the host tests can play out any interleaving of the teams' claims.
//
// The word: the pass's tag (its sequence number, modulo 2^32) in the high 32 bits, the claims made in the low 32. A
// word with another tag -- another pass's, or one whose run failed before every team had claimed past the end --
// counts as no claims, so no kernel has to clear it before a pass. Each of a pass's teams claims exactly once past
// the last tile; the one that makes the pass's last claim clears the word, so that the same pass may run again in its
// step (a benchmark repeats one).
#pragma once

#include <cstdint>

#include "common/host_device.hpp"

namespace mok::comm {

inline constexpr uint32_t kClaimCountBits = 32;
inline constexpr uint64_t kClaimCountMask = (uint64_t{1} << kClaimCountBits) - 1;
// What the pass's last claim leaves: a word no pass's tag matches with claims, and the one a fresh block starts with.
inline constexpr uint64_t kClearedClaimWord = 0;

// One claim against a word that read `seen`: the tile it takes and the word that records it.
struct ClaimStep {
    uint64_t tile;     // num_tiles or more: no tile left
    uint64_t desired;  // the word after the claim (what a compare-and-swap of `seen` stores)
};

MOK_HOST_DEVICE inline ClaimStep next_claim(uint64_t seen, uint64_t tag) {
    const uint64_t tag_bits = (tag & kClaimCountMask) << kClaimCountBits;
    const uint64_t claims = (seen & ~kClaimCountMask) == tag_bits ? seen & kClaimCountMask : 0;
    return {claims, tag_bits | (claims + 1)};
}

// True for the pass's last claim: every team has claimed past the last tile once.
MOK_HOST_DEVICE inline bool is_last_claim(uint64_t tile, int64_t num_tiles, int64_t num_teams) {
    return static_cast<int64_t>(tile) + 1 == num_tiles + num_teams;
}

}  // namespace mok::comm
