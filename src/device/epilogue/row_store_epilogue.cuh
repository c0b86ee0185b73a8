// Row-store epilogue: the accumulator rounded to bf16 and stored row by row, each row either in place or
// scattered through a row map (the combine's destination of each (token, slot) row). Padding rows and rows
// whose map entry is negative are not stored.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "device/epilogue/epilogue_context.cuh"
#include "device/epilogue/staging.cuh"
#include "device/gemm/gemm_config.cuh"
#include "device/scheduler/gemm_tile_scheduler.cuh"

namespace mok::epilogue {

struct RowStoreOutput {
    __nv_bfloat16* out;      // rows of `ld` elements
    int64_t ld;              // elements between consecutive output rows
    const int32_t* row_map;  // [rows] destination row of each row, or nullptr for row -> row; < 0 skips the row
    int32_t num_cols;        // N: valid columns
};

__device__ __forceinline__ void row_store_epilogue(const RowStoreOutput& out, const gemm::Tile& tile,
                                                   const float (&acc)[gemm::kNumAccumulators], int row_half,
                                                   int thread_in_wg, const EpilogueContext& e) {
    constexpr int kGroupsPerPass = gemm::kStagingCols / 8;
    uint8_t* staging = e.staging;
    const Fragment f = Fragment::of_thread(thread_in_wg);
    const int first_row = tile.row_begin + row_half * gemm::WGMMA_M;
    const int rows_here = tile.num_rows - row_half * gemm::WGMMA_M;
#pragma unroll
    for (int pass = 0; pass < gemm::BLOCK_N / gemm::kStagingCols; ++pass) {
        const int col = tile.n_idx * gemm::BLOCK_N + pass * gemm::kStagingCols;
        stage_fragment<kGroupsPerPass>(staging, f, 0,
                                       [&](int i, int x) { return acc[(pass * kGroupsPerPass + i) * 4 + x]; });
        staging_barrier(e.warpgroup);
        store_staged_rows(staging, thread_in_wg, 0, kChunksPerRow, out.num_cols - col, out.out + col, out.ld,
                          [&](int row) -> int32_t {
                              if (row >= rows_here) {
                                  return -1;
                              }
                              return out.row_map != nullptr ? out.row_map[first_row + row] : first_row + row;
                          });
        staging_barrier(e.warpgroup);
    }
}

}  // namespace mok::epilogue
