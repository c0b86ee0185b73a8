// Down-projection dgrad epilogue: the accumulator holds dh' = W_d^T dy (unscaled) for 64 rows x 256 columns of
// I. Per element, with g, u the bf16 pre-activations saved by the forward and w the row's router weight:
//   dh' = bf16(dh')                             rounded where PyTorch's layer stores dh (docs/semantics.md)
//   h  = bf16(swiglu::forward(g, u))            exactly the forward's h
//   dw += dh' * h                               the router-weight gradient's partial over this tile's columns
//   dh = w * dh';  (dg, du) = swiglu::backward(g, u, dh), each rounded to bf16
// (docs/semantics.md sections 3 and 5). dw is correct for any w, zero included, because it never divides by w.
// The partial sums are deterministic: each thread sums its columns in order, then the four threads of a row
// combine by a fixed butterfly; one partial per (row, N tile) goes to global memory and a separate pass adds
// the tiles' partials in tile order (reduce_router_partials).
//
// Two ways to run it, with the same bits: in the consumer warpgroup from its accumulators (the cooperative and
// ping-pong arrangements, swiglu_backward_epilogue), or split (the epilogue-warps arrangement): the consumer stages
// bf16(dh') into its hand-off buffer and the producer warpgroup's spare warps run the SwiGLU backward from there
// (store_swiglu_backward) while the consumer runs its next K loop. Rounding dh' to bf16 is what lets it fit a
// hand-off buffer: in fp32 it would take 64 KiB per warpgroup, and with two of them no K loop's stages fit.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "common/bf16.hpp"
#include "common/fp32_ops.hpp"
#include "common/swiglu.hpp"
#include "device/epilogue/epilogue_context.cuh"
#include "device/epilogue/row_store_epilogue.cuh"
#include "device/epilogue/staging.cuh"
#include "device/gemm/gemm_config.cuh"
#include "device/ptx/cache.cuh"
#include "device/scheduler/gemm_tile_scheduler.cuh"

namespace mok::epilogue {

// Column groups per staging pass (dg and du side by side): small passes keep few g, u loads in flight, so the
// epilogue fits beside the 128 accumulator registers without spilling.
inline constexpr int kSwigluBackwardGroupsPerPass = 4;
// Accumulators one pass reads: four per column group (two rows x two columns per thread).
inline constexpr int kSwigluBackwardValuesPerPass = kSwigluBackwardGroupsPerPass * 4;
// A pass stages its dg groups then its du groups side by side: rows of 2 x 4 chunks, 128 bytes, so the staging tile
// takes 8 KiB, half of a warpgroup's staging buffer. The ping-pong kernel gives the freed shared memory to a fifth
// stage (pingpong_kernel.cuh).
inline constexpr int kSwigluBackwardStagingRowBytes = 2 * kSwigluBackwardGroupsPerPass * kChunkBytes;
inline constexpr int kSwigluBackwardStagingBytes = gemm::WGMMA_M * kSwigluBackwardStagingRowBytes;
static_assert(kSwigluBackwardStagingBytes <= gemm::kStagingBytesPerWarpgroup,
              "the pass's staging tile fits a warpgroup's staging buffer");

// The accumulators of pass `pass` (a run-time index), copied out with static register indices: acc must stay in
// registers, which a dynamic index into it would move to local memory.
__device__ __forceinline__ void select_pass_values(const float (&acc)[gemm::kNumAccumulators], int pass,
                                                   float (&out)[kSwigluBackwardValuesPerPass]) {
    constexpr int kPasses = gemm::kNumAccumulators / kSwigluBackwardValuesPerPass;
#pragma unroll
    for (int q = 0; q < kPasses; ++q) {
        if (q == pass) {
#pragma unroll
            for (int j = 0; j < kSwigluBackwardValuesPerPass; ++j) {
                out[j] = acc[q * kSwigluBackwardValuesPerPass + j];
            }
        }
    }
}

// The SwiGLU backward of two neighbouring columns of a row: dh holds bf16(dh') of both, g2 and u2 their
// pre-activations. Adds each column's dh' h to `partial` in column order and returns dg and du as bf16 pairs. Both
// ways of running the epilogue call this, so they cannot differ in arithmetic.
struct SwigluBackwardPair {
    uint32_t dg;  // bf16 x 2
    uint32_t du;  // bf16 x 2
};

__device__ __forceinline__ SwigluBackwardPair swiglu_backward_pair(__nv_bfloat162 g2, __nv_bfloat162 u2,
                                                                   const float (&dh)[2], float weight, float& partial) {
    const float g[2] = {__low2float(g2), __high2float(g2)};
    const float u[2] = {__low2float(u2), __high2float(u2)};
    float dg[2];
    float du[2];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
        const swiglu::Activation act = swiglu::activation(g[c]);
        const float h = round_to_bf16(swiglu::forward(u[c], act));
        partial = fp32::fma(dh[c], h, partial);
        const swiglu::Grads grads = swiglu::backward(g[c], u[c], fp32::mul(weight, dh[c]), act);
        dg[c] = grads.dg;
        du[c] = grads.du;
    }
    return {pack_bf16x2(dg[0], dg[1]), pack_bf16x2(du[0], du[1])};
}

