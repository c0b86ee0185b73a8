// Weight-gradient epilogue: one (output-row tile, output-column tile) of dW_e, the full fp32 sum over the
// expert's rows, written once by the one CTA that owns the tile -- no split-K, no atomics. Fresh mode rounds
// it to bf16; accumulate mode adds it to the fp32 main_grad in place (docs/semantics.md section 6).
// Fresh tiles go through the warpgroup's staging buffer and leave as coalesced 16-byte row chunks: with few rows
// per expert the K loop is only a few blocks long, and 4-byte stores straight from the fragment layout (eight
// rows per warp instruction, half a sector each) cost more than the K loop itself. Accumulate mode reads and
// writes fp32 in place from registers, its loads batched ahead of its stores.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "common/fp32_ops.hpp"
#include "device/epilogue/staging.cuh"
#include "device/gemm/gemm_config.cuh"
#include "device/scheduler/gemm_tile_scheduler.cuh"

namespace mok::epilogue {

enum class WeightGradMode : int {
    kFresh = 0,       // bf16 output, overwritten
    kAccumulate = 1,  // fp32 main_grad, out += sum
};

struct WeightGradOutput {
    void* out;         // [E_local, num_rows, num_cols]: bf16 (fresh) or fp32 (accumulate)
    int32_t num_rows;  // rows of one expert's gradient (M of the tile grid)
    int32_t num_cols;  // columns (N)
};

// Fresh mode: the warpgroup's 64 rows of the tile, rounded to bf16, in two staging passes of 128 columns.
__device__ __forceinline__ void store_fresh_weight_grad(const WeightGradOutput& out, const gemm::Tile& tile,
                                                        int row_begin, const float (&acc)[gemm::kNumAccumulators],
                                                        int wg, int thread_in_wg, uint8_t* staging) {
    constexpr int kGroupsPerPass = gemm::kStagingCols / 8;
    const Fragment f = Fragment::of_thread(thread_in_wg);
    const int first_row = row_begin + wg * gemm::WGMMA_M;
    const int rows_here = out.num_rows - first_row;
    const bool has_rows = tile.num_rows > 0;  // an expert with no rows never ran the K loop: its gradient is 0
    __nv_bfloat16* expert_out = static_cast<__nv_bfloat16*>(out.out) +
                                static_cast<int64_t>(tile.expert) * out.num_rows * out.num_cols +
                                static_cast<int64_t>(first_row) * out.num_cols;
#pragma unroll
    for (int pass = 0; pass < gemm::BLOCK_N / gemm::kStagingCols; ++pass) {
        const int col = tile.n_idx * gemm::BLOCK_N + pass * gemm::kStagingCols;
        stage_fragment<kGroupsPerPass>(
            staging, f, 0, [&](int i, int x) { return has_rows ? acc[(pass * kGroupsPerPass + i) * 4 + x] : 0.0f; });
        staging_barrier(wg);
        store_staged_rows(staging, thread_in_wg, 0, kChunksPerRow, out.num_cols - col, expert_out + col, out.num_cols,
                          [&](int row) -> int32_t { return row < rows_here ? row : -1; });
        staging_barrier(wg);
    }
}

// Accumulate mode: main_grad += the tile's sum, fp32, in place. Loads and stores go in batches of kBatch column
// groups: all of a batch's main_grad loads are issued before any of its stores, because the compiler cannot
// prove that a store does not alias a later load and would otherwise wait out a full memory latency for every
// pair of columns.
__device__ __forceinline__ void accumulate_weight_grad(const WeightGradOutput& out, const gemm::Tile& tile,
                                                       int row_begin, const float (&acc)[gemm::kNumAccumulators],
                                                       int wg, int thread_in_wg) {
    if (tile.num_rows == 0) {
        return;  // nothing to add; leaves main_grad's bits (and its signed zeros) untouched
    }
    constexpr int kGroups = gemm::BLOCK_N / 8;
    constexpr int kBatch = 16;
    const Fragment f = Fragment::of_thread(thread_in_wg);
    float* main_grad = static_cast<float*>(out.out) + static_cast<int64_t>(tile.expert) * out.num_rows * out.num_cols;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int row = row_begin + wg * gemm::WGMMA_M + f.row + half * 8;
        if (row >= out.num_rows) {
            continue;
        }
        float* row_grad = main_grad + static_cast<int64_t>(row) * out.num_cols;
#pragma unroll
        for (int batch = 0; batch < kGroups / kBatch; ++batch) {
            const int first_col = tile.n_idx * gemm::BLOCK_N + batch * kBatch * 8 + f.col;
            float2 old[kBatch];
#pragma unroll
            for (int i = 0; i < kBatch; ++i) {
                const int col = first_col + i * 8;
                old[i] =
                    col < out.num_cols ? *reinterpret_cast<const float2*>(row_grad + col) : make_float2(0.0f, 0.0f);
            }
#pragma unroll
            for (int i = 0; i < kBatch; ++i) {
                const int col = first_col + i * 8;
                const int group = batch * kBatch + i;
                if (col < out.num_cols) {
                    *reinterpret_cast<float2*>(row_grad + col) =
                        make_float2(fp32::add(old[i].x, acc[group * 4 + half * 2]),
                                    fp32::add(old[i].y, acc[group * 4 + half * 2 + 1]));
                }
            }
        }
    }
}

template <WeightGradMode kMode>
__device__ __forceinline__ void weight_grad_epilogue(const WeightGradOutput& out, const gemm::Tile& tile, int row_begin,
                                                     const float (&acc)[gemm::kNumAccumulators], int wg,
                                                     int thread_in_wg, uint8_t* staging) {
    if constexpr (kMode == WeightGradMode::kFresh) {
        store_fresh_weight_grad(out, tile, row_begin, acc, wg, thread_in_wg, staging);
    } else {
        accumulate_weight_grad(out, tile, row_begin, acc, wg, thread_in_wg);
    }
}

}  // namespace mok::epilogue
