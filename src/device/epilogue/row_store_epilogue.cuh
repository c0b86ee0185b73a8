// Row-store epilogue: the accumulator rounded to bf16 and stored row by row, each row either in place, scattered
// through a row map, or sent to the rank that owns the row's token (its combine row for the (token, slot); the
// plan's RowSource names both). Padding rows and rows whose map entry is negative are not stored.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "device/epilogue/epilogue_context.cuh"
#include "device/epilogue/staging.cuh"
#include "device/gemm/gemm_config.cuh"
#include "device/scheduler/gemm_tile_scheduler.cuh"
#include "plan/routing_plan.hpp"

namespace mok::epilogue {

struct RowStoreOutput {
    __nv_bfloat16* out;      // rows of `ld` elements
    int64_t ld;              // elements between consecutive output rows
    const int32_t* row_map;  // [rows] destination row of each row, or nullptr for row -> row; < 0 skips the row
    int32_t num_cols;        // N: valid columns
    // Rows sent to their tokens' ranks, in place of out and row_map when `sources` is set: row r goes to
    // rank_rows[s.src_rank] + s.token_slot * ld for s = sources[r]; padding rows are skipped.
    const plan::RowSource* sources = nullptr;   // [rows] the plan's row sources
    __nv_bfloat16* const* rank_rows = nullptr;  // [R] each rank's combine rows, as this GPU addresses them
};

// Where row `row` of the row space is stored, column `col` (nullptr: not stored).
__device__ __forceinline__ __nv_bfloat16* row_store_destination(const RowStoreOutput& out, int row, int col) {
    if (out.sources != nullptr) {
        const plan::RowSource s = out.sources[row];
        return s.is_padding() ? nullptr : out.rank_rows[s.src_rank] + s.token_slot * out.ld + col;
    }
    const int32_t dest = out.row_map != nullptr ? out.row_map[row] : row;
    return dest < 0 ? nullptr : out.out + dest * out.ld + col;
}

// Two passes of kStagingCols columns cover the accumulator's BLOCK_N.
inline constexpr int kRowStorePasses = gemm::BLOCK_N / gemm::kStagingCols;
inline constexpr int kRowStoreGroupsPerPass = gemm::kStagingCols / 8;

// Stages pass `pass` of the warpgroup's accumulator, rounded to bf16.
__device__ __forceinline__ void stage_row_store_pass(uint8_t* staging, const Fragment& f,
                                                     const float (&acc)[gemm::kNumAccumulators], int pass) {
    constexpr int kHalf = kRowStoreGroupsPerPass / 2;
    const int first = pass * kRowStoreGroupsPerPass;
    stage_fragment<kHalf>(staging, f, 0, [&](int i, int x) { return acc[(first + i) * 4 + x]; });
    stage_fragment<kHalf>(staging, f, kHalf, [&](int i, int x) { return acc[(first + kHalf + i) * 4 + x]; });
}

// Stores a staged pass of rows [64 row_half, 64 row_half + 64) of the tile; `thread` is the caller's index among
// the kThreads threads that store.
template <int kThreads>
__device__ __forceinline__ void store_row_store_pass(const RowStoreOutput& out, const gemm::Tile& tile,
                                                     const uint8_t* staging, int row_half, int pass, int thread) {
    const int first_row = tile.row_begin + row_half * gemm::WGMMA_M;
    const int rows_here = tile.num_rows - row_half * gemm::WGMMA_M;
    const int col = tile.n_idx * gemm::BLOCK_N + pass * gemm::kStagingCols;
    if (out.sources != nullptr) {
        // Rows in other ranks' buffers: an address per row.
        store_staged_rows_at<kThreads>(
            staging, thread, 0, kChunksPerRow, out.num_cols - col, [&](int row) -> __nv_bfloat16* {
                return row < rows_here ? row_store_destination(out, first_row + row, col) : nullptr;
            });
        return;
    }
    store_staged_rows<kThreads>(staging, thread, 0, kChunksPerRow, out.num_cols - col, out.out + col, out.ld,
                                [&](int row) -> int32_t {
                                    if (row >= rows_here) {
                                        return -1;
                                    }
                                    return out.row_map != nullptr ? out.row_map[first_row + row] : first_row + row;
                                });
}

// The whole epilogue in the consumer warpgroup, a pass at a time through its staging buffer.
__device__ __forceinline__ void row_store_epilogue(const RowStoreOutput& out, const gemm::Tile& tile,
                                                   const float (&acc)[gemm::kNumAccumulators], int row_half,
                                                   int thread_in_wg, const EpilogueContext& e) {
    const Fragment f = Fragment::of_thread(thread_in_wg);
#pragma unroll
    for (int pass = 0; pass < kRowStorePasses; ++pass) {
        stage_row_store_pass(e.staging, f, acc, pass);
        staging_barrier(e.warpgroup);
        store_row_store_pass<gemm::kThreadsPerWarpgroup>(out, tile, e.staging, row_half, pass, thread_in_wg);
        staging_barrier(e.warpgroup);
    }
}

// The epilogue split between roles (the epilogue-warps arrangement): the consumer stages both passes into its
// hand-off buffer ...
inline constexpr int kRowStoreHandoffBytes = kRowStorePasses * gemm::kStagingBytesPerWarpgroup;

__device__ __forceinline__ void stage_row_store(uint8_t* buffer, const float (&acc)[gemm::kNumAccumulators],
                                                int thread_in_wg) {
    const Fragment f = Fragment::of_thread(thread_in_wg);
#pragma unroll
    for (int pass = 0; pass < kRowStorePasses; ++pass) {
        stage_row_store_pass(buffer + pass * gemm::kStagingBytesPerWarpgroup, f, acc, pass);
    }
}

// ... and the kThreads epilogue threads store them while the consumer runs its next K loop.
template <int kThreads>
__device__ __forceinline__ void store_row_store(const RowStoreOutput& out, const gemm::Tile& tile,
                                                const uint8_t* buffer, int row_half, int thread) {
#pragma unroll 1
    for (int pass = 0; pass < kRowStorePasses; ++pass) {
        store_row_store_pass<kThreads>(out, tile, buffer + pass * gemm::kStagingBytesPerWarpgroup, row_half, pass,
                                       thread);
    }
}

// With the rows' destinations resolved ahead (the down projection, whose rows may go to their sources): behind the
// staged rows the hand-off buffer holds the 64 rows' destinations, which the epilogue threads resolve before the
// hand-off arrives (resolve_row_destinations). Looked up while storing, each batch of stores would wait for the
// plan's (or a row map's) loads first, which made the epilogue longer than a short K loop.
inline constexpr int kRowDestinationBytes = gemm::WGMMA_M * static_cast<int>(sizeof(__nv_bfloat16*));
inline constexpr int kResolvedRowStoreHandoffBytes = kRowStoreHandoffBytes + kRowDestinationBytes;

// Whether rows' destinations are loads (a row map, the plan's row sources), which the epilogue threads resolve
// ahead; in place, they are arithmetic.
__device__ __forceinline__ bool resolves_row_destinations(const RowStoreOutput& out) {
    return out.sources != nullptr || out.row_map != nullptr;
}

// The epilogue threads, before waiting for the hand-off of rows [64 row_half, 64 row_half + 64) of the tile: each
// row's destination (column 0; nullptr: not stored) into the buffer's tail, which the consumer does not write.
template <int kThreads>
__device__ __forceinline__ void resolve_row_destinations(const RowStoreOutput& out, const gemm::Tile& tile,
                                                         uint8_t* buffer, int row_half, int thread) {
    auto* dest = reinterpret_cast<__nv_bfloat16**>(buffer + kRowStoreHandoffBytes);
    const int first_row = tile.row_begin + row_half * gemm::WGMMA_M;
    const int rows_here = tile.num_rows - row_half * gemm::WGMMA_M;
    for (int row = thread; row < gemm::WGMMA_M; row += kThreads) {
        dest[row] = row < rows_here ? row_store_destination(out, first_row + row, 0) : nullptr;
    }
}

// store_row_store through the resolved destinations, where there are any.
template <int kThreads>
__device__ __forceinline__ void store_resolved_row_store(const RowStoreOutput& out, const gemm::Tile& tile,
                                                         const uint8_t* buffer, int row_half, int thread) {
    if (!resolves_row_destinations(out)) {
        store_row_store<kThreads>(out, tile, buffer, row_half, thread);
        return;
    }
    const auto* dest = reinterpret_cast<__nv_bfloat16* const*>(buffer + kRowStoreHandoffBytes);
#pragma unroll 1
    for (int pass = 0; pass < kRowStorePasses; ++pass) {
        const int col = tile.n_idx * gemm::BLOCK_N + pass * gemm::kStagingCols;
        store_staged_rows_at<kThreads>(buffer + pass * gemm::kStagingBytesPerWarpgroup, thread, 0, kChunksPerRow,
                                       out.num_cols - col, [&](int row) -> __nv_bfloat16* {
                                           __nv_bfloat16* d = dest[row];
                                           return d != nullptr ? d + col : nullptr;
                                       });
    }
}

}  // namespace mok::epilogue
