// Down-projection dgrad epilogue: the accumulator holds dh' = W_d^T dy (unscaled) for 64 rows x 256 columns of
// I. Per element, with g, u the bf16 pre-activations saved by the forward and w the row's router weight:
//   dh' = bf16(dh')                             rounded where PyTorch's layer stores dh (docs/semantics.md)
//   h  = bf16(swiglu::forward(g, u))            exactly the forward's h
//   dw += dh' * h                               the router-weight gradient's partial over this tile's columns
//   dh = w * dh';  (dg, du) = swiglu::backward(g, u, dh), each rounded to bf16
// (docs/semantics.md sections 3 and 5). dw is correct for any w, zero included, because it never divides by w.
//
// The router-weight partial of a (row, N tile) has one order, whoever computes it (docs/semantics.md, section 6):
// column pair p of column group i (columns 8 i + 2 p and 8 i + 2 p + 1) gives the leaf
// fma(dh'_b, h_b, fma(dh'_a, h_a, 0)); each block of four groups (32 columns) adds a pair's leaves as
// (0 + 1) + (2 + 3); the tile's eight blocks add in order; the four pairs' sums combine as (0 + 1) + (2 + 3). Both
// layouts that compute it reach that order cheaply: a consumer lane holds one pair of every group, so it adds a
// block per pass in registers and the lanes of a row combine by a butterfly; an epilogue-warps lane holds all four
// pairs of one group, so a block is a butterfly over four lanes and the blocks' sums are broadcast from their first
// lanes. One partial per (row, N tile) goes to global memory and a separate pass adds the tiles' partials in tile
// order (reduce_router_partials).
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
#include "device/common/warp.cuh"
#include "device/epilogue/epilogue_context.cuh"
#include "device/epilogue/row_store_epilogue.cuh"
#include "device/epilogue/staging.cuh"
#include "device/epilogue/swiglu_activations.cuh"
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

// The SwiGLU backward of two neighbouring columns a, a + 1 of a row: dh holds bf16(dh') of both, g and u their
// pre-activations, act their swiglu::activation (computed for several pairs at once by swiglu_activations). Returns
// dg and du as bf16 pairs and the pair's router-partial leaf, fma(dh'_b, h_b, fma(dh'_a, h_a, 0)). Both ways of
// running the epilogue call this, so they cannot differ in arithmetic.
struct SwigluBackwardPair {
    uint32_t dg;  // bf16 x 2
    uint32_t du;  // bf16 x 2
    float leaf;
};

__device__ __forceinline__ SwigluBackwardPair swiglu_backward_pair(const float* g, const float* u,
                                                                   const swiglu::Activation* act, const float (&dh)[2],
                                                                   float weight) {
    float dg[2];
    float du[2];
    float leaf = 0.0f;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
        const float h = round_to_bf16(swiglu::forward(u[c], act[c]));
        leaf = fp32::fma(dh[c], h, leaf);
        const swiglu::Grads grads = swiglu::backward(g[c], u[c], fp32::mul(weight, dh[c]), act[c]);
        dg[c] = grads.dg;
        du[c] = grads.du;
    }
    return {pack_bf16x2(dg[0], dg[1]), pack_bf16x2(du[0], du[1]), leaf};
}

// The router partial's blocks: four column groups (32 columns), one staging pass of the consumers' epilogue.
inline constexpr int kRouterBlockGroups = 4;
static_assert(kSwigluBackwardGroupsPerPass == kRouterBlockGroups, "a consumer pass covers one router block");

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
    float partial[2];  // the router partial of each of the thread's two rows, block by block
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
        // The pass's block, (0 + 1) + (2 + 3) over its groups, gathered as the leaves come, which keeps two
        // registers per row live instead of four.
        float pair_sum[2][2];
