// The stage ring between a TMA producer warp and the consumer warpgroups of a GEMM.
//
// Each stage has two mbarriers:
//   full[s]   completes when the producer's TMA bytes for stage s have landed (1 arrival + transaction bytes);
//   empty[s]  completes when every consumer warp has finished reading stage s (kNumConsumerWarps arrivals).
// The producer waits on empty with the opposite parity of its own pass: a freshly initialised barrier counts
// as having completed the phase before phase 0, so the first pass round the ring does not wait.
#pragma once

#include <cstdint>

#include "device/common/bounded_wait.cuh"
#include "device/pipeline/pipeline_state.cuh"
#include "device/ptx/mbarrier.cuh"

namespace mok::pipeline {

template <int kStages>
struct TmaPipelineStorage {
    uint64_t full[kStages];
    uint64_t empty[kStages];
};

template <int kStages, int kNumConsumerWarps>
class TmaPipeline {
  public:
    using Storage = TmaPipelineStorage<kStages>;
    using State = PipelineState<kStages>;

    __device__ explicit TmaPipeline(Storage& storage) : storage_(storage) {}

    // One thread initialises; the caller then syncs the block.
    __device__ void init() {
        for (int s = 0; s < kStages; ++s) {
            ptx::mbarrier_init(&storage_.full[s], 1);
            ptx::mbarrier_init(&storage_.empty[s], kNumConsumerWarps);
        }
        ptx::fence_mbarrier_init();
    }

    // Producer: waits until stage `state.index` is free. False: the wait timed out (error recorded).
    __device__ bool producer_acquire(const device::WaitContext& ctx, const State& state) {
        return ptx::mbarrier_wait_parity_bounded(ctx, WaitSite::kPipelineEmpty, &storage_.empty[state.index],
                                                 state.phase ^ 1u);
    }

    // Producer: announces the bytes the stage's TMA loads will deliver; returns the barrier they complete on.
    __device__ uint64_t* producer_expect(const State& state, uint32_t bytes) {
        ptx::mbarrier_arrive_expect_tx_release_cta(&storage_.full[state.index], bytes);
        return &storage_.full[state.index];
    }

    // Consumer: waits until the stage's data has landed.
    __device__ bool consumer_wait(const device::WaitContext& ctx, const State& state) {
        return ptx::mbarrier_wait_parity_bounded(ctx, WaitSite::kPipelineFull, &storage_.full[state.index],
                                                 state.phase);
    }

    // Consumer: one lane per warp hands the stage back once the warp's wgmma reads of it are complete.
    __device__ void consumer_release(uint32_t stage_index, uint32_t lane_idx) {
        if (lane_idx == 0) {
            ptx::mbarrier_arrive_release_cta(&storage_.empty[stage_index]);
        }
    }

  private:
    Storage& storage_;
};

}  // namespace mok::pipeline
