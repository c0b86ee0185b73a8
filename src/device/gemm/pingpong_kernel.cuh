// The ping-pong arrangement of the M-grouped forms (docs/gemm.md, "Next: overlapping the epilogue"): the
// tensor cores keep working while a tile's epilogue runs.
//
// Clusters of two CTAs work on the same 128 x 256 tiles, CTA r of a cluster on rows [64 r, 64 r + 64) of each.
// Within a CTA the two consumer warpgroups take the cluster's tiles in turn, each with a whole 64 x 256
// accumulator: while one runs its tile's epilogue, the other runs the next tile's K loop. One warpgroup's K loop
// alone keeps the tensor cores busy (m64n256k16 issues to all four of the SM's sub-partitions).
//
// Operand traffic stays that of the cooperative kernel: a stage holds this CTA's 64-row A block (8 KiB) and the
// whole 256-column B tile (32 KiB), of which each CTA loads one half and TMA multicasts it into both CTAs'
// stages. Per K block that is 8 + 16 KiB loaded per CTA for 2.1 MFLOP, as against 16 + 32 KiB for 4.2 MFLOP.
// A stage thus buffers half the work it does in the cooperative kernel, so the ring takes as many stages as the
// form's staging buffers leave room for (PingPongLayout): four, or five for dgrad_down, whose epilogue stages 8 KiB.
// The stage ring is a pipeline::TmaPipeline over the cluster; the results are those of the cooperative kernel bit for
// bit (each element's K loop runs in the same order).
//
// A form supplies, besides what grouped_gemm_kernel.cuh lists, make_scheduler(params, TileSlots) and
//   static void load_half(const Params&, const Tile&, int k_block, uint32_t rank, uint8_t* a, uint8_t* b,
//                         uint64_t* full_barrier);   this CTA's A block and its half of B, multicast
// with the tensor maps of A in 64-row boxes (the host builds them so for this arrangement).
#pragma once

#include <cstdint>

#include "device/gemm/grouped_gemm_kernel.cuh"
#include "device/pipeline/tma_pipeline.cuh"
#include "device/pipeline/warpgroup_turns.cuh"
#include "device/ptx/cluster.cuh"

namespace mok::gemm {

// The warps of one consumer warpgroup: each stage is read by one warpgroup, in each CTA.
inline constexpr int kConsumerWarpsPerWarpgroup = kThreadsPerWarpgroup / 32;

using ConsumerTurns = pipeline::WarpgroupTurns<kNumConsumerWarpgroups, kThreadsPerWarpgroup>;

// What the storage needs besides its stages and staging buffers: up to 1 KiB lost to aligning the dynamic
// allocation, and the barriers.
inline constexpr int kPingPongSharedSlack = 2 * 1024;
inline constexpr int kPingPongStageBytes = kPingPongStageBytesA + kStageBytesB;

// Shared memory of one CTA of the ping-pong arrangement: kNumStages stages of 40 KiB and the two warpgroups' staging
// buffers. Operand tiles are 1024-byte aligned, for the 128-byte swizzle (GemmSharedStorage).
template <int kNumStages, int kStagingBytes>
struct alignas(1024) PingPongSharedStorage {
    using Pipeline = pipeline::TmaPipeline<kNumStages, kConsumerWarpsPerWarpgroup, kPingPongClusterSize>;

