// Form 1, forward: [g | u] = X_e [W_gate,e ; W_up,e]^T per expert, with the SwiGLU epilogue.
//   A  x rows      (rows, H) bf16, K-major     tensor map 2-D {H, rows}, box {64, 128}
//   B  W_gate/up   (E, I, H) bf16, K-major     tensor maps 3-D {H, I, E}, box {64, 128, 1}
// An N tile is 128 columns of I: its B stage holds those 128 rows of W_gate then the same 128 rows of W_up,
// so each thread's accumulator has a gate value and its up partner (docs/semantics.md: one pass over X).
#pragma once

#include <cuda.h>

#include "device/epilogue/swiglu_epilogue.cuh"
#include "device/gemm/grouped_gemm_kernel.cuh"
#include "device/ptx/tma.cuh"

namespace mok::gemm {

struct GateUpForm {
    struct Params {
        KernelCommon common;
        RowGroups groups;
        CUtensorMap x;       // {H, rows}
        CUtensorMap w_gate;  // {H, I, E}
        CUtensorMap w_up;    // {H, I, E}
        epilogue::SwigluOutputs out;
        int32_t hidden;  // H = K
    };
    using Scheduler = GroupedRowScheduler;
    static constexpr Major kMajorA = Major::kK;
    static constexpr Major kMajorB = Major::kK;
    static constexpr bool kMaskKTail = false;
    static constexpr bool kGatedRows = true;  // A is the dispatched x rows
    static constexpr int kGateRows = BLOCK_N / 2;

    __device__ static Scheduler make_scheduler(const Params& p, TileSlots slots = TileSlots::of_cta()) {
        // Each tile covers BLOCK_N / 2 columns of I; the scheduler counts tiles in BLOCK_N units.
        return Scheduler(p.groups, 2 * p.out.width, (p.hidden + BLOCK_K - 1) / BLOCK_K, slots);
    }

    __device__ static void prefetch(const Params& p) {
        ptx::prefetch_tensor_map(&p.x);
        ptx::prefetch_tensor_map(&p.w_gate);
        ptx::prefetch_tensor_map(&p.w_up);
    }

    __device__ static void load(const Params& p, const Tile& t, int k_block, uint8_t* a, uint8_t* b, uint64_t* bar) {
        const int k = k_block * BLOCK_K;
        const int n = t.n_idx * kGateRows;
        ptx::tma_load_2d(a, &p.x, k, t.row_begin, bar);
        ptx::tma_load_3d(b, &p.w_gate, k, n, t.expert, bar);
        ptx::tma_load_3d(b + kGateRows * ptx::kSwizzleBytes, &p.w_up, k, n, t.expert, bar);
    }

    // Ping-pong arrangement (pingpong_kernel.cuh): this CTA's 64 rows of A (x's map has 64-row boxes then), and
    // one half of B for both CTAs of the cluster: rank 0 multicasts the gate rows, rank 1 the up rows.
    __device__ static void load_half(const Params& p, const Tile& t, int k_block, uint32_t rank, uint8_t* a, uint8_t* b,
                                     uint64_t* bar) {
        const int k = k_block * BLOCK_K;
        const int n = t.n_idx * kGateRows;
        ptx::tma_load_2d(a, &p.x, k, t.row_begin + static_cast<int>(rank) * kPingPongRows, bar);
        ptx::tma_load_3d_multicast(b + rank * kGateRows * ptx::kSwizzleBytes, rank == 0 ? &p.w_gate : &p.w_up, k, n,
                                   t.expert, bar, kPingPongClusterMask);
    }

    __device__ static void epilogue(const Params& p, const Tile& t, const float (&acc)[kNumAccumulators], int row_half,
                                    int thread_in_wg, const epilogue::EpilogueContext& e) {
        epilogue::swiglu_epilogue(p.out, t, acc, row_half, thread_in_wg, e);
    }

    // Epilogue-warps arrangement (epilogue_warps_kernel.cuh): the consumer stages its bf16 g and u into a hand-off
    // buffer of kHandoffBytes, and the epilogue warps store them and h.
    static constexpr int kHandoffBytes = epilogue::kSwigluHandoffBytes;

    __device__ static void handoff_stage(const Params&, const Tile&, const float (&acc)[kNumAccumulators],
                                         uint8_t* buffer, int thread_in_wg) {
        epilogue::stage_swiglu(buffer, acc, thread_in_wg);
    }

    template <int kThreads>
    __device__ static void handoff_store(const Params& p, const Tile& t, const uint8_t* buffer, int row_half,
                                         int thread) {
        epilogue::store_swiglu(p.out, t, buffer, row_half, thread, kThreads);
    }
};

}  // namespace mok::gemm
