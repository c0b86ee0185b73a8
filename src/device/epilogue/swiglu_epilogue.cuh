// Gate/up epilogue: the accumulator holds 128 gate columns (registers 0-63) and the matching 128 up columns
// (registers 64-127) of one N tile. Writes g and u rounded to bf16 (saved for the backward) and
// h = bf16(swiglu::forward(g_bf16, u_bf16)), the down projection's input (docs/semantics.md section 5).
// Staging rounds g and u to bf16 (pack_bf16x2 rounds to nearest even, as round_to_bf16 does).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "common/bf16.hpp"
#include "common/swiglu.hpp"
#include "device/epilogue/epilogue_context.cuh"
#include "device/epilogue/staging.cuh"
#include "device/epilogue/swiglu_activations.cuh"
#include "device/gemm/gemm_config.cuh"
#include "device/scheduler/gemm_tile_scheduler.cuh"

namespace mok::epilogue {

struct SwigluOutputs {
    __nv_bfloat16* gu;  // [rows, 2, I]: g at [row][0][:], u at [row][1][:]
    __nv_bfloat16* h;   // [rows, I]
    int32_t width;      // I
};

// Column groups of 8 per gate (or up) half of the accumulator, and per 64-column quarter.
inline constexpr int kGroupsPerHalf = gemm::BLOCK_N / 2 / 8;
inline constexpr int kGroupsPerQuarter = kGroupsPerHalf / 2;

// Quarters of the accumulator: 64 gate columns and their 64 up partners, one staging tile (64 x 128 bf16) each.
inline constexpr int kSwigluQuarters = 2;

// Stages quarter `quarter` of the warpgroup's accumulator as bf16: g in staging columns 0-63, u in 64-127.
__device__ __forceinline__ void stage_swiglu_quarter(uint8_t* staging, const Fragment& f,
                                                     const float (&acc)[gemm::kNumAccumulators], int quarter) {
    const int q = quarter * kGroupsPerQuarter;
    stage_fragment<kGroupsPerQuarter>(staging, f, 0, [&](int i, int x) { return acc[(q + i) * 4 + x]; });
    stage_fragment<kGroupsPerQuarter>(staging, f, kGroupsPerQuarter,
                                      [&](int i, int x) { return acc[(q + kGroupsPerHalf + i) * 4 + x]; });
}

// Values of a chunk whose activations are computed as one straight-line batch (swiglu_activations.cuh): all eight
// spill in the epilogue warps at their 72 registers.
inline constexpr int kSwigluActivationBatch = 4;

// Stores a staged quarter of rows [64 row_half, 64 row_half + 64) of the tile: each of `num_threads` threads
// (`thread` is the caller's index among them) takes 16-byte chunks of g and u, stores them to gu, and computes the
// eight matching h values from the staged bf16 -- the values the contract says h is computed from -- storing them
// to h.
__device__ __forceinline__ void store_swiglu_quarter(const SwigluOutputs& out, const gemm::Tile& tile,
                                                     const uint8_t* staging, int row_half, int quarter, int thread,
                                                     int num_threads) {
    const int first_row = tile.row_begin + row_half * gemm::WGMMA_M;
    const int rows_here = tile.num_rows - row_half * gemm::WGMMA_M;  // rows of this half that hold data
    const int64_t gu_stride = 2 * static_cast<int64_t>(out.width);
    const int col = tile.n_idx * (gemm::BLOCK_N / 2) + quarter * kGroupsPerQuarter * 8;
    constexpr int kItems = gemm::WGMMA_M * kGroupsPerQuarter;
    for (int item = thread; item < kItems; item += num_threads) {
        const int row = item / kGroupsPerQuarter;
        const int chunk = item % kGroupsPerQuarter;
        const int chunk_col = col + chunk * kElementsPerChunk;
        if (row >= rows_here || chunk_col >= out.width) {
            continue;
        }
        const uint4 g = *reinterpret_cast<const uint4*>(staging + staging_offset(row, chunk));
        const uint4 u = *reinterpret_cast<const uint4*>(staging + staging_offset(row, kGroupsPerQuarter + chunk));
        const int64_t r = first_row + row;
        *reinterpret_cast<uint4*>(out.gu + r * gu_stride + chunk_col) = g;
        *reinterpret_cast<uint4*>(out.gu + r * gu_stride + out.width + chunk_col) = u;
        float gf[kElementsPerChunk];
        float uf[kElementsPerChunk];
        unpack_bf16_pairs<kElementsPerChunk / 2>(reinterpret_cast<const __nv_bfloat162*>(&g), gf);
        unpack_bf16_pairs<kElementsPerChunk / 2>(reinterpret_cast<const __nv_bfloat162*>(&u), uf);
        uint4 h;
        uint32_t* h_words = reinterpret_cast<uint32_t*>(&h);
#pragma unroll
        for (int first = 0; first < kElementsPerChunk; first += kSwigluActivationBatch) {
            swiglu::Activation act[kSwigluActivationBatch];
            swiglu_activations<kSwigluActivationBatch>(gf + first, act);
#pragma unroll
            for (int i = 0; i < kSwigluActivationBatch; i += 2) {
                h_words[(first + i) / 2] =
                    pack_bf16x2(swiglu::forward(uf[first + i], act[i]), swiglu::forward(uf[first + i + 1], act[i + 1]));
            }
        }
        *reinterpret_cast<uint4*>(out.h + r * out.width + chunk_col) = h;
    }
}

// The whole epilogue in the consumer warpgroup (the cooperative and ping-pong arrangements): a quarter at a time
// through the warpgroup's staging buffer. Once a quarter is staged its accumulator registers are dead, which keeps
// the epilogue's register footprint close to the accumulator's.
__device__ __forceinline__ void swiglu_epilogue(const SwigluOutputs& out, const gemm::Tile& tile,
                                                const float (&acc)[gemm::kNumAccumulators], int row_half,
                                                int thread_in_wg, const EpilogueContext& e) {
    const Fragment f = Fragment::of_thread(thread_in_wg);
#pragma unroll
    for (int quarter = 0; quarter < kSwigluQuarters; ++quarter) {
        stage_swiglu_quarter(e.staging, f, acc, quarter);
        staging_barrier(e.warpgroup);
        store_swiglu_quarter(out, tile, e.staging, row_half, quarter, thread_in_wg, gemm::kThreadsPerWarpgroup);
        staging_barrier(e.warpgroup);
    }
}

// The epilogue split between roles (the epilogue-warps arrangement): the consumer stages both quarters into its
// hand-off buffer, kSwigluQuarters staging tiles ...
inline constexpr int kSwigluHandoffBytes = kSwigluQuarters * gemm::kStagingBytesPerWarpgroup;

__device__ __forceinline__ void stage_swiglu(uint8_t* buffer, const float (&acc)[gemm::kNumAccumulators],
                                             int thread_in_wg) {
    const Fragment f = Fragment::of_thread(thread_in_wg);
#pragma unroll
    for (int quarter = 0; quarter < kSwigluQuarters; ++quarter) {
        stage_swiglu_quarter(buffer + quarter * gemm::kStagingBytesPerWarpgroup, f, acc, quarter);
    }
}

// ... and `num_threads` epilogue threads store them, with h, while the consumer runs its next K loop.
__device__ __forceinline__ void store_swiglu(const SwigluOutputs& out, const gemm::Tile& tile, const uint8_t* buffer,
                                             int row_half, int thread, int num_threads) {
#pragma unroll 1
    for (int quarter = 0; quarter < kSwigluQuarters; ++quarter) {
        store_swiglu_quarter(out, tile, buffer + quarter * gemm::kStagingBytesPerWarpgroup, row_half, quarter, thread,
                             num_threads);
    }
}

}  // namespace mok::epilogue