    uint8_t a[kNumStages][kPingPongStageBytesA];  // (kPingPongRows, BLOCK_K) bf16 per stage: this CTA's rows
    uint8_t b[kNumStages][kStageBytesB];          // (BLOCK_N, BLOCK_K) bf16 per stage: both CTAs' halves
    alignas(1024) uint8_t staging[kNumConsumerWarpgroups][kStagingBytes];
    typename Pipeline::Storage pipeline;
    ConsumerTurns::Storage turns;
    // The epilogue context's TMA-load barriers; the forms of this arrangement's epilogues load nothing.
    uint64_t epilogue_loaded[kNumConsumerWarpgroups][epilogue::kStagingHalves];
};

// A form's staging buffer in this arrangement: kPingPongStagingBytes where its epilogue declares one (dgrad_down's
// stages 8 KiB), a whole kStagingBytesPerWarpgroup otherwise.
template <class Form>
consteval int pingpong_staging_bytes() {
    if constexpr (requires { Form::kPingPongStagingBytes; }) {
        return Form::kPingPongStagingBytes;
    } else {
        return kStagingBytesPerWarpgroup;
    }
}

// As many stages as fit beside the staging buffers. A stage buffers half the work it does in the cooperative kernel
// (2.1 MFLOP), so every stage counts: with 16 KiB staging buffers four fit, with 8 KiB five (docs/gemm.md).
template <class Form>
struct PingPongLayout {
    static constexpr int kStagingBytes = pingpong_staging_bytes<Form>();
    static constexpr int kNumStages =
        (kMaxCtaSharedBytes - kPingPongSharedSlack - kNumConsumerWarpgroups * kStagingBytes) / kPingPongStageBytes;
    using Storage = PingPongSharedStorage<kNumStages, kStagingBytes>;
    using Pipeline = typename Storage::Pipeline;
    static constexpr size_t kSharedBytes = sizeof(Storage) + alignof(Storage);