#pragma unroll
        for (int i = 0; i < kGroupsPerPass; ++i) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int row = f.row + half * 8;
                // The pair's two activations as one batch; the group's four spilled in the cooperative kernel.
                float g[2];
                float u[2];
                unpack_bf16_pairs<1>(&g2[i][half], g);
                unpack_bf16_pairs<1>(&u2[i][half], u);
                swiglu::Activation act[2];
                swiglu_activations<2>(g, act);
                const float dh[2] = {round_to_bf16(dh_values[i * 4 + half * 2]),
                                     round_to_bf16(dh_values[i * 4 + half * 2 + 1])};
                const SwigluBackwardPair d = swiglu_backward_pair(g, u, act, dh, weight[half]);
                pair_sum[half][i / 2] = i % 2 == 0 ? d.leaf : fp32::add(pair_sum[half][i / 2], d.leaf);
                constexpr int kRowBytes = kSwigluBackwardStagingRowBytes;
                *reinterpret_cast<uint32_t*>(staging + staging_offset<kRowBytes>(row, i) + f.col * gemm::kBf16Bytes) =
                    d.dg;
                *reinterpret_cast<uint32_t*>(staging + staging_offset<kRowBytes>(row, kGroupsPerPass + i) +
                                             f.col * gemm::kBf16Bytes) = d.du;
            }
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const float block = fp32::add(pair_sum[half][0], pair_sum[half][1]);
            partial[half] = pass == 0 ? block : fp32::add(partial[half], block);
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

    // The four lanes that share a row hold its four pairs: (0 + 1) + (2 + 3) in every lane.
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

// Column pairs whose activations the epilogue warps compute as one batch: all four of a lane's spill at their 88
// registers, and with dh' read at its row instead of a row ahead (no spill) the loop was 0.95x as fast.
inline constexpr int kEpilogueWarpsBatchPairs = 2;

// The SwiGLU backward of single rows of a tile's row half from the hand-off buffer, a warp per row: lane i takes column
// group i (BLOCK_N / 8 = 32 groups: the row's 256 columns), so that g, u, dg and du move as whole 512-byte runs of the
// row, 16 bytes per lane, and dh' as one 16-byte shared-memory read per lane; the accumulator's layout (4 bytes per
// lane, spread over eight rows) was 5-8% slower (docs/gemm.md). Each pair's router partial is then a butterfly over the
// lanes of each block and a sum of the blocks' sums. Two callers walk rows with it: the epilogue warps
// (store_swiglu_backward) and, where their K loop is short, the consumers for a few rows of their own
// (store_swiglu_backward_consumer_rows).
class SwigluBackwardRows {
  public:
    struct Operands {
        uint4 g;   // bf16 x 8
        uint4 u;   // bf16 x 8
        uint4 dh;  // bf16(dh') x 8, as staged
        float weight;
    };

    __device__ SwigluBackwardRows(const SwigluBackwardOutputs& out, const gemm::Tile& tile, const uint8_t* buffer,
                                  int row_half, int group)
        : out_(out),
          group_(group),
          first_row_(tile.row_begin + row_half * gemm::WGMMA_M),
          rows_here_(min(tile.num_rows - row_half * gemm::WGMMA_M, gemm::WGMMA_M)),
          col_(tile.n_idx * gemm::BLOCK_N + group * kElementsPerChunk),
          n_idx_(tile.n_idx),
          dh_chunks_(buffer + (group / kRowStoreGroupsPerPass) * gemm::kStagingBytesPerWarpgroup) {}

    __device__ int rows_here() const { return rows_here_; }

