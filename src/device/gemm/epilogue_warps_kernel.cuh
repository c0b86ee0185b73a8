// The epilogue-warps arrangement (docs/gemm.md, "Epilogue warps"): the consumers hand each finished tile to the
// producer warpgroup's idle warps and go straight on to the next K loop, so that the tensor cores no longer wait
// for the epilogue.
//
// Profiled, the cooperative gate/up loses about 21 K blocks' worth of tensor time per tile between two K loops,
// most of it the SwiGLU epilogue (its arithmetic and 96 KiB of stores per CTA). Here the consumer warpgroups only
// round their accumulators to bf16 into a hand-off buffer of their own (pipeline::EpilogueHandoff), and warps 1-3
// of the producer warpgroup, which the cooperative kernel leaves idle, turn it into the form's outputs while the
// consumers run the next tile's K loop. The price is shared memory: the two hand-off buffers (2 x 32 KiB for
// gate/up) leave room for three stages instead of four. A fourth warpgroup is not possible: at 512 threads a thread
// may have 128 registers, and a consumer's m64n256 accumulator alone takes 128.
//
// Roles, 384 threads as in the cooperative kernel:
//   warpgroup 0, warp 0    producer (one thread, produce_tiles);
//   warpgroup 0, warps 1-3 epilogue: per tile, consumer 0's rows then consumer 1's, from their buffers;
//   warpgroups 1, 2        consumers: the cooperative K loop (run_mainloop) on 64 rows each, then the hand-off.
// Every role walks the same scheduler; each output element comes from the same K loop and the same epilogue
// arithmetic as in the cooperative kernel, so the bits are the same.
//
// Forms served: gate/up, down, dgrad_down, dgrad_gate_up, and the weight gradients in fresh mode -- those whose
// kHandoffBytes is positive. Accumulate mode's fp32 slice is twice a hand-off buffer.
//
// A form supplies, besides what grouped_gemm_kernel.cuh lists:
//   static constexpr int kHandoffBytes;                       one consumer's hand-off buffer
//   static void handoff_stage(const Params&, const Tile&, const float (&acc)[...], uint8_t* buffer,
//                             int thread_in_wg);
//   template <int kThreads>
//   static void handoff_store(const Params&, const Tile&, const uint8_t* buffer, int row_half, int thread);
// and, optionally, what the epilogue threads do once both of a tile's row halves are stored:
//   static void handoff_finish(const Params&, const Tile&, int thread);
// and what a consumer warpgroup stores itself from its buffer once it has committed it (rows the form's handoff_store
// leaves out; the consumer reads only what its own warp wrote, so its next staging needs no other wait):
//   static void handoff_consumer_store(const Params&, const Tile&, const uint8_t* buffer, int row_half,
//                                      int thread_in_wg);
#pragma once

#include <cstdint>

#include "device/gemm/grouped_gemm_kernel.cuh"
#include "device/pipeline/epilogue_handoff.cuh"
#include "device/pipeline/tma_pipeline.cuh"

