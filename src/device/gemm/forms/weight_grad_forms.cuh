// Forms 4a and 4b, backward: weight gradients dW_e = A_e^T B_e, K running over expert e's rows in canonical
// order, one CTA per output tile (no split-K). Both operands are row tiles read transposed (MN-major):
//   gate/up:  dW_gate|up,e (I, H) = dG|dU_e^T X_e
//             A  dgu (rows, 2, I): tensor map 3-D {I, 2, rows}, box {64, 1, 64}, two boxes along M per stage
//             B  x   (rows, H):    tensor map 2-D {H, rows}, box {64, 64}, four boxes along N per stage
//             output-row tiles: the ceil(I / 128) tiles of dW_gate, then those of dW_up
//   down:     dW_down,e (H, I) = dYs_e^T H_e with dYs = bf16(w * dy) row by row
//             A  dys (rows, H):    tensor map 2-D {H, rows}, box {64, 64}, two boxes along M
//             B  h   (rows, I):    tensor map 2-D {I, rows}, box {64, 64}, four boxes along N
// Where H and I are whole 64-element chunks (`chunked`, every model shape) each operand is instead one box of a
// chunked view -- {64, rows, cols / 64} (x, dys, h) or {64, rows, I / 64, 2} (dgu) -- that lands in the same
// stage layout: two TMA instructions per stage instead of six (grouped_gemm.cu, map_row_chunks).
// The last K block of an expert reaches past its rows; mask_k_tail zeroes those rows in shared memory, so the
// padding and the next expert's rows never enter the sum.
#pragma once

#include <cuda.h>

#include "device/epilogue/weight_grad_epilogue.cuh"
#include "device/gemm/grouped_gemm_kernel.cuh"
#include "device/ptx/tma.cuh"

namespace mok::gemm {

inline constexpr int kMnBoxesA = BLOCK_M / kMnBoxElements;
inline constexpr int kMnBoxesB = BLOCK_N / kMnBoxElements;

// What both weight gradients declare about their epilogue's shared memory. The epilogue-warps arrangement's hand-off
// (epilogue_warps_kernel.cuh), fresh mode only -- accumulate mode's fp32 slice is twice a hand-off buffer: the
// consumer stages its bf16 boxes, an epilogue thread stores them by TMA. `Form::output_of` names the tile's gradient
// and its first row.
template <class Form, epilogue::WeightGradMode kMode>
struct WeightGradHandoff {
    static constexpr int kHandoffBytes = kMode == epilogue::WeightGradMode::kFresh ? epilogue::kFreshHandoffBytes : 0;
    // The cooperative kernel's staging (GemmLayout): accumulate mode by loads keeps kAccumulateLoadSlots main_grad
    // boxes in flight per warpgroup; the other modes stage in a kStagingBytesPerWarpgroup buffer's two halves.
    static constexpr bool kLoadsMainGrad = kMode == epilogue::WeightGradMode::kAccumulate;
    static constexpr int kCooperativeStagingBytes =
        kLoadsMainGrad ? epilogue::kAccumulateStagingBytes : kStagingBytesPerWarpgroup;
    static constexpr int kEpilogueLoadSlots =
        kLoadsMainGrad ? epilogue::kAccumulateLoadSlots : epilogue::kStagingHalves;

    template <class Params>
    __device__ static void handoff_stage(const Params&, const Tile& t, const float (&acc)[kNumAccumulators],
                                         uint8_t* buffer,
                                         int thread_in_wg) requires(kMode == epilogue::WeightGradMode::kFresh) {
        epilogue::stage_fresh_weight_grad(t, acc, buffer, thread_in_wg);
    }

