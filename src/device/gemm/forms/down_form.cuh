// Form 2, forward: O = H_e W_down,e^T per expert, stored row by row (optionally scattered through a row map).
//   A  h rows      (rows, I) bf16, K-major     tensor map 2-D {I, rows}, box {64, 128}
//   B  W_down      (E, H, I) bf16, K-major     tensor map 3-D {I, H, E}, box {64, 256, 1}
#pragma once

#include <cuda.h>

#include "device/epilogue/row_store_epilogue.cuh"
#include "device/epilogue/row_tile_publish.cuh"
#include "device/gemm/forms/row_store_handoff.cuh"
#include "device/gemm/grouped_gemm_kernel.cuh"
#include "device/ptx/tma.cuh"

namespace mok::gemm {

struct DownForm : ResolvedRowStoreHandoff {
    struct Params {
        KernelCommon common;
        RowGroups groups;
        CUtensorMap h;                 // {I, rows}
        CUtensorMap w_down;            // {I, H, E}
        epilogue::RowStoreOutput out;  // num_cols = H
        int32_t width;                 // I = K
        RowTilePublish publish;        // the pipelined path's hand-off to the push or the sources; or none
    };
    using Scheduler = GroupedRowScheduler;
    static constexpr Major kMajorA = Major::kK;
    static constexpr Major kMajorB = Major::kK;
    static constexpr bool kMaskKTail = false;
    static constexpr bool kGatedRows = false;  // A is h, written by gate_up

    // Bands of sixteen with fixed starts: bands of eight cost this form's layer stage 2-3.5%, starts at experts up to
    // 1.6% (docs/gemm.md).
    __device__ static Scheduler make_scheduler(const Params& p, TileSlots slots = TileSlots::of_cta()) {
        return Scheduler(p.groups, p.out.num_cols, (p.width + BLOCK_K - 1) / BLOCK_K, slots, Scheduler::kDownBandTiles,
                         Scheduler::BandStarts::kFixed);
    }

    __device__ static void prefetch(const Params& p) {
        ptx::prefetch_tensor_map(&p.h);
        ptx::prefetch_tensor_map(&p.w_down);
    }

    __device__ static void load(const Params& p, const Tile& t, int k_block, uint8_t* a, uint8_t* b, uint64_t* bar) {
        const int k = k_block * BLOCK_K;
        ptx::tma_load_2d(a, &p.h, k, t.row_begin, bar);
        ptx::tma_load_3d(b, &p.w_down, k, t.n_idx * BLOCK_N, t.expert, bar);
    }

    // Ping-pong arrangement: this CTA's 64 rows of A, and rows [128 rank, 128 rank + 128) of the B tile multicast to
    // both CTAs (h's map has 64-row boxes and W_down's 128-row boxes then).
    __device__ static void load_half(const Params& p, const Tile& t, int k_block, uint32_t rank, uint8_t* a, uint8_t* b,
                                     uint64_t* bar) {
        constexpr int kHalfRows = BLOCK_N / kPingPongClusterSize;
        const int k = k_block * BLOCK_K;
        ptx::tma_load_2d(a, &p.h, k, t.row_begin + static_cast<int>(rank) * kPingPongRows, bar);
        ptx::tma_load_3d_multicast(b + rank * kHalfRows * ptx::kSwizzleBytes, &p.w_down, k,
                                   t.n_idx * BLOCK_N + static_cast<int>(rank) * kHalfRows, t.expert, bar,
                                   kPingPongClusterMask);
    }

    __device__ static void epilogue(const Params& p, const Tile& t, const float (&acc)[kNumAccumulators], int row_half,
                                    int thread_in_wg, const epilogue::EpilogueContext& e) {
        epilogue::row_store_epilogue(p.out, t, acc, row_half, thread_in_wg, e);
        if (p.publish.enabled()) {
            const auto num_n_tiles = static_cast<uint32_t>((p.out.num_cols + BLOCK_N - 1) / BLOCK_N);
            epilogue::publish_row_tile(p.publish, t, num_n_tiles, thread_in_wg, e);
        }
    }

    // Epilogue-warps arrangement: ResolvedRowStoreHandoff stages and stores the rows; once both row halves of the N
    // tile are stored, the epilogue warps publish it.
    __device__ static void handoff_finish(const Params& p, const Tile& t, int thread) {
        if (p.publish.enabled()) {
            const auto num_n_tiles = static_cast<uint32_t>((p.out.num_cols + BLOCK_N - 1) / BLOCK_N);
            epilogue::publish_row_tile_from_epilogue_warps(p.publish, t, num_n_tiles, thread);
        }
    }
};

}  // namespace mok::gemm