struct SwigluBackwardOutputs {
    const __nv_bfloat16* gu;  // [rows, 2, I]  the forward's saved g and u
    const float* row_weight;  // [rows]        router weight of each row (1 for shared experts)
    __nv_bfloat16* dgu;       // [rows, 2, I]  dg at [row][0][:], du at [row][1][:]
    float* router_partials;   // [rows, num_n_tiles]  per-tile partial of d w
    int32_t num_n_tiles;
    int32_t width;  // I
};

__device__ __forceinline__ void swiglu_backward_epilogue(const SwigluBackwardOutputs& out, const gemm::Tile& tile,
                                                         const float (&acc)[gemm::kNumAccumulators], int row_half,
                                                         int thread_in_wg, const EpilogueContext& e) {
    constexpr int kGroups = gemm::BLOCK_N / 8;  // column groups of the accumulator
    constexpr int kGroupsPerPass = kSwigluBackwardGroupsPerPass;
    uint8_t* staging = e.staging;
    const Fragment f = Fragment::of_thread(thread_in_wg);
    const int first_row = tile.row_begin + row_half * gemm::WGMMA_M;
    const int rows_here = tile.num_rows - row_half * gemm::WGMMA_M;
    const int col_begin = tile.n_idx * gemm::BLOCK_N;
    const int64_t gu_stride = 2 * static_cast<int64_t>(out.width);

    bool row_valid[2];
    float weight[2];
    float partial[2] = {0.0f, 0.0f};
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int row = f.row + half * 8;
        row_valid[half] = row < rows_here;
        weight[half] = row_valid[half] ? out.row_weight[first_row + row] : 0.0f;
    }

    // Where each thread's L1 prefetch of a pass's g and u points: one (row, g or u) run of the pass's columns per
    // thread, 64 rows x 2 runs of 64 bytes for the 128 threads.
    const int prefetch_row = thread_in_wg / 2;
    const bool prefetch_row_valid = prefetch_row < rows_here;
    const __nv_bfloat16* prefetch_base =
        out.gu + (first_row + prefetch_row) * gu_stride + (thread_in_wg % 2) * out.width + col_begin;

    // The passes are a real loop, not unrolled: unrolled, the SwiGLU backward of all 128 values per thread
    // (two exponentials' and a division's worth of instructions each) made this form's code six times the size
    // of any other's, more than the instruction cache holds, and the kernel 1.5x slower (docs/gemm.md).