    static_assert(kSharedBytes <= kMaxCtaSharedBytes, "the ping-pong GEMM's shared memory must fit one Hopper CTA");
};

static_assert(kStageBytesB % (kPingPongClusterSize * 1024) == 0, "each CTA's half of B keeps the swizzle alignment");

template <class Form>
__device__ __forceinline__ typename PingPongLayout<Form>::Storage& pingpong_storage(uint8_t* raw) {
    using Storage = typename PingPongLayout<Form>::Storage;
    const uintptr_t address = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = (address + alignof(Storage) - 1) & ~(uintptr_t{alignof(Storage)} - 1);
    return *reinterpret_cast<Storage*>(aligned);
}

// The producer thread: every tile of the cluster, this CTA's A block and its half of B per K block. Only rank 0
// counts the cluster's waves (WaveSync), one tile per cluster; rank 1 keeps pace through the shared stages.
template <class Form>
__device__ void run_pingpong_producer(const typename Form::Params& params, typename PingPongLayout<Form>::Storage& smem,
                                      typename PingPongLayout<Form>::Pipeline& pipe,
                                      const device::WaitContext& wait_ctx, uint32_t rank) {
    const TileSlots slots = TileSlots::of_cluster(kPingPongClusterSize);
    auto scheduler = Form::make_scheduler(params, slots);
    WaveSync waves(rank == 0 ? params.common.wave_counter : nullptr, scheduler.num_tiles(), slots.stride);
    produce_tiles<Form>(params, scheduler, waves, pipe, wait_ctx, kPingPongStageBytesA + kStageBytesB,
                        [&](const Tile& tile, int k_block, uint32_t stage, uint64_t* full) {
                            Form::load_half(params, tile, k_block, rank, smem.a[stage], smem.b[stage], full);
                        });
}

// The next tile of consumer warpgroup wg's turn: the warpgroups take the scheduler's tiles in turn, and a
// warpgroup's ring position steps over the other's K blocks. A function of its own, so that the K loop and the
// epilogue sit on the loop's one path, as in the cooperative kernel: behind a branch of their own ptxas
// serialises the wgmma (C7518).
template <class Scheduler, class State>
__device__ __forceinline__ bool next_turn(Scheduler& scheduler, Tile& tile, State& state, int32_t& turn, int wg) {
    while (scheduler.next(tile)) {
        const bool mine = turn % kNumConsumerWarpgroups == wg;
        ++turn;
        if (mine) {
            return true;
        }
        state.advance_by(static_cast<uint32_t>(tile.num_k_blocks));
    }
    return false;
}

// Consumer warpgroup wg: the cluster's tiles wg, wg + 2, wg + 4, ... of the scheduler's sequence, their K loops
// in turn with the other warpgroup's (WarpgroupTurns says why), their epilogues under the other's next K loop.
template <class Form>
__device__ void run_pingpong_consumer(const typename Form::Params& params, typename PingPongLayout<Form>::Storage& smem,
                                      typename PingPongLayout<Form>::Pipeline& pipe, ConsumerTurns& turns,
                                      const device::WaitContext& wait_ctx, int wg, uint32_t rank) {
    const int thread_in_wg = static_cast<int>(threadIdx.x) % kThreadsPerWarpgroup;
    const epilogue::EpilogueContext epilogue_ctx{smem.staging[wg], smem.epilogue_loaded[wg], &wait_ctx, wg, true};
    auto scheduler = Form::make_scheduler(params, TileSlots::of_cluster(kPingPongClusterSize));
    typename PingPongLayout<Form>::Pipeline::State state;
    int32_t turn = 0;
    int32_t own_turn = 0;
    for (Tile tile; next_turn(scheduler, tile, state, turn, wg); ++own_turn) {
        float acc[kNumAccumulators];
        // Ending the turn on every path, a failed one too, leaves the other warpgroup no wait in vain. Early
        // returns rather than one combined condition: a K loop behind a condition is a divergent path to ptxas.
        if (!turns.wait_turn(wait_ctx, wg, own_turn)) {
            turns.end_turn(wg);
            return;
        }
        const bool loaded = run_mainloop<Form>(tile, smem, pipe, state, wait_ctx, 0,
                                               static_cast<int>(rank) * kPingPongRows, wg, thread_in_wg, acc);
        turns.end_turn(wg);
        if (!loaded) {
            return;
        }
        Form::epilogue(params, tile, acc, static_cast<int>(rank), thread_in_wg, epilogue_ctx);
    }
}

template <class Form>
__global__ void __launch_bounds__(kNumThreads, 1)
    grouped_gemm_pingpong_kernel(const __grid_constant__ typename Form::Params params) {
    static_assert(!Form::kMaskKTail, "the ping-pong arrangement serves the M-grouped forms");
    extern __shared__ uint8_t smem_raw[];
    typename PingPongLayout<Form>::Storage& smem = pingpong_storage<Form>(smem_raw);
    typename PingPongLayout<Form>::Pipeline pipe(smem.pipeline);
    ConsumerTurns turns(smem.turns);
    const uint32_t rank = ptx::cluster_cta_rank();
    if (threadIdx.x == 0) {
        pipe.init();
        turns.init();
        Form::prefetch(params);
    }
    // Both CTAs' barriers are initialised before either multicasts into the other or arrives on its barriers.
    ptx::cluster_sync();
    const RoleWaits waits = RoleWaits::of(params.common);
    const int warpgroup = static_cast<int>(threadIdx.x) / kThreadsPerWarpgroup;
    // Each role ends with the cluster barrier: no CTA leaves while the other may still arrive on its barriers (its
    // consumers' releases). Inside each branch, not after them: code after the roles' reconvergence puts the
    // consumers' wgmma on a divergent path for ptxas, which serialises them (C7518).
    if (warpgroup == static_cast<int>(WarpgroupRole::kProducer)) {
        ptx::warpgroup_release_registers<kProducerRegisters>();
        if (threadIdx.x == 0) {
            run_pingpong_producer<Form>(params, smem, pipe, waits.producer, rank);
        }
        ptx::cluster_sync();
    } else {
        ptx::warpgroup_claim_registers<kConsumerRegisters>();
        // Broadcast from lane 0: the compiler then knows the index is the same in every lane of the warp. Taken
        // from threadIdx as it is, the turn test in next_turn puts the wgmma on a divergent path (C7518).
        const int consumer = __shfl_sync(0xffffffffu, warpgroup - 1, 0);
        run_pingpong_consumer<Form>(params, smem, pipe, turns, waits.consumer, consumer, rank);
        ptx::cluster_sync();
    }
}

}  // namespace mok::gemm