namespace mok::gemm {

// Three stages of 48 KiB and two 32 KiB hand-off buffers (208 KiB) fit where four stages and the 32 KiB staging
// buffers did; a fourth stage would not.
inline constexpr int kHandoffStages = 3;

// Register split (setmaxnreg): the producer warpgroup now runs the SwiGLU arithmetic a chunk at a time, the
// consumers no longer do. setmaxnreg moves registers only within what the launch gave the CTA (384 x 168), so the
// split must fit that, not the SM's register file: an increase that does not fit waits for ever.
// 128 x 72 + 2 x 128 x 216 = 64,512. A form whose epilogue threads carry more arithmetic may ask for more
// (kHandoffProducerRegisters and kHandoffConsumerRegisters of its own).
struct HandoffRegisterSplit {
    uint32_t producer;
    uint32_t consumer;
};
inline constexpr HandoffRegisterSplit kHandoffRegisters{72, 216};

template <class Form>
concept SplitsRegistersItself = requires {
    Form::kHandoffProducerRegisters;
    Form::kHandoffConsumerRegisters;
};

template <class Form>
consteval HandoffRegisterSplit handoff_registers() {
    if constexpr (SplitsRegistersItself<Form>) {
        return {Form::kHandoffProducerRegisters, Form::kHandoffConsumerRegisters};
    } else {
        return kHandoffRegisters;
    }
}

// Whether the consumers skip the K loop of a row block without data (block_without_rows). Not where a form splits the
// registers itself: DgradDownForm's consumers compile clean at 208 and no more, and the skip's row count, live in
// the consumer, spills one register there.
template <class Form>
inline constexpr bool kHandoffConsumerSkipsEmptyBlocks = !SplitsRegistersItself<Form>;

// The epilogue warps' wait budget, in units of the launch's timeout: above the consumers' (they wait on them), so
// that a timeout names the upstream wait that caused it.
inline constexpr uint64_t kEpilogueWaitBudgets = 3;

using HandoffPipeline = pipeline::TmaPipeline<kHandoffStages, kNumConsumerWarps>;
using Handoff = pipeline::EpilogueHandoff<kNumConsumerWarpgroups, kThreadsPerWarpgroup, kEpilogueThreads>;

template <int kBufferBytes>
struct alignas(1024) HandoffSharedStorage {
    uint8_t a[kHandoffStages][kStageBytesA];  // (BLOCK_M, BLOCK_K) bf16 per stage
    uint8_t b[kHandoffStages][kStageBytesB];  // (BLOCK_N, BLOCK_K) bf16 per stage
    // Each consumer's finished tile, in the layout of its form's handoff_stage.
    alignas(1024) uint8_t handoff[kNumConsumerWarpgroups][kBufferBytes];
    HandoffPipeline::Storage pipeline;
    Handoff::Storage handoff_barriers;
};

template <class Form>
using HandoffStorageOf = HandoffSharedStorage<Form::kHandoffBytes>;

template <class Form>
inline constexpr size_t kHandoffSharedBytes = sizeof(HandoffStorageOf<Form>) + alignof(HandoffStorageOf<Form>);

template <class Form>
__device__ __forceinline__ HandoffStorageOf<Form>& handoff_storage(uint8_t* raw) {
    constexpr uintptr_t kAlign = alignof(HandoffStorageOf<Form>);
    const uintptr_t aligned = (reinterpret_cast<uintptr_t>(raw) + kAlign - 1) & ~(kAlign - 1);
    return *reinterpret_cast<HandoffStorageOf<Form>*>(aligned);
}

template <class Form>
concept StoresPartOfHandoff = requires(const typename Form::Params& p, const Tile& t, const uint8_t* buffer) {
    Form::handoff_consumer_store(p, t, buffer, 0, 0);
};

// Consumer warpgroup wg: the cooperative K loop, then the tile into its hand-off buffer once the epilogue warps
// have read the previous one out of it.
template <class Form>
__device__ void run_handoff_consumer(const typename Form::Params& params, HandoffStorageOf<Form>& smem,
                                     HandoffPipeline& pipe, Handoff& handoff, const device::WaitContext& wait_ctx,
                                     int wg) {
    const int thread_in_wg = static_cast<int>(threadIdx.x) % kThreadsPerWarpgroup;
    auto scheduler = Form::make_scheduler(params);
    HandoffPipeline::State state;
    int32_t tile_number = 0;
    for (Tile tile; scheduler.next(tile); ++tile_number) {
        float acc[kNumAccumulators];
        if (!run_mainloop<Form, kHandoffConsumerSkipsEmptyBlocks<Form>>(tile, smem, pipe, state, wait_ctx, wg,
                                                                        wg * WGMMA_M, wg, thread_in_wg, acc)) {
            return;
        }
        if (!handoff.acquire(wait_ctx, wg, tile_number)) {
            return;
        }
        Form::handoff_stage(params, tile, acc, smem.handoff[wg], thread_in_wg);
        handoff.commit(wg);
        if constexpr (StoresPartOfHandoff<Form>) {
            Form::handoff_consumer_store(params, tile, smem.handoff[wg], wg, thread_in_wg);
        }
    }
}

template <class Form>
concept FinishesHandoff = requires(const typename Form::Params& p, const Tile& t) {
    Form::handoff_finish(p, t, 0);
};

template <class Form>
concept PreparesHandoff = requires(const typename Form::Params& p, const Tile& t, uint8_t* buffer) {
    Form::template handoff_prepare<kEpilogueThreads>(p, t, buffer, 0, 0);
};

// The epilogue warps: every tile's two row halves, in the consumers' order. A consumer that gave up (its error
// recorded) makes the next wait here end at once (bounded_wait gives up once the launch has failed).
template <class Form>
__device__ void run_epilogue_warps(const typename Form::Params& params, HandoffStorageOf<Form>& smem, Handoff& handoff,
                                   const device::WaitContext& wait_ctx, int thread) {
    auto scheduler = Form::make_scheduler(params);
    int32_t tile_number = 0;
    for (Tile tile; scheduler.next(tile); ++tile_number) {
        for (int wg = 0; wg < kNumConsumerWarpgroups; ++wg) {
            if constexpr (PreparesHandoff<Form>) {
                // Into the buffer's part the consumer does not write. The previous tile's stores through it are
                // over: every thread passed the barrier below for the other row half since. The barrier makes the
                // part whole before any thread stores through it.
                if (Form::template handoff_prepare<kEpilogueThreads>(params, tile, smem.handoff[wg], wg, thread)) {
                    ptx::named_barrier_sync(static_cast<uint32_t>(NamedBarrier::kEpilogueWarps), kEpilogueThreads);
                }
            }
            if (!handoff.wait(wait_ctx, wg, tile_number)) {
                return;
            }
            Form::template handoff_store<kEpilogueThreads>(params, tile, smem.handoff[wg], wg, thread);
            handoff.release(wg);
        }
        if constexpr (FinishesHandoff<Form>) {
            Form::handoff_finish(params, tile, thread);
        }
    }
}

template <class Form>
__global__ void __launch_bounds__(kNumThreads, 1)
    grouped_gemm_epilogue_warps_kernel(const __grid_constant__ typename Form::Params params) {
    // The consumers run no begin_tile (accumulate mode's, whose slice would not fit a hand-off buffer anyway).
    static_assert(!HasTileBegin<Form>, "the epilogue-warps arrangement serves forms without a tile prologue");
    static_assert(kHandoffSharedBytes<Form> <= kMaxCtaSharedBytes,
                  "the epilogue-warps GEMM's shared memory must fit one Hopper CTA");
    constexpr HandoffRegisterSplit kRegisters = handoff_registers<Form>();
    static_assert(register_split_fits(kRegisters.producer, kRegisters.consumer),
                  "the roles' registers must fit what the launch allocates to the CTA");
    extern __shared__ uint8_t smem_raw[];
    HandoffStorageOf<Form>& smem = handoff_storage<Form>(smem_raw);
    HandoffPipeline pipe(smem.pipeline);
    Handoff handoff(smem.handoff_barriers);
    if (threadIdx.x == 0) {
        pipe.init();
        handoff.init();
        Form::prefetch(params);
    }
    __syncthreads();
    const RoleWaits waits = RoleWaits::of(params.common);
    const int warpgroup = static_cast<int>(threadIdx.x) / kThreadsPerWarpgroup;
    if (warpgroup == static_cast<int>(WarpgroupRole::kProducer)) {
        ptx::warpgroup_release_registers<kRegisters.producer>();
        if (threadIdx.x == 0) {
            run_producer<Form>(params, smem, pipe, waits.producer);
        } else if (threadIdx.x >= 32) {
            const device::WaitContext epilogue_wait{params.common.status, params.common.rank,
                                                    kEpilogueWaitBudgets * params.common.timeout_ns};
            run_epilogue_warps<Form>(params, smem, handoff, epilogue_wait, static_cast<int>(threadIdx.x) - 32);
        }
    } else {
        ptx::warpgroup_claim_registers<kRegisters.consumer>();
        // Broadcast from lane 0, so that ptxas knows the index is the same in every lane of the warp: the hand-off
        // barriers it selects are waited on between two K loops (see the ping-pong kernel).
        const int consumer = __shfl_sync(0xffffffffu, warpgroup - 1, 0);
        run_handoff_consumer<Form>(params, smem, pipe, handoff, waits.consumer, consumer);
    }
}

}  // namespace mok::gemm
