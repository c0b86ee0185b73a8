// Weight-gradient epilogue: one (output-row tile, output-column tile) of dW_e, the full fp32 sum over the
// expert's rows, written once by the one CTA that owns the tile -- no split-K, no atomics. Fresh mode rounds
// it to bf16; accumulate mode adds it to the fp32 main_grad in place (docs/semantics.md section 6).
// Stores go straight from registers: a weight-gradient tile is written once per full pass over the expert's
// rows, so its store cost is negligible next to the K loop.
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

template <WeightGradMode kMode>
__device__ __forceinline__ void weight_grad_epilogue(const WeightGradOutput& out, const gemm::Tile& tile, int row_begin,
                                                     const float (&acc)[gemm::kNumAccumulators], int wg,
                                                     int thread_in_wg) {
    if constexpr (kMode == WeightGradMode::kAccumulate) {
        if (tile.num_rows == 0) {
            return;  // nothing to add; leaves main_grad's bits (and its signed zeros) untouched
        }
    }
    // Loads and stores go in batches of kBatch column groups: all of a batch's main_grad loads are issued before
    // any of its stores, because the compiler cannot prove that a store does not alias a later load and would
    // otherwise wait out a full memory latency for every pair of columns.
    constexpr int kGroups = gemm::BLOCK_N / 8;
    constexpr int kBatch = 16;
    const Fragment f = Fragment::of_thread(thread_in_wg);
    const int64_t expert_offset = static_cast<int64_t>(tile.expert) * out.num_rows * out.num_cols;
    const bool has_rows = tile.num_rows > 0;  // an expert with no rows never ran the K loop: its gradient is 0
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int row = row_begin + wg * gemm::WGMMA_M + f.row + half * 8;
        if (row >= out.num_rows) {
            continue;
        }
        const int64_t row_offset = expert_offset + static_cast<int64_t>(row) * out.num_cols;
#pragma unroll
        for (int batch = 0; batch < kGroups / kBatch; ++batch) {
            float2 value[kBatch];
#pragma unroll
            for (int i = 0; i < kBatch; ++i) {
                const int group = batch * kBatch + i;
                value[i] = has_rows ? make_float2(acc[group * 4 + half * 2], acc[group * 4 + half * 2 + 1])
                                    : make_float2(0.0f, 0.0f);
            }
            const int first_col = tile.n_idx * gemm::BLOCK_N + batch * kBatch * 8 + f.col;
            if constexpr (kMode == WeightGradMode::kAccumulate) {
                float2 old[kBatch];
#pragma unroll
                for (int i = 0; i < kBatch; ++i) {
                    const int col = first_col + i * 8;
                    old[i] =
                        col < out.num_cols
                            ? *reinterpret_cast<const float2*>(static_cast<const float*>(out.out) + row_offset + col)
                            : make_float2(0.0f, 0.0f);
                }
#pragma unroll
                for (int i = 0; i < kBatch; ++i) {
                    value[i] = make_float2(fp32::add(old[i].x, value[i].x), fp32::add(old[i].y, value[i].y));
                }
            }
#pragma unroll
            for (int i = 0; i < kBatch; ++i) {
                const int col = first_col + i * 8;
                if (col >= out.num_cols) {
                    continue;
                }
                if constexpr (kMode == WeightGradMode::kFresh) {
                    *reinterpret_cast<uint32_t*>(static_cast<__nv_bfloat16*>(out.out) + row_offset + col) =
                        pack_bf16x2(value[i].x, value[i].y);
                } else {
                    *reinterpret_cast<float2*>(static_cast<float*>(out.out) + row_offset + col) = value[i];
                }
            }
        }
    }
}

}  // namespace mok::epilogue