    // Row `row` of the half's 64 (zeros past the rows with data).
    __device__ Operands load(int row) const {
        Operands o{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), 0.0f};
        if (row < rows_here_) {
            const __nv_bfloat16* src = out_.gu + (first_row_ + row) * gu_stride() + col_;
            if (col_ < out_.width) {
                o.g = *reinterpret_cast<const uint4*>(src);
                o.u = *reinterpret_cast<const uint4*>(src + out_.width);
            }
            o.dh = *reinterpret_cast<const uint4*>(dh_chunks_ + staging_offset(row, group_ % kRowStoreGroupsPerPass));
            o.weight = out_.row_weight[first_row_ + row];
        }
        return o;
    }

    // The row's dg, du and router partial from its operands. Every lane of the warp calls it for the same row.
    __device__ void store(int row, const Operands& now) const {
        constexpr int kPairs = kElementsPerChunk / 2;
        const auto* g2 = reinterpret_cast<const __nv_bfloat162*>(&now.g);
        const auto* u2 = reinterpret_cast<const __nv_bfloat162*>(&now.u);
        const auto* dh2 = reinterpret_cast<const __nv_bfloat162*>(&now.dh);
        uint32_t dg[kPairs];
        uint32_t du[kPairs];
        float leaf[kPairs];
#pragma unroll
        for (int first = 0; first < kPairs; first += kEpilogueWarpsBatchPairs) {
            float g[2 * kEpilogueWarpsBatchPairs];
            float u[2 * kEpilogueWarpsBatchPairs];
            unpack_bf16_pairs<kEpilogueWarpsBatchPairs>(g2 + first, g);
            unpack_bf16_pairs<kEpilogueWarpsBatchPairs>(u2 + first, u);
            swiglu::Activation act[2 * kEpilogueWarpsBatchPairs];
            swiglu_activations<2 * kEpilogueWarpsBatchPairs>(g, act);
#pragma unroll
            for (int q = 0; q < kEpilogueWarpsBatchPairs; ++q) {
                const int p = first + q;
                const float dh[2] = {__low2float(dh2[p]), __high2float(dh2[p])};
                const SwigluBackwardPair d = swiglu_backward_pair(&g[2 * q], &u[2 * q], &act[2 * q], dh, now.weight);
                dg[p] = d.dg;
                du[p] = d.du;
                leaf[p] = d.leaf;
            }
        }
        if (col_ < out_.width) {
            __nv_bfloat16* dst = out_.dgu + (first_row_ + row) * gu_stride() + col_;
            *reinterpret_cast<uint4*>(dst) = make_uint4(dg[0], dg[1], dg[2], dg[3]);
            *reinterpret_cast<uint4*>(dst + out_.width) = make_uint4(du[0], du[1], du[2], du[3]);
        }
        // Each pair's blocks, (0 + 1) + (2 + 3) over the lanes of a block by a butterfly (lanes i and i ^ m hold
        // neighbouring sums, and theirs has the same bits in both), then the blocks in order from their first
        // lanes, in every lane alike.
        static_assert(kRouterBlockGroups == 4, "a block's sum is two butterfly steps");
        float pair_total[kPairs];
#pragma unroll
        for (int p = 0; p < kPairs; ++p) {
            leaf[p] = fp32::add(leaf[p], __shfl_xor_sync(0xffffffffu, leaf[p], 1));
            leaf[p] = fp32::add(leaf[p], __shfl_xor_sync(0xffffffffu, leaf[p], 2));
            pair_total[p] = __shfl_sync(0xffffffffu, leaf[p], 0);
#pragma unroll
            for (int block = 1; block < 32 / kRouterBlockGroups; ++block) {
                pair_total[p] = fp32::add(pair_total[p], __shfl_sync(0xffffffffu, leaf[p], block * kRouterBlockGroups));
            }
        }
        if (group_ == 0) {
            out_.router_partials[static_cast<int64_t>(first_row_ + row) * out_.num_n_tiles + n_idx_] =
                fp32::add(fp32::add(pair_total[0], pair_total[1]), fp32::add(pair_total[2], pair_total[3]));
        }
    }

  private:
    __device__ int64_t gu_stride() const {
        return 2 * static_cast<int64_t>(out_.width);
    }

    const SwigluBackwardOutputs& out_;
    int group_;
    int first_row_;
    int rows_here_;
    int col_;
    int n_idx_;
    const uint8_t* dh_chunks_;  // this lane's staged pass
};

// Which rows of a row half the consumers take (docs/gemm.md, "dgrad_down: the consumers' rows"): the first
// `consumer_rows` of each consumer warp's 16, in the tiles whose SwiGLU backward would outlast the next K loop in
// the epilogue warps, and none in the others, where the rows would only lengthen the consumers' way to their next
// K loop. Warp w of a consumer warpgroup stages rows 16 w .. 16 w + 15 of its half (the wgmma accumulator's layout),
// so a consumer warp reads only rows it wrote itself: its next staging, in program order after its reads, needs no
// barrier with the other warps of its warpgroup. Every role derives the split from the tile alike.
struct ConsumerRowSplit {
    int consumer_rows;  // per 16-row slice, in [0, kMaxConsumerRows]

    static constexpr int kSliceRows = 16;
    static_assert(gemm::WGMMA_M == kSliceRows * gemm::kThreadsPerWarpgroup / 32, "a consumer warp stages 16 rows");
    // The epilogue warps' SwiGLU backward of a tile's row takes about as long as 5/8 of a K block of the tile's K
    // loop: a full tile, 1.25 times the 64 K blocks of H = 4096 (docs/gemm.md, "dgrad_down in the epilogue warps").
    static constexpr int kRowCostKBlocks = 5;
    static constexpr int kRowCostRows = 8;

    // A CTA's last tile: no K loop follows its hand-off, so its SwiGLU backward is the kernel's tail, and the
    // consumers, idle until the kernel ends, take all the rows of every slice they may (kMaxConsumerRows) whatever
    // the launch asked. Measured against ten of sixteen (docs/gemm.md, "dgrad_down: the consumers finish the last
    // tile"): the same within the spread at 512 and 4096 rows per expert, up to 1% faster at 128.
    __device__ static ConsumerRowSplit of(const gemm::Tile& tile, int consumer_rows) {
        if (tile.last) {
            return {kMaxConsumerRows};
        }
        const bool epilogue_outlasts_k_loop = tile.num_rows * kRowCostKBlocks > tile.num_k_blocks * kRowCostRows;
        return {epilogue_outlasts_k_loop ? consumer_rows : 0};
    }

