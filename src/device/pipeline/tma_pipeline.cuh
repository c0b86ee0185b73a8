// The stage ring between a TMA producer thread and the consumer warpgroups of a GEMM.
//
// Each stage has two mbarriers:
//   full[s]   completes when the producer has arrived (once, announcing the stage's bytes) and the bytes have
//             landed;
//   empty[s]  completes when the consumer warps that read stage s have released it (kConsumerWarps arrivals from
//             each CTA of the cluster).
// The producer waits on empty with the opposite parity of its own pass: a freshly initialised barrier counts
// as having completed the phase before phase 0, so the first pass round the ring does not wait.
//
// kClusterSize > 1 is the grouped GEMM's cluster-pair arrangement (docs/gemm.md): the CTAs of a cluster each load
// part of every stage and TMA multicasts it into all of them at the same offset, so a stage of any CTA is written
// by every CTA's producer. It may then be refilled only when the consumers of every CTA are done with it: the
// consumer warps arrive on the empty barrier of each CTA of the cluster, and the producer waits on its own. CTA
// scope is enough for both: what an arrival hands over is completed reads, not data (ptx/cluster.cuh says why).
// Each CTA's full barrier counts the bytes of all the parts, its own and the peers' multicasts, which may land
// before the producer's arrival announces them (the phase cannot complete without that arrival).
#pragma once

#include <cstdint>

#include "device/common/bounded_wait.cuh"
#include "device/pipeline/pipeline_state.cuh"
#include "device/ptx/cluster.cuh"
#include "device/ptx/mbarrier.cuh"

namespace mok::pipeline {

template <int kStages>
struct TmaPipelineStorage {
    uint64_t full[kStages];
    uint64_t empty[kStages];
};

template <int kStages, int kConsumerWarps, int kClusterSize = 1>
class TmaPipeline {
  public:
    using Storage = TmaPipelineStorage<kStages>;
    using State = PipelineState<kStages>;

    __device__ explicit TmaPipeline(Storage& storage) : storage_(storage) {}

    // One thread initialises; the caller then syncs the block (the cluster, when kClusterSize > 1: no peer may
    // arrive on, or multicast into, a barrier before it is initialised).
    __device__ void init() {
        for (int s = 0; s < kStages; ++s) {
            ptx::mbarrier_init(&storage_.full[s], 1);
            ptx::mbarrier_init(&storage_.empty[s], kConsumerWarps * kClusterSize);
        }
        ptx::fence_mbarrier_init();
    }

    // Producer: waits until stage `state.index` is free (in every CTA of the cluster). False: the wait timed out
    // (error recorded).
    __device__ bool producer_acquire(const device::WaitContext& ctx, const State& state) {
        uint64_t* bar = &storage_.empty[state.index];
        const uint32_t parity = state.phase ^ 1u;
        return ptx::mbarrier_wait_parity_bounded(ctx, WaitSite::kPipelineEmpty, bar, parity);
    }

    // Producer: announces the bytes the stage will receive in this CTA; returns the barrier they complete on.
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
        if (lane_idx != 0) {
            return;
        }
        if constexpr (kClusterSize == 1) {
            ptx::mbarrier_arrive_release_cta(&storage_.empty[stage_index]);
        } else {
#pragma unroll
            for (uint32_t rank = 0; rank < kClusterSize; ++rank) {
                ptx::mbarrier_arrive_rank(&storage_.empty[stage_index], rank);
            }
        }
    }

  private:
    Storage& storage_;
};

}  // namespace mok::pipeline
