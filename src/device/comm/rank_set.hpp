// One launch drives one or more ranks: a single rank per GPU with real ranks, all R ranks with virtual ranks.
//
// The launch's blocks are cut into equal consecutive slices, one per rank; slice r runs with ranks[r]'s
// parameters. Every standalone transport kernel takes its parameters this way, so the same kernel serves both
// peer providers (device/comm/peers.hpp).
#pragma once

#include <cstdint>

namespace mok::comm {

// Most ranks one launch drives: virtual ranks exist to test EP 2, 4 and 8 on one GPU.
inline constexpr int32_t kMaxLaunchRanks = 8;

template <typename Params>
struct RankSet {
    Params ranks[kMaxLaunchRanks];
    int32_t num_ranks = 0;
    int32_t blocks_per_rank = 0;  // the launch has num_ranks * blocks_per_rank blocks
};

#if defined(__CUDACC__)
// This block's rank slot and its index inside the rank's slice.
struct BlockSlice {
    int32_t rank_slot;
    int32_t block_idx;
    int32_t num_blocks;
};

template <typename Params>
__device__ __forceinline__ BlockSlice block_slice(const RankSet<Params>& set) {
    const int32_t block = static_cast<int32_t>(blockIdx.x);
    return {block / set.blocks_per_rank, block % set.blocks_per_rank, set.blocks_per_rank};
}
#endif

}  // namespace mok::comm
