// Form 3b, backward: dx_rows = dG_e W_gate,e + dU_e W_up,e per expert, two operand pairs into one accumulator
// (K = 2I: the dG blocks, then the dU blocks), stored row by row (optionally scattered through a row map).
//   A  dgu rows    (rows, 2, I) bf16, K-major  tensor map 3-D {I, 2, rows}, box {64, 1, 128}
//   B  W_gate/up   (E, I, H) bf16 read as (K = I, N = H), MN-major: tensor maps 3-D {H, I, E}, box {64, 64, 1},
//                  four boxes along N per stage
// The K loop covers ceil(I / 64) blocks of each half; a block past I in either half reads zeros (TMA fills
// out-of-range elements of both operands with zeros), so I need only be a multiple of 8.
#pragma once

#include <cuda.h>

#include "device/epilogue/row_store_epilogue.cuh"
#include "device/gemm/forms/row_store_handoff.cuh"
#include "device/gemm/grouped_gemm_kernel.cuh"
#include "device/ptx/tma.cuh"

namespace mok::gemm {

struct DgradGateUpForm : RowStoreHandoff {
    struct Params {
        KernelCommon common;
        RowGroups groups;
        CUtensorMap dgu;               // {I, 2, rows}
        CUtensorMap w_gate;            // {H, I, E}, box {64, 64, 1}
        CUtensorMap w_up;              // {H, I, E}, box {64, 64, 1}
        epilogue::RowStoreOutput out;  // num_cols = H
        int32_t width;                 // I
    };
    using Scheduler = GroupedRowScheduler;
    static constexpr Major kMajorA = Major::kK;
    static constexpr Major kMajorB = Major::kMN;
    static constexpr bool kMaskKTail = false;
    static constexpr bool kGatedRows = false;  // A is dg|du, written by dgrad_down

    __device__ static int blocks_per_half(const Params& p) { return (p.width + BLOCK_K - 1) / BLOCK_K; }

    __device__ static Scheduler make_scheduler(const Params& p, TileSlots slots = TileSlots::of_cta()) {
        return Scheduler(p.groups, p.out.num_cols, 2 * blocks_per_half(p), slots);
    }

    __device__ static void prefetch(const Params& p) {
        ptx::prefetch_tensor_map(&p.dgu);
        ptx::prefetch_tensor_map(&p.w_gate);
        ptx::prefetch_tensor_map(&p.w_up);
    }

    __device__ static void load(const Params& p, const Tile& t, int k_block, uint8_t* a, uint8_t* b, uint64_t* bar) {
        const int half = k_block < blocks_per_half(p) ? 0 : 1;
        const int k = (k_block - half * blocks_per_half(p)) * BLOCK_K;
        const CUtensorMap* w = half == 0 ? &p.w_gate : &p.w_up;
        ptx::tma_load_3d(a, &p.dgu, k, half, t.row_begin, bar);
#pragma unroll
        for (int box = 0; box < BLOCK_N / kMnBoxElements; ++box) {
            ptx::tma_load_3d(b + box * kMnBoxBytes, w, t.n_idx * BLOCK_N + box * kMnBoxElements, k, t.expert, bar);
        }
    }

    // Ping-pong arrangement: this CTA's 64 rows of dg|du (the map has 64-row boxes then), and half of B's boxes
    // along N multicast to both CTAs.
    __device__ static void load_half(const Params& p, const Tile& t, int k_block, uint32_t rank, uint8_t* a, uint8_t* b,
                                     uint64_t* bar) {
        constexpr int kBoxesPerRank = BLOCK_N / kMnBoxElements / kPingPongClusterSize;
        const int half = k_block < blocks_per_half(p) ? 0 : 1;
        const int k = (k_block - half * blocks_per_half(p)) * BLOCK_K;
        const CUtensorMap* w = half == 0 ? &p.w_gate : &p.w_up;
        ptx::tma_load_3d(a, &p.dgu, k, half, t.row_begin + static_cast<int>(rank) * kPingPongRows, bar);
#pragma unroll
        for (int i = 0; i < kBoxesPerRank; ++i) {
            const int box = static_cast<int>(rank) * kBoxesPerRank + i;
            ptx::tma_load_3d_multicast(b + box * kMnBoxBytes, w, t.n_idx * BLOCK_N + box * kMnBoxElements, k, t.expert,
                                       bar, kPingPongClusterMask);
        }
    }

    __device__ static void epilogue(const Params& p, const Tile& t, const float (&acc)[kNumAccumulators], int row_half,
                                    int thread_in_wg, const epilogue::EpilogueContext& e) {
        epilogue::row_store_epilogue(p.out, t, acc, row_half, thread_in_wg, e);
    }
    // Epilogue-warps arrangement: RowStoreHandoff stages and stores the rows.
};

}  // namespace mok::gemm