    // The epilogue warps' rows, the rows of each slice past the consumers' slice by slice, walked kStep at a time
    // from `first` by additions alone (a division per row cost the loop 1-2%).
    template <int kStep>
    struct Walk {
        int row;     // within the row half
        int within;  // within the epilogue warps' rows of the row's slice
        int consumer_rows;

        __device__ void advance() {
            row += kStep;
            within += kStep;
            if (within >= kSliceRows - consumer_rows) {  // into the next slice, past its consumer rows
                within -= kSliceRows - consumer_rows;
                row += consumer_rows;
            }
        }
    };
    template <int kStep>
    __device__ Walk<kStep> epilogue_rows(int first) const {
        return {consumer_rows + first, first, consumer_rows};
    }
    // So that a step of the epilogue warps' walk (one row per epilogue warp) crosses at most one slice boundary.
    static constexpr int kMaxConsumerRows = kSliceRows - gemm::kEpilogueThreads / 32;
};

// The kThreads epilogue threads run the SwiGLU backward of rows [64 row_half, 64 row_half + 64) of the tile from
// the hand-off buffer, but those the consumers take, while the consumers run their next K loop. Rows warp,
// warp + kWarps, ... of the walk: the same in every lane of a warp, so the shuffles find all 32 lanes; a row's
// operands are loaded while the row before it computes. Each warp has a scheduler nearly to itself (the consumer
// warps beside it mostly wait on their wgmma), so the loop runs as fast as its instruction-level parallelism allows:
// the activations of a batch of pairs run straight-line (swiglu_activations.cuh), which made it 1.04-1.22x faster
// and short enough for the layer to run dgrad_down here from H = 4096 (gemm::kDgradDownEpilogueWarpsMinHidden).
template <int kThreads>
__device__ __forceinline__ void store_swiglu_backward(const SwigluBackwardOutputs& out, const gemm::Tile& tile,
                                                      const uint8_t* buffer, int row_half, int thread,
                                                      ConsumerRowSplit split) {
    constexpr int kWarps = kThreads / 32;
    static_assert(kThreads % 32 == 0 && gemm::BLOCK_N / kElementsPerChunk == 32, "a warp's lanes are a row's groups");
    const int warp = thread / 32;
    static_assert(kWarps <= ConsumerRowSplit::kSliceRows - ConsumerRowSplit::kMaxConsumerRows,
                  "a step of the walk crosses at most one slice");
    const SwigluBackwardRows rows(out, tile, buffer, row_half, thread % 32);
    auto now = split.epilogue_rows<kWarps>(warp);
    auto ahead = now;
    ahead.advance();
    SwigluBackwardRows::Operands next = rows.load(now.row);
#pragma unroll 1
    for (; now.row < rows.rows_here(); now = ahead, ahead.advance()) {
        const SwigluBackwardRows::Operands operands = next;
        next = rows.load(ahead.row);
        rows.store(now.row, operands);
    }
}

// The consumer warpgroup's own rows of its half, right after its hand-off: warp w takes rows 16 w .. 16 w +
// consumer_rows - 1, one at a time and without loading ahead, which keeps the loop within the registers the
// accumulator leaves the consumers.
__device__ __forceinline__ void store_swiglu_backward_consumer_rows(const SwigluBackwardOutputs& out,
                                                                    const gemm::Tile& tile, const uint8_t* buffer,
                                                                    int row_half, int thread_in_wg,
                                                                    ConsumerRowSplit split) {
    // The warp's lanes wrote the rows it reads now: order their shared-memory writes before the reads.
    __syncwarp();
    const int warp = thread_in_wg / 32;
    const SwigluBackwardRows rows(out, tile, buffer, row_half, thread_in_wg % 32);
    const int first = warp * ConsumerRowSplit::kSliceRows;
    // The trip count broadcast from lane 0, so that ptxas sees a uniform loop between two K loops (a divergent path
    // there serialises the consumers' wgmma, C7518).
    const int count = __shfl_sync(device::kFullWarpMask, max(0, min(split.consumer_rows, rows.rows_here() - first)), 0);
#pragma unroll 1
    for (int j = 0; j < count; ++j) {
        rows.store(first + j, rows.load(first + j));
    }
}

}  // namespace mok::epilogue