#pragma unroll 1
    for (int pass = 0; pass < kGroups / kGroupsPerPass; ++pass) {
        // The next pass's g and u start toward L1 now, so that its loads, issued after this pass's stores, find
        // them there instead of waiting out a memory round trip each pass: 1-2% on this form. Two passes ahead,
        // or the whole tile into L2 at the epilogue's start, lost 1-3.5% (docs/gemm.md).
        const int next_col = (pass + 1) * kGroupsPerPass * 8;
        if (pass + 1 < kGroups / kGroupsPerPass && prefetch_row_valid && col_begin + next_col < out.width) {
            ptx::prefetch_global_l1(prefetch_base + next_col);
        }
        float dh_values[kSwigluBackwardValuesPerPass];
        select_pass_values(acc, pass, dh_values);
        // The pass's g and u first, all loads in flight together: interleaved with the staging stores, each load
        // would wait for the store before it (the compiler cannot prove they do not alias).
        __nv_bfloat162 g2[kGroupsPerPass][2];
        __nv_bfloat162 u2[kGroupsPerPass][2];
#pragma unroll
        for (int i = 0; i < kGroupsPerPass; ++i) {
            const int col = col_begin + (pass * kGroupsPerPass + i) * 8 + f.col;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int row = f.row + half * 8;
                g2[i][half] = u2[i][half] = __floats2bfloat162_rn(0.0f, 0.0f);
                if (row_valid[half] && col < out.width) {
                    const __nv_bfloat16* src = out.gu + (first_row + row) * gu_stride + col;
                    g2[i][half] = *reinterpret_cast<const __nv_bfloat162*>(src);
                    u2[i][half] = *reinterpret_cast<const __nv_bfloat162*>(src + out.width);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < kGroupsPerPass; ++i) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int row = f.row + half * 8;
                const float dh[2] = {round_to_bf16(dh_values[i * 4 + half * 2]),
                                     round_to_bf16(dh_values[i * 4 + half * 2 + 1])};
                const SwigluBackwardPair d =
                    swiglu_backward_pair(g2[i][half], u2[i][half], dh, weight[half], partial[half]);
                constexpr int kRowBytes = kSwigluBackwardStagingRowBytes;
                *reinterpret_cast<uint32_t*>(staging + staging_offset<kRowBytes>(row, i) + f.col * gemm::kBf16Bytes) =
                    d.dg;
                *reinterpret_cast<uint32_t*>(staging + staging_offset<kRowBytes>(row, kGroupsPerPass + i) +
                                             f.col * gemm::kBf16Bytes) = d.du;
            }
        }
        staging_barrier(e.warpgroup);
        const int col = col_begin + pass * kGroupsPerPass * 8;
        for (int which = 0; which < 2; ++which) {
            store_staged_rows<gemm::kThreadsPerWarpgroup, kSwigluBackwardStagingRowBytes>(
                staging, thread_in_wg, which * kGroupsPerPass, (which + 1) * kGroupsPerPass, out.width - col,
                out.dgu + which * out.width + col, gu_stride,
                [&](int row) -> int32_t { return row < rows_here ? first_row + row : -1; });
        }
        staging_barrier(e.warpgroup);
    }

    // The four lanes that share a row hold disjoint columns: combine them in a fixed order.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        partial[half] = fp32::add(partial[half], __shfl_xor_sync(0xffffffffu, partial[half], 1));
        partial[half] = fp32::add(partial[half], __shfl_xor_sync(0xffffffffu, partial[half], 2));
        if (f.col == 0 && row_valid[half]) {
            const int row = first_row + f.row + half * 8;
            out.router_partials[static_cast<int64_t>(row) * out.num_n_tiles + tile.n_idx] = partial[half];
        }
    }
}

// The epilogue split between roles (the epilogue-warps arrangement). The consumer stages bf16(dh') into its hand-off
// buffer as the row-store epilogue stages its rows (two 64 x 128 passes of swizzled 16-byte chunks); pack_bf16x2
// rounds as round_to_bf16 does, so the staged values are the dh' the consumers' own epilogue uses.
inline constexpr int kSwigluBackwardHandoffBytes = kRowStoreHandoffBytes;

__device__ __forceinline__ void stage_swiglu_backward(uint8_t* buffer, const float (&acc)[gemm::kNumAccumulators],
                                                      int thread_in_wg) {
    stage_row_store(buffer, acc, thread_in_wg);
}

// Column pairs per group of eight columns: the four lanes of the accumulator layout that share a row.
inline constexpr int kSwigluBackwardColumnPairs = 4;
// Column groups per step of the epilogue threads' loop: a step's g, u and dh' are loaded while the step before it
// computes, two groups' worth: four spilled under the producer warpgroup's 72 registers.
inline constexpr int kSwigluBackwardGroupsPerStep = 2;

