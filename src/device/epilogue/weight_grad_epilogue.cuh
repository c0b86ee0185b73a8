// Weight-gradient epilogue: one (output-row tile, output-column tile) of dW_e, the full fp32 sum over the
// expert's rows, written once by the one CTA that owns the tile -- no split-K, no element written or added twice.
// Fresh mode rounds it to bf16; accumulate mode adds it to the fp32 main_grad in place (docs/semantics.md section 6),
// in one of two ways with the same bits: loaded, added in shared memory and stored back, or handed to TMA reductions.
// Both move their output by TMA through the warpgroup's staging buffer: with few rows per expert the K loop is
// only a few blocks long, and loads and stores straight from the fragment layout (eight rows per warp
// instruction) cost more than the K loop itself.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "common/fp32_ops.hpp"
#include "device/epilogue/epilogue_context.cuh"
#include "device/epilogue/staging.cuh"
#include "device/gemm/gemm_config.cuh"
#include "device/ptx/bulk_copy.cuh"
#include "device/ptx/mbarrier.cuh"
#include "device/ptx/timer.cuh"
#include "device/ptx/tma.cuh"
#include "device/ptx/warpgroup.cuh"
#include "device/ptx/wgmma.cuh"
#include "device/scheduler/gemm_tile_scheduler.cuh"