    template <int kThreads, class Params>
    __device__ static void handoff_store(const Params& p, const Tile& t, const uint8_t* buffer, int row_half,
                                         int thread) requires(kMode == epilogue::WeightGradMode::kFresh) {
        int m = 0;
        const epilogue::WeightGradOutput& out = Form::output_of(p, t, m);
        epilogue::store_fresh_handoff(out, t, m, buffer, row_half, thread);
    }
};

template <epilogue::WeightGradMode kMode>
struct WeightGradGateUpForm : WeightGradHandoff<WeightGradGateUpForm<kMode>, kMode> {
    struct Params {
        KernelCommon common;
        RowGroups groups;
        CUtensorMap dgu;                    // {I, 2, rows}, box {64, 1, 64}; chunked: {64, rows, I / 64, 2}
        CUtensorMap x;                      // {H, rows}, box {64, 64}; chunked: {64, rows, H / 64}
        epilogue::WeightGradOutput d_gate;  // (E, I, H); accumulate mode: with its fp32 tensor map
        epilogue::WeightGradOutput d_up;    // (E, I, H)
        int32_t num_experts;
        bool chunked;  // the maps are the chunked views: one box per operand and stage
    };
    using Scheduler = ExpertWeightScheduler;
    static constexpr Major kMajorA = Major::kMN;
    static constexpr Major kMajorB = Major::kMN;
    static constexpr bool kMaskKTail = true;
    static constexpr bool kGatedRows = false;  // tiles span an expert's rows; they run after the dispatch

    __device__ static int tiles_per_half(const Params& p) { return (p.d_gate.num_rows + BLOCK_M - 1) / BLOCK_M; }

    __device__ static Scheduler make_scheduler(const Params& p) {
        return Scheduler(p.groups, p.num_experts, 2 * tiles_per_half(p), p.d_gate.num_cols);
    }

    __device__ static void prefetch(const Params& p) {
        ptx::prefetch_tensor_map(&p.dgu);
        ptx::prefetch_tensor_map(&p.x);
    }

    __device__ static void load(const Params& p, const Tile& t, int k_block, uint8_t* a, uint8_t* b, uint64_t* bar) {
        const int row = t.row_begin + k_block * BLOCK_K;
        const int half = t.m_idx < tiles_per_half(p) ? 0 : 1;
        const int m = (t.m_idx - half * tiles_per_half(p)) * BLOCK_M;
        if (p.chunked) {
            ptx::tma_load_4d(a, &p.dgu, 0, row, m / kMnBoxElements, half, bar);
            ptx::tma_load_3d(b, &p.x, 0, row, t.n_idx * kMnBoxesB, bar);
            return;
        }
#pragma unroll
        for (int box = 0; box < kMnBoxesA; ++box) {
            ptx::tma_load_3d(a + box * kMnBoxBytes, &p.dgu, m + box * kMnBoxElements, half, row, bar);
        }
#pragma unroll
        for (int box = 0; box < kMnBoxesB; ++box) {
            ptx::tma_load_2d(b + box * kMnBoxBytes, &p.x, t.n_idx * BLOCK_N + box * kMnBoxElements, row, bar);
        }
    }

    // The output (dW_gate or dW_up) of tile t and the tile's first row in it.
    __device__ static const epilogue::WeightGradOutput& output_of(const Params& p, const Tile& t, int& row_begin) {
        const int half = t.m_idx < tiles_per_half(p) ? 0 : 1;
        row_begin = (t.m_idx - half * tiles_per_half(p)) * BLOCK_M;
        return half == 0 ? p.d_gate : p.d_up;
    }

    // Accumulate mode only: main_grad's first boxes load during the K loop (weight_grad_epilogue.cuh).
    __device__ static void begin_tile(
        const Params& p, const Tile& t, int wg, int thread_in_wg,
        const epilogue::EpilogueContext& e) requires(kMode == epilogue::WeightGradMode::kAccumulate) {
        int m = 0;
        epilogue::begin_accumulate(output_of(p, t, m), t, m, wg, thread_in_wg, e);
    }

    __device__ static void abandon_tile(
        const Params& p, const Tile& t, int wg, int thread_in_wg,
        const epilogue::EpilogueContext& e) requires(kMode == epilogue::WeightGradMode::kAccumulate) {
        int m = 0;
        epilogue::abandon_accumulate(output_of(p, t, m), t, m, wg, thread_in_wg, e);
    }

