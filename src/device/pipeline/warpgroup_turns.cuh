// The order of the ping-pong arrangement's K loops: the consumer warpgroups of a CTA run theirs strictly in turn
// (turn t is warpgroup t % kWarpgroups), each starting only once the previous turn's K loop has waited on all its
// stages.
//
// Why the order is needed for correctness, not only for sharing the tensor cores: a stage's full barrier is waited
// on by parity, which tells apart only two consecutive phases. A warpgroup may therefore wait on phase n of a stage
// only once phase n - 1 has completed. Within a turn the warpgroup's own earlier K blocks see to that; across
// turns, the K blocks before its first one belong to the other warpgroups' turns, and the order makes sure they
// were waited on first. Without it a warpgroup that starts early takes a stage two phases ahead for landed.
//
// done[w] completes one phase each time warpgroup w ends a turn: every thread of w arrives, so the arrivals carry
// (release at CTA scope) the warpgroup's waits before them.
#pragma once

#include <cstdint>

#include "device/common/bounded_wait.cuh"
#include "device/ptx/mbarrier.cuh"

namespace mok::pipeline {

template <int kWarpgroups, int kThreadsPerWarpgroup>
class WarpgroupTurns {
  public:
    struct Storage {
        uint64_t done[kWarpgroups];  // phase m of done[w] completes when warpgroup w ends its turn m
    };

    __device__ explicit WarpgroupTurns(Storage& storage) : storage_(storage) {}

    // One thread initialises; the caller then syncs the block.
    __device__ void init() {
        for (int w = 0; w < kWarpgroups; ++w) {
            ptx::mbarrier_init(&storage_.done[w], kThreadsPerWarpgroup);
        }
        ptx::fence_mbarrier_init();
    }

    // Warpgroup wg's turn number own_turn (0, 1, ... of its own turns): waits until the turn before it, the
    // previous warpgroup's, has ended. False: the wait timed out (error recorded).
    __device__ bool wait_turn(const device::WaitContext& ctx, int wg, int32_t own_turn) {
        const int32_t turn = own_turn * kWarpgroups + wg;
        if (turn == 0) {
            return true;
        }
        const int previous = (wg + kWarpgroups - 1) % kWarpgroups;
        // The previous turn is that warpgroup's number (turn - 1) / kWarpgroups; the phase of that number has the
        // parity waited for. The phase before it completed ahead of this warpgroup's own previous turn, so the
        // parity cannot alias.
        const uint32_t parity = static_cast<uint32_t>((turn - 1) / kWarpgroups) & 1u;
        return ptx::mbarrier_wait_parity_bounded(ctx, WaitSite::kWarpgroupTurn, &storage_.done[previous], parity);
    }

    // Every thread of warpgroup wg, at the end of its turn's K loop (also when the loop gave up, so that the next
    // warpgroup is not left waiting).
    __device__ void end_turn(int wg) { ptx::mbarrier_arrive_release_cta(&storage_.done[wg]); }

  private:
    Storage& storage_;
};

}  // namespace mok::pipeline