namespace mok::epilogue {

enum class WeightGradMode : int {
    kFresh = 0,                  // bf16 output, overwritten
    kAccumulate = 1,             // fp32 main_grad, out += sum: loaded, added in shared memory, stored
    kAccumulateByReduction = 2,  // fp32 main_grad, out += sum: TMA reductions
};

struct WeightGradOutput {
    void* out;         // [E_local, num_rows, num_cols]: bf16 (fresh) or fp32 (accumulate)
    int32_t num_rows;  // rows of one expert's gradient (M of the tile grid)
    int32_t num_cols;  // columns (N)
    // `out` as TMA sees it, {num_cols, num_rows, E_local}, in boxes of one 128-byte swizzled line by a warpgroup's
    // rows: {64, 64, 1} bf16 (fresh), {32, 64, 1} fp32 (accumulate).
    CUtensorMap map;
};

// Fresh mode: the warpgroup's 64 x 256 slice, rounded to bf16, leaves by TMA in kFreshBoxes boxes of 64 rows x 64
// columns (128-byte rows, swizzled, so the eight 16-byte rows of each stmatrix matrix fall in distinct banks),
// alternating between the staging buffer's halves. The stores drain while the warpgroup goes on to its next tile:
// with few rows per expert the K loop is a few blocks long and the gradient is as large as the weights, so the
// writes must overlap the next tile's K loop instead of holding the consumers in the epilogue (stream_boxes, below,
// has the protocol per box). Rows past the gradient's last row are clipped by TMA; an expert without rows gets zeros
// (it never ran the K loop).
inline constexpr int kFreshBoxCols = static_cast<int>(ptx::kSwizzleBytes / gemm::kBf16Bytes);
inline constexpr int kFreshBoxes = gemm::BLOCK_N / kFreshBoxCols;
inline constexpr uint32_t kFreshBoxBytes = gemm::WGMMA_M * ptx::kSwizzleBytes;  // (64, 64) bf16

// The offset of the 16-byte row `row` (< 64) of column group `group` of a fresh box: its chunk index XOR-ed with the
// row mod 8, as TMA's 128-byte swizzle lays the box out.
__device__ __forceinline__ uint32_t fresh_box_offset(int row, int group) {
    return static_cast<uint32_t>(row) * ptx::kSwizzleBytes +
           static_cast<uint32_t>((group ^ (row % kSwizzleRows)) * kChunkBytes);
}

// The warp's part of fresh box `box` (columns [64 box, 64 box + 64) of the warpgroup's slice), rounded to bf16
// into `box_base` in the box's swizzled layout, two column groups per stmatrix; zeros where the tile has no rows.
__device__ __forceinline__ void stage_fresh_box(uint8_t* box_base, const MatrixLane& m,
                                                const float (&acc)[gemm::kNumAccumulators], int box, bool has_rows) {
    constexpr int kGroupsPerBox = kFreshBoxCols / 8;
    const auto value = [&](int i, int x) { return has_rows ? acc[(box * kGroupsPerBox + i) * 4 + x] : 0.0f; };
#pragma unroll
    for (int i = 0; i < kGroupsPerBox; i += 2) {
        stage_group_pair(box_base + fresh_box_offset(m.row, i + m.group), i, value);
    }
}

// The warpgroup's slice out through its staging buffer, kBoxes boxes of kBoxBytes alternating between the halves,
// each handed to a TMA bulk operation that reads it (a store or a reduction) while the next box is written. Per box:
// one thread waits until the operation that last used this half has read it, the warpgroup meets, `stage(box, half)`
// writes the box, the writes are fenced to the async proxy that the TMA operation reads them through, the warpgroup
// meets again, and the thread runs `issue(box, half)` and commits it. The last operations drain while the warpgroup
// goes on to its next tile (the next tile's first boxes, or drain_epilogue_stores at the end, wait for them).
// Unrolled: the callers' stage functions index the accumulator by `box`, which must be a constant for the
// accumulator to stay in registers.
template <int kBoxes, uint32_t kBoxBytes, class StageFn, class IssueFn>
__device__ __forceinline__ void stream_boxes(const EpilogueContext& e, int thread_in_wg, StageFn&& stage,
                                             IssueFn&& issue) {
    static_assert(kStagingHalves * kBoxBytes <= gemm::kStagingBytesPerWarpgroup,
                  "two boxes fit one warpgroup's staging buffer");
#pragma unroll
    for (int box = 0; box < kBoxes; ++box) {
        uint8_t* half = e.staging + (box % kStagingHalves) * kBoxBytes;
        if (thread_in_wg == 0) {
            // All but the most recent operation (the other half's) have read their buffers: this half is free.
            ptx::bulk_wait_group_read<kStagingHalves - 1>();
        }
        staging_barrier(e.warpgroup);
        stage(box, half);
        ptx::fence_proxy_async_shared_cta();
        staging_barrier(e.warpgroup);
        if (thread_in_wg == 0) {
            issue(box, half);
            ptx::bulk_commit_group();
        }
    }
}

__device__ __forceinline__ void store_fresh_weight_grad(const WeightGradOutput& out, const gemm::Tile& tile,
                                                        int row_begin, const float (&acc)[gemm::kNumAccumulators],
                                                        int wg, int thread_in_wg, const EpilogueContext& e) {
    const MatrixLane m = MatrixLane::of_thread(thread_in_wg);
    const int32_t first_row = row_begin + wg * gemm::WGMMA_M;
    const int32_t first_col = tile.n_idx * gemm::BLOCK_N;
    const bool has_rows = tile.num_rows > 0;
    stream_boxes<kFreshBoxes, kFreshBoxBytes>(
        e, thread_in_wg, [&](int box, uint8_t* half) { stage_fresh_box(half, m, acc, box, has_rows); },
        [&](int box, const uint8_t* half) {
            ptx::tma_store_3d(&out.map, first_col + box * kFreshBoxCols, first_row, tile.expert, half);
        });
}

// Fresh mode in the epilogue-warps arrangement (gemm/epilogue_warps_kernel.cuh): the consumer rounds its whole
// 64 x 256 slice into its hand-off buffer at once, as the kFreshBoxes boxes above side by side (32 KiB, the same
// swizzled layout), and goes on to its next K loop; one epilogue thread stores the boxes. No staging half is
// waited for and no named barrier is met between boxes: the buffer is free once the hand-off says so.
inline constexpr int kFreshHandoffBytes = kFreshBoxes * static_cast<int>(kFreshBoxBytes);

__device__ __forceinline__ void stage_fresh_weight_grad(const gemm::Tile& tile,
                                                        const float (&acc)[gemm::kNumAccumulators], uint8_t* buffer,
                                                        int thread_in_wg) {
    const MatrixLane m = MatrixLane::of_thread(thread_in_wg);
    // An expert without rows ran no K loop: its gradient is zeros, whatever the accumulator holds.
    const bool has_rows = tile.num_rows > 0;
#pragma unroll
    for (int box = 0; box < kFreshBoxes; ++box) {
        stage_fresh_box(buffer + box * kFreshBoxBytes, m, acc, box, has_rows);
    }
    // The values are generic-proxy writes that the epilogue thread's TMA stores (async proxy) read; the hand-off's
    // release/acquire then orders them before those stores.
    ptx::fence_proxy_async_shared_cta();
}

// The epilogue thread `thread` == 0 stores warpgroup `wg`'s boxes and returns once the stores have read the buffer,
// so that the hand-off may give it back to the consumer. The global writes drain on their own.
__device__ __forceinline__ void store_fresh_handoff(const WeightGradOutput& out, const gemm::Tile& tile, int row_begin,
                                                    const uint8_t* buffer, int wg, int thread) {
    if (thread != 0) {
        return;
    }
    const int32_t first_row = row_begin + wg * gemm::WGMMA_M;
    const int32_t first_col = tile.n_idx * gemm::BLOCK_N;
#pragma unroll
    for (int box = 0; box < kFreshBoxes; ++box) {
        ptx::tma_store_3d(&out.map, first_col + box * kFreshBoxCols, first_row, tile.expert,
                          buffer + box * kFreshBoxBytes);
    }
    ptx::bulk_commit_group();
    ptx::bulk_wait_group_read<0>();
}

// Accumulate mode: main_grad += the tile's sum, fp32, in place, through TMA. A warpgroup's 64 x 256 slice of
// the tile moves in kAccumulateBoxes boxes of 64 rows x 32 columns: 128-byte rows, the swizzle width, so the
// fragment's float2 accesses in shared memory are free of bank conflicts. The staging buffer holds
// kAccumulateLoadSlots boxes, the first of which load while the tile's K loop runs (begin_accumulate). Per box: wait
// for its load, add the fragment's values in shared memory (fp32::add, the same rounding as the reference), fence to
// the async proxy, meet at the warpgroup's barrier; then one thread stores the box back and reuses the slot of the box
// before it, whose store has read it by then, for the load kAccumulateLoadSlots boxes on.
// Loads and stores straight from the fragment layout (8 rows of 32 bytes per warp instruction, a few round trips
// per tile) kept main_grad's traffic at 16% of the device's DRAM bandwidth; the bulk copies reach 65% (docs/gemm.md,
// "Accumulate mode through TMA").
inline constexpr int kAccumulateBoxCols = static_cast<int>(ptx::kSwizzleBytes / sizeof(float));
inline constexpr int kAccumulateBoxes = gemm::BLOCK_N / kAccumulateBoxCols;
inline constexpr uint32_t kAccumulateBoxBytes = gemm::WGMMA_M * ptx::kSwizzleBytes;  // (64, 32) fp32
// Boxes in flight per warpgroup. Each slot's chain -- load from DRAM, add, store, the store's read of the slot -- takes
// a few microseconds, and with two slots main_grad moved at 0.74 of the device copy's rate where its traffic bounds the
// kernel (a few hundred rows per expert; docs/gemm.md, "Accumulate mode: four boxes in flight"). Four take 32 KiB per
// warpgroup, which leaves room for three stages instead of four (GemmLayout): enough for K loops that short.
inline constexpr int kAccumulateLoadSlots = 4;
inline constexpr int kAccumulateStagingBytes = kAccumulateLoadSlots * static_cast<int>(kAccumulateBoxBytes);
// Each slot takes kAccumulateBoxes / kAccumulateLoadSlots loads per tile, an even number: every tile starts with all
// slots' barriers at phase parity 0, so no phase state outlives a tile.
static_assert((kAccumulateBoxes / kAccumulateLoadSlots) % 2 == 0, "each tile leaves the load barriers at parity 0");
static_assert(kAccumulateLoadSlots > 1, "a slot is reused for a later box only after the box after it is stored");

// The warpgroup's part of an accumulate tile: the main_grad box coordinates of its first rows and column.
// Every tile runs the same code, without a branch around it (ptxas serialises the K loop's wgmma when the
// epilogue that reads the accumulator sits in a branch): where there is nothing to add -- an expert without rows,
// whose main_grad keeps its bits, signed zeros included -- the slice lies past the gradient's last row, where
// TMA loads zeros and stores nothing. A warpgroup whose rows lie past the last row is such a slice already.
struct AccumulateSlice {
    int32_t first_row;
    int32_t first_col;
    int32_t expert;