// The kThreads epilogue threads run the SwiGLU backward of rows [64 row_half, 64 row_half + 64) of the tile from
// the hand-off buffer, while the consumer runs its next K loop. A thread takes (row, column pair) items: pair p of
// a row is columns 8 i + 2 p and 8 i + 2 p + 1 of every column group i, the columns the consumer's lane 4 r + p
// holds, so its partial sums those columns in the consumer's order, and the four pairs of a row, which sit in
// neighbouring lanes (item = 4 row + pair, kThreads a multiple of 32), combine by the consumer's butterfly. The
// bits are therefore those of swiglu_backward_epilogue. g, u, dg and du move 4 bytes per thread and column group;
// a row's four pairs make them 16-byte runs, and L1 holds a run's line for the next groups.
template <int kThreads>
__device__ __forceinline__ void store_swiglu_backward(const SwigluBackwardOutputs& out, const gemm::Tile& tile,
                                                      const uint8_t* buffer, int row_half, int thread) {
    constexpr int kPairs = kSwigluBackwardColumnPairs;
    constexpr int kItems = gemm::WGMMA_M * kPairs;
    constexpr int kStep = kSwigluBackwardGroupsPerStep;
    constexpr int kSteps = gemm::BLOCK_N / 8 / kStep;
    constexpr int kLineBytes = 128;
    constexpr int kLinesPerRun = gemm::BLOCK_N * gemm::kBf16Bytes / kLineBytes;  // of a row's g (or u) columns
    static_assert(kThreads % 32 == 0 && 32 % kPairs == 0, "a row's items sit in one warp's neighbouring lanes");
    static_assert(kRowStoreGroupsPerPass % kStep == 0, "a step's groups lie in one staged pass");
    const int first_row = tile.row_begin + row_half * gemm::WGMMA_M;
    const int rows_here = tile.num_rows - row_half * gemm::WGMMA_M;
    const int col_begin = tile.n_idx * gemm::BLOCK_N;
    const int cols_here = out.width - col_begin;
    const int64_t gu_stride = 2 * static_cast<int64_t>(out.width);

    // The row half's g and u toward L2 first (64 rows x 2 runs x 4 lines): the first touch of them comes from
    // memory, and a step's loads otherwise wait out that round trip each time.
    for (int line = thread; line < gemm::WGMMA_M * 2 * kLinesPerRun; line += kThreads) {
        const int row = line / (2 * kLinesPerRun);
        const int run = line % (2 * kLinesPerRun);
        const int col = (run % kLinesPerRun) * (kLineBytes / gemm::kBf16Bytes);
        if (row < rows_here && col < cols_here) {
            ptx::prefetch_global_l2(out.gu + (first_row + row) * gu_stride + (run / kLinesPerRun) * out.width +
                                    col_begin + col);
        }
    }

    struct StepOperands {
        __nv_bfloat162 g[kStep];
        __nv_bfloat162 u[kStep];
        uint32_t dh[kStep];  // bf16(dh') x 2, as staged
    };

    // Every thread runs the same number of rounds, so the butterfly below finds all lanes of each warp.
#pragma unroll 1
    for (int first = 0; first < kItems; first += kThreads) {
        const int item = first + thread;
        const int row = item / kPairs;
        const int pair = item % kPairs;
        const bool row_valid = item < kItems && row < rows_here;
        float partial = 0.0f;
        if (row_valid) {
            const float weight = out.row_weight[first_row + row];
            const __nv_bfloat16* gu_row = out.gu + (first_row + row) * gu_stride + col_begin + 2 * pair;
            __nv_bfloat16* dgu_row = out.dgu + (first_row + row) * gu_stride + col_begin + 2 * pair;
            auto load_step = [&](int step) {
                StepOperands o;
#pragma unroll
                for (int i = 0; i < kStep; ++i) {
                    const int group = step * kStep + i;
                    const int col = group * 8 + 2 * pair;
                    o.g[i] = o.u[i] = __floats2bfloat162_rn(0.0f, 0.0f);
                    if (col < cols_here) {
                        o.g[i] = *reinterpret_cast<const __nv_bfloat162*>(gu_row + group * 8);
                        o.u[i] = *reinterpret_cast<const __nv_bfloat162*>(gu_row + out.width + group * 8);
                    }
                    const uint8_t* pass = buffer + (group / kRowStoreGroupsPerPass) * gemm::kStagingBytesPerWarpgroup;
                    o.dh[i] = *reinterpret_cast<const uint32_t*>(
                        pass + staging_offset(row, group % kRowStoreGroupsPerPass) + pair * 2 * gemm::kBf16Bytes);
                }
                return o;
            };
            StepOperands next = load_step(0);
#pragma unroll 1
            for (int step = 0; step < kSteps; ++step) {
                const StepOperands now = next;
                if (step + 1 < kSteps) {
                    next = load_step(step + 1);
                }
#pragma unroll
                for (int i = 0; i < kStep; ++i) {
                    const int group = step * kStep + i;
                    __nv_bfloat162 dh2;
                    *reinterpret_cast<uint32_t*>(&dh2) = now.dh[i];
                    const float dh[2] = {__low2float(dh2), __high2float(dh2)};
                    const SwigluBackwardPair d = swiglu_backward_pair(now.g[i], now.u[i], dh, weight, partial);
                    if (group * 8 + 2 * pair < cols_here) {
                        *reinterpret_cast<uint32_t*>(dgu_row + group * 8) = d.dg;
                        *reinterpret_cast<uint32_t*>(dgu_row + out.width + group * 8) = d.du;
                    }
                }
            }
        }
        // The consumer's butterfly over the row's four pairs.
        partial = fp32::add(partial, __shfl_xor_sync(0xffffffffu, partial, 1));
        partial = fp32::add(partial, __shfl_xor_sync(0xffffffffu, partial, 2));
        if (pair == 0 && row_valid) {
            out.router_partials[static_cast<int64_t>(first_row + row) * out.num_n_tiles + tile.n_idx] = partial;
        }
    }
}

}  // namespace mok::epilogue
