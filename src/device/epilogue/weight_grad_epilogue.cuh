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
__device__ __forceinline__ void weight_grad_epilogue(const WeightGradOutput& out, const gemm::Tile& tile,
                                                     int row_begin, const float (&acc)[gemm::kNumAccumulators],
                                                     int wg, int thread_in_wg) {
    if constexpr (kMode == WeightGradMode::kAccumulate) {
        if (tile.num_rows == 0) {
            return;  // nothing to add; leaves main_grad's bits (and its signed zeros) untouched
        }
    }
    const Fragment f = Fragment::of_thread(thread_in_wg);
    const int64_t expert_offset = static_cast<int64_t>(tile.expert) * out.num_rows * out.num_cols;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int row = row_begin + wg * gemm::WGMMA_M + f.row + half * 8;
        if (row >= out.num_rows) {
            continue;
        }
        const int64_t row_offset = expert_offset + static_cast<int64_t>(row) * out.num_cols;
#pragma unroll
        for (int group = 0; group < gemm::BLOCK_N / 8; ++group) {
            const int col = tile.n_idx * gemm::BLOCK_N + group * 8 + f.col;
            if (col >= out.num_cols) {
                continue;
            }
            // An expert with no rows never ran the K loop: its gradient is zero, whatever the registers hold.
            const float v0 = tile.num_rows > 0 ? acc[group * 4 + half * 2] : 0.0f;
            const float v1 = tile.num_rows > 0 ? acc[group * 4 + half * 2 + 1] : 0.0f;
            if constexpr (kMode == WeightGradMode::kFresh) {
                auto* dst = static_cast<__nv_bfloat16*>(out.out) + row_offset + col;
                *reinterpret_cast<uint32_t*>(dst) = pack_bf16x2(v0, v1);
            } else {
                auto* dst = reinterpret_cast<float2*>(static_cast<float*>(out.out) + row_offset + col);
                const float2 old = *dst;
                *dst = make_float2(fp32::add(old.x, v0), fp32::add(old.y, v1));
            }
        }
    }
}

}  // namespace mok::epilogue