    __device__ static AccumulateSlice of(const WeightGradOutput& out, const gemm::Tile& tile, int row_begin, int wg) {
        const int32_t first_row = tile.num_rows > 0 ? row_begin + wg * gemm::WGMMA_M : out.num_rows;
        return {first_row, tile.n_idx * gemm::BLOCK_N, tile.expert};
    }
};

// One thread: loads box `box` of the slice into its slot of the staging buffer.
__device__ __forceinline__ void load_accumulate_box(const WeightGradOutput& out, const AccumulateSlice& slice, int box,
                                                    const EpilogueContext& e) {
    uint64_t* loaded = e.loaded + box % kAccumulateLoadSlots;
    ptx::mbarrier_arrive_expect_tx_release_cta(loaded, kAccumulateBoxBytes);
    ptx::tma_load_3d(e.staging + (box % kAccumulateLoadSlots) * kAccumulateBoxBytes, &out.map,
                     slice.first_col + box * kAccumulateBoxCols, slice.first_row, slice.expert, loaded);
}

// Before the tile's K loop: the first main_grad boxes start loading. The previous tile's stores have read the
// buffer already (accumulate_weight_grad waits for that before it returns).
__device__ __forceinline__ void begin_accumulate(const WeightGradOutput& out, const gemm::Tile& tile, int row_begin,
                                                 int wg, int thread_in_wg, const EpilogueContext& e) {
    const AccumulateSlice slice = AccumulateSlice::of(out, tile, row_begin, wg);
    if (thread_in_wg == 0) {
#pragma unroll
        for (int box = 0; box < kAccumulateLoadSlots; ++box) {
            load_accumulate_box(out, slice, box, e);
        }
    }
}

// After a failed K loop (the launch ends with an error): waits for the loads begin_accumulate issued, so that
// none lands in shared memory after the CTA has exited. The loads read valid memory and always complete; the
// wait is bounded all the same, by the launch's budget.
__device__ __forceinline__ void abandon_accumulate(const WeightGradOutput& out, const gemm::Tile& tile, int row_begin,
                                                   int wg, int thread_in_wg, const EpilogueContext& e) {
    if (thread_in_wg != 0) {
        return;
    }
    const uint64_t deadline = ptx::global_timer_ns() + e.wait->timeout_ns;
#pragma unroll
    for (int slot = 0; slot < kAccumulateLoadSlots; ++slot) {
        while (!ptx::mbarrier_try_wait_parity_acquire_cta(e.loaded + slot, 0) && ptx::global_timer_ns() < deadline) {
        }
    }
}

// The offset of the fragment's float2 for column group `group` of a box, row `row` (< 64): the 16-byte chunk
// index XOR-ed with the row mod 8, as TMA's 128-byte swizzle lays the box out.
__device__ __forceinline__ uint32_t accumulate_box_offset(int row, int group, const Fragment& f) {
    constexpr int kFloatsPerChunk = kChunkBytes / static_cast<int>(sizeof(float));
    const int col = group * 8 + f.col;
    const int chunk = col / kFloatsPerChunk;
    return static_cast<uint32_t>(row) * ptx::kSwizzleBytes +
           static_cast<uint32_t>((chunk ^ (row % kSwizzleRows)) * kChunkBytes) +
           static_cast<uint32_t>((col % kFloatsPerChunk) * sizeof(float));
}

__device__ __forceinline__ void accumulate_weight_grad(const WeightGradOutput& out, const gemm::Tile& tile,
                                                       int row_begin, const float (&acc)[gemm::kNumAccumulators],
                                                       int wg, int thread_in_wg, const EpilogueContext& e) {
    const AccumulateSlice slice = AccumulateSlice::of(out, tile, row_begin, wg);
    constexpr int kGroupsPerBox = kAccumulateBoxCols / 8;
    const Fragment f = Fragment::of_thread(thread_in_wg);
    bool loads_ok = true;
    // Unrolled: every accumulator index is a constant, so the accumulator stays in registers.
#pragma unroll
    for (int box = 0; box < kAccumulateBoxes; ++box) {
        uint8_t* slot = e.staging + (box % kAccumulateLoadSlots) * kAccumulateBoxBytes;
        const uint32_t parity = static_cast<uint32_t>(box / kAccumulateLoadSlots) % 2;
        // No early exit on a failed wait (ptxas serialises the K loop's wgmma when one sits among the
        // accumulator's reads): the warpgroup carries on, and stores nothing once any thread's wait has failed.
        const bool landed = ptx::mbarrier_wait_parity_bounded(*e.wait, WaitSite::kEpilogueLoad,
                                                              e.loaded + box % kAccumulateLoadSlots, parity);
        loads_ok = loads_ok && landed;
#pragma unroll
        for (int i = 0; i < kGroupsPerBox; ++i) {
            const int group = box * kGroupsPerBox + i;
#pragma unroll
            for (int row_half = 0; row_half < 2; ++row_half) {
                auto* sum = reinterpret_cast<float2*>(slot + accumulate_box_offset(f.row + row_half * 8, i, f));
                const float2 old = *sum;
                *sum = make_float2(fp32::add(old.x, acc[group * 4 + row_half * 2]),
                                   fp32::add(old.y, acc[group * 4 + row_half * 2 + 1]));
            }
        }
        // The sums are generic-proxy writes the TMA store (async proxy) reads.
        ptx::fence_proxy_async_shared_cta();
        loads_ok = staging_barrier_all(e.warpgroup, loads_ok);
        if (loads_ok && thread_in_wg == 0) {
            ptx::tma_store_3d(&out.map, slice.first_col + box * kAccumulateBoxCols, slice.first_row, slice.expert,
                              slot);
            ptx::bulk_commit_group();
            // Every store but this one has read its slot: the previous box's slot takes the load kAccumulateLoadSlots
            // boxes after it, while this store reads its own.
            ptx::bulk_wait_group_read<1>();
            const int next_load = box - 1 + kAccumulateLoadSlots;
            if (box > 0 && next_load < kAccumulateBoxes) {
                load_accumulate_box(out, slice, next_load, e);
            }
        }
    }
    // The last store has read its slot before the next tile's loads (begin_accumulate, the same thread) or the CTA's
    // exit reuse the buffer.
    if (thread_in_wg == 0) {
        ptx::bulk_wait_group_read<0>();
    }
}

// Accumulate mode by TMA reductions: the warpgroup stages its slice in the same kAccumulateBoxes boxes, alternating
// between the staging buffer's halves as fresh mode's boxes do, and one thread hands each box to
// `cp.reduce.async.bulk.tensor ... .add`: the memory system adds it to main_grad, one fp32 addition per element,
// rounded to nearest with subnormals kept -- fp32::add's bits, which the weight-gradient test checks element by
// element. Each element belongs to one tile, which one CTA reduces once, so no two reductions meet and their order is
// no part of the result. Nothing is loaded: from about 2048 rows per expert the loads above, which begin as the
// stores free the halves, make the epilogue the tile's longest part, and this way is faster; at a few hundred rows,
// where main_grad's traffic bounds the kernel, the reductions are slower than the loads and stores
// (docs/gemm.md, "Accumulate mode by TMA reductions").
__device__ __forceinline__ void stage_accumulate_box(uint8_t* box_base, const Fragment& f,
                                                     const float (&acc)[gemm::kNumAccumulators], int box) {
    constexpr int kGroupsPerBox = kAccumulateBoxCols / 8;
#pragma unroll
    for (int i = 0; i < kGroupsPerBox; ++i) {
        const int group = box * kGroupsPerBox + i;
#pragma unroll
        for (int row_half = 0; row_half < 2; ++row_half) {
            *reinterpret_cast<float2*>(box_base + accumulate_box_offset(f.row + row_half * 8, i, f)) =
                make_float2(acc[group * 4 + row_half * 2], acc[group * 4 + row_half * 2 + 1]);
        }
    }
}

__device__ __forceinline__ void reduce_weight_grad(const WeightGradOutput& out, const gemm::Tile& tile, int row_begin,
                                                   const float (&acc)[gemm::kNumAccumulators], int wg, int thread_in_wg,
                                                   const EpilogueContext& e) {
    // An expert without rows: the slice lies past the gradient's last row, where TMA writes nothing, so main_grad
    // keeps its bits (adding +0.0 would turn -0.0 into +0.0).
    const AccumulateSlice slice = AccumulateSlice::of(out, tile, row_begin, wg);
    const Fragment f = Fragment::of_thread(thread_in_wg);
    stream_boxes<kAccumulateBoxes, kAccumulateBoxBytes>(
        e, thread_in_wg, [&](int box, uint8_t* half) { stage_accumulate_box(half, f, acc, box); },
        [&](int box, const uint8_t* half) {
            ptx::tma_reduce_add_3d(&out.map, slice.first_col + box * kAccumulateBoxCols, slice.first_row, slice.expert,
                                   half);
        });
}

template <WeightGradMode kMode>
__device__ __forceinline__ void weight_grad_epilogue(const WeightGradOutput& out, const gemm::Tile& tile, int row_begin,
                                                     const float (&acc)[gemm::kNumAccumulators], int wg,
                                                     int thread_in_wg, const EpilogueContext& e) {
    if constexpr (kMode == WeightGradMode::kFresh) {
        store_fresh_weight_grad(out, tile, row_begin, acc, wg, thread_in_wg, e);
    } else if constexpr (kMode == WeightGradMode::kAccumulate) {
        accumulate_weight_grad(out, tile, row_begin, acc, wg, thread_in_wg, e);
    } else {
        reduce_weight_grad(out, tile, row_begin, acc, wg, thread_in_wg, e);
    }
}

}  // namespace mok::epilogue