    __device__ static void epilogue(const Params& p, const Tile& t, const float (&acc)[kNumAccumulators], int row_half,
                                    int thread_in_wg, const epilogue::EpilogueContext& e) {
        int m = 0;
        const epilogue::WeightGradOutput& out = output_of(p, t, m);
        epilogue::weight_grad_epilogue<kMode>(out, t, m, acc, row_half, thread_in_wg, e);
    }
};

template <epilogue::WeightGradMode kMode>
struct WeightGradDownForm : WeightGradHandoff<WeightGradDownForm<kMode>, kMode> {
    struct Params {
        KernelCommon common;
        RowGroups groups;
        CUtensorMap dys;                    // {H, rows}, box {64, 64}; chunked: {64, rows, H / 64}
        CUtensorMap h;                      // {I, rows}, box {64, 64}; chunked: {64, rows, I / 64}
        epilogue::WeightGradOutput d_down;  // (E, H, I); accumulate mode: with its fp32 tensor map
        int32_t num_experts;
        bool chunked;  // as in the gate/up form
    };
    using Scheduler = ExpertWeightScheduler;
    static constexpr Major kMajorA = Major::kMN;
    static constexpr Major kMajorB = Major::kMN;
    static constexpr bool kMaskKTail = true;
    static constexpr bool kGatedRows = false;  // tiles span an expert's rows; they run after the dispatch

    __device__ static Scheduler make_scheduler(const Params& p) {
        return Scheduler(p.groups, p.num_experts, (p.d_down.num_rows + BLOCK_M - 1) / BLOCK_M, p.d_down.num_cols);
    }

    __device__ static void prefetch(const Params& p) {
        ptx::prefetch_tensor_map(&p.dys);
        ptx::prefetch_tensor_map(&p.h);
    }

    __device__ static void load(const Params& p, const Tile& t, int k_block, uint8_t* a, uint8_t* b, uint64_t* bar) {
        const int row = t.row_begin + k_block * BLOCK_K;
        if (p.chunked) {
            ptx::tma_load_3d(a, &p.dys, 0, row, t.m_idx * kMnBoxesA, bar);
            ptx::tma_load_3d(b, &p.h, 0, row, t.n_idx * kMnBoxesB, bar);
            return;
        }
#pragma unroll
        for (int box = 0; box < kMnBoxesA; ++box) {
            ptx::tma_load_2d(a + box * kMnBoxBytes, &p.dys, t.m_idx * BLOCK_M + box * kMnBoxElements, row, bar);
        }
#pragma unroll
        for (int box = 0; box < kMnBoxesB; ++box) {
            ptx::tma_load_2d(b + box * kMnBoxBytes, &p.h, t.n_idx * BLOCK_N + box * kMnBoxElements, row, bar);
        }
    }

    // The tile's gradient (dW_down) and its first row in it.
    __device__ static const epilogue::WeightGradOutput& output_of(const Params& p, const Tile& t, int& row_begin) {
        row_begin = t.m_idx * BLOCK_M;
        return p.d_down;
    }

    // Accumulate mode only, as above.
    __device__ static void begin_tile(
        const Params& p, const Tile& t, int wg, int thread_in_wg,
        const epilogue::EpilogueContext& e) requires(kMode == epilogue::WeightGradMode::kAccumulate) {
        epilogue::begin_accumulate(p.d_down, t, t.m_idx * BLOCK_M, wg, thread_in_wg, e);
    }

    __device__ static void abandon_tile(
        const Params& p, const Tile& t, int wg, int thread_in_wg,
        const epilogue::EpilogueContext& e) requires(kMode == epilogue::WeightGradMode::kAccumulate) {
        epilogue::abandon_accumulate(p.d_down, t, t.m_idx * BLOCK_M, wg, thread_in_wg, e);
    }

    __device__ static void epilogue(const Params& p, const Tile& t, const float (&acc)[kNumAccumulators], int row_half,
                                    int thread_in_wg, const epilogue::EpilogueContext& e) {
        epilogue::weight_grad_epilogue<kMode>(p.d_down, t, t.m_idx * BLOCK_M, acc, row_half, thread_in_wg, e);
    }
};

// The kernel runs begin_tile before each K loop exactly where a form has one: accumulate mode's epilogue waits for
// the loads it issues.
static_assert(HasTileBegin<WeightGradGateUpForm<epilogue::WeightGradMode::kAccumulate>> &&
              HasTileBegin<WeightGradDownForm<epilogue::WeightGradMode::kAccumulate>>);
static_assert(!HasTileBegin<WeightGradGateUpForm<epilogue::WeightGradMode::kFresh>> &&
              !HasTileBegin<WeightGradDownForm<epilogue::WeightGradMode::kFresh>> &&
              !HasTileBegin<WeightGradGateUpForm<epilogue::WeightGradMode::kAccumulateByReduction>> &&
              !HasTileBegin<WeightGradDownForm<epilogue::WeightGradMode::kAccumulateByReduction>>);

}  // namespace mok::gemm
