// Form 3a, backward: dh' = dY_e W_down,e per expert (the down projection's input gradient, unscaled), with the
// SwiGLU-backward and router-gradient epilogue.
//   A  dy rows     (rows, H) bf16, K-major     tensor map 2-D {H, rows}, box {64, 128}
//   B  W_down      (E, H, I) bf16 read as (K = H, N = I), MN-major: tensor map 3-D {I, H, E}, box {64, 64, 1},
//                  four boxes along N per stage
#pragma once

#include <cuda.h>

#include "device/epilogue/swiglu_backward_epilogue.cuh"
#include "device/gemm/grouped_gemm_kernel.cuh"
#include "device/ptx/tma.cuh"

namespace mok::gemm {

struct DgradDownForm {
    struct Params {
        KernelCommon common;
        RowGroups groups;
        CUtensorMap dy;                       // {H, rows}
        CUtensorMap w_down;                   // {I, H, E}, box {64, 64, 1}
        epilogue::SwigluBackwardOutputs out;  // width = I = N
        int32_t hidden;                       // H = K
        // Epilogue-warps arrangement: rows of each consumer warp's 16 that the consumer runs the SwiGLU backward of
        // itself after its hand-off, in the tiles epilogue::ConsumerRowSplit names; 0 leaves every row to the
        // epilogue warps.
        int32_t consumer_rows;
    };
    using Scheduler = GroupedRowScheduler;
    static constexpr Major kMajorA = Major::kK;
    static constexpr Major kMajorB = Major::kMN;
    static constexpr bool kMaskKTail = false;
    static constexpr bool kGatedRows = true;  // A is the dispatched dy rows
    // The epilogue's passes stage 8 KiB, so the ping-pong arrangement fits a fifth stage (pingpong_kernel.cuh).
    static constexpr int kPingPongStagingBytes = epilogue::kSwigluBackwardStagingBytes;
    // Epilogue-warps arrangement: the consumer hands over bf16(dh'), the epilogue warps run the SwiGLU backward.
    static constexpr int kHandoffBytes = epilogue::kSwigluBackwardHandoffBytes;
    // The epilogue threads' SwiGLU backward interleaves more elements with more registers; the consumers compile
    // clean at 208 (at 200 they spill). 128 x 88 + 2 x 128 x 208 = 64,512.
    static constexpr uint32_t kHandoffProducerRegisters = 88;
    static constexpr uint32_t kHandoffConsumerRegisters = 208;

    __device__ static Scheduler make_scheduler(const Params& p, TileSlots slots = TileSlots::of_cta()) {
        return Scheduler(p.groups, p.out.width, (p.hidden + BLOCK_K - 1) / BLOCK_K, slots);
    }

    __device__ static void prefetch(const Params& p) {
        ptx::prefetch_tensor_map(&p.dy);
        ptx::prefetch_tensor_map(&p.w_down);
    }

    __device__ static void load(const Params& p, const Tile& t, int k_block, uint8_t* a, uint8_t* b, uint64_t* bar) {
        const int k = k_block * BLOCK_K;
        ptx::tma_load_2d(a, &p.dy, k, t.row_begin, bar);
#pragma unroll
        for (int box = 0; box < BLOCK_N / kMnBoxElements; ++box) {
            ptx::tma_load_3d(b + box * kMnBoxBytes, &p.w_down, t.n_idx * BLOCK_N + box * kMnBoxElements, k, t.expert,
                             bar);
        }
    }

    // Ping-pong arrangement: this CTA's 64 rows of A (dy's map has 64-row boxes then), and half of B's boxes along
    // N multicast to both CTAs.
    __device__ static void load_half(const Params& p, const Tile& t, int k_block, uint32_t rank, uint8_t* a, uint8_t* b,
                                     uint64_t* bar) {
        constexpr int kBoxesPerRank = BLOCK_N / kMnBoxElements / kPingPongClusterSize;
        const int k = k_block * BLOCK_K;
        ptx::tma_load_2d(a, &p.dy, k, t.row_begin + static_cast<int>(rank) * kPingPongRows, bar);
#pragma unroll
        for (int i = 0; i < kBoxesPerRank; ++i) {
            const int box = static_cast<int>(rank) * kBoxesPerRank + i;
            ptx::tma_load_3d_multicast(b + box * kMnBoxBytes, &p.w_down, t.n_idx * BLOCK_N + box * kMnBoxElements, k,
                                       t.expert, bar, kPingPongClusterMask);
        }
    }

    __device__ static void epilogue(const Params& p, const Tile& t, const float (&acc)[kNumAccumulators], int row_half,
                                    int thread_in_wg, const epilogue::EpilogueContext& e) {
        epilogue::swiglu_backward_epilogue(p.out, t, acc, row_half, thread_in_wg, e);
    }

    __device__ static void handoff_stage(const Params&, const Tile&, const float (&acc)[kNumAccumulators],
                                         uint8_t* buffer, int thread_in_wg) {
        epilogue::stage_swiglu_backward(buffer, acc, thread_in_wg);
    }

    template <int kThreads>
    __device__ static void handoff_store(const Params& p, const Tile& t, const uint8_t* buffer, int row_half,
                                         int thread) {
        epilogue::store_swiglu_backward<kThreads>(p.out, t, buffer, row_half, thread,
                                                  epilogue::ConsumerRowSplit::of(t, p.consumer_rows));
    }

    // The consumer warpgroup's share of its own hand-off, once it is committed (the epilogue warps skip those rows).
    __device__ static void handoff_consumer_store(const Params& p, const Tile& t, const uint8_t* buffer, int row_half,
                                                  int thread_in_wg) {
        const epilogue::ConsumerRowSplit split = epilogue::ConsumerRowSplit::of(t, p.consumer_rows);
        if (split.consumer_rows > 0) {
            epilogue::store_swiglu_backward_consumer_rows(p.out, t, buffer, row_half, thread_in_wg, split);
        }
    }
};

}  // namespace mok::gemm
