// Epilogue staging: accumulator fragments -> bf16 in shared memory -> coalesced 16-byte stores to global rows.
//
// A consumer warpgroup holds a 64 x N fp32 tile in the m64nNk16 accumulator layout: thread t (warp w = t / 32,
// lane l) owns rows 16w + l/4 and 16w + l/4 + 8, and in each group of eight columns the pair 2(l%4), 2(l%4)+1;
// register 4i + x is column group i, row (x / 2) * 8, column x % 2.
// Fragments go to a 64 x 128 bf16 staging tile (256-byte rows) with the 16-byte chunk index XOR-ed with the
// row mod 8: a stmatrix's eight 16-byte rows of one matrix (one chunk column) then hit 32 distinct banks, and the
// 16-byte reads of one row by eight consecutive threads stay conflict-free. Rows are then stored whole,
// 16 bytes per thread, to wherever the caller maps each row (a plain row, a scattered row, or nowhere).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "device/gemm/gemm_config.cuh"
#include "device/ptx/matrix_store.cuh"
#include "device/ptx/warpgroup.cuh"

namespace mok::epilogue {

inline constexpr int kChunkBytes = 16;
inline constexpr int kChunksPerRow = gemm::kStagingRowBytes / kChunkBytes;
inline constexpr int kElementsPerChunk = kChunkBytes / gemm::kBf16Bytes;
inline constexpr int kSwizzleRows = 8;

// The thread's place in the accumulator layout.
struct Fragment {
    int row;  // first of its two rows within the warpgroup's 64
    int col;  // first of its two columns within each group of eight

    __device__ static Fragment of_thread(int thread_in_wg) {
        const int warp = thread_in_wg / 32;
        const int lane = thread_in_wg % 32;
        return {warp * 16 + lane / 4, (lane % 4) * 2};
    }
};

// The 16-byte row that the thread addresses when its warp stores two column groups i and i + 1 of its 16 rows
// with one stmatrix .x4 (stage_group_pair): the four matrices are (rows 0-7, group i), (rows 8-15, group i),
// (rows 0-7, group i + 1) and (rows 8-15, group i + 1), the order of the fragment's registers 4i .. 4i + 3 and
// 4(i + 1) .. 4(i + 1) + 3, and lane l addresses row l % 8 of matrix l / 8.
struct MatrixLane {
    int row;    // within the warpgroup's 64
    int group;  // 0: group i, 1: group i + 1

    __device__ static MatrixLane of_thread(int thread_in_wg) {
        const int warp = thread_in_wg / 32;
        const int lane = thread_in_wg % 32;
        return {warp * 16 + (lane / 8 % 2) * 8 + lane % 8, lane / 16};
    }

    __device__ static MatrixLane of(const Fragment& f) {
        return of_thread((f.row / 16) * 32 + (f.row % 16) * 4 + f.col / 2);
    }
};

// kRowBytes: the staging tile's row pitch, a multiple of 128 bytes (the swizzle's eight chunks).
template <int kRowBytes = gemm::kStagingRowBytes>
__device__ __forceinline__ uint32_t staging_offset(int row, int chunk) {
    static_assert(kRowBytes % (kSwizzleRows * kChunkBytes) == 0, "a staging row holds whole swizzle groups");
    return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row % kSwizzleRows)) * kChunkBytes));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// The four bf16x2 words of column groups i and i + 1 (value(g, x): the fp32 value of group g, register x), rounded
// and stored by one stmatrix .x4 at `row_address`, the address of the 16-byte row MatrixLane names. A warp's 4-byte
// stores took four instructions for what one stmatrix moves; measured, the weight gradients at 256 rows per expert,
// whose staging sits between two short K loops, gain 1-2% and the other forms nothing: the staged bytes, not the
// instructions, are what the K loop feels (docs/gemm.md, "The weight gradients' epilogue traffic").
template <typename ValueFn>
__device__ __forceinline__ void stage_group_pair(uint8_t* row_address, int i, ValueFn&& value) {
    ptx::stmatrix_x4(row_address, pack_bf16x2(value(i, 0), value(i, 1)), pack_bf16x2(value(i, 2), value(i, 3)),
                     pack_bf16x2(value(i + 1, 0), value(i + 1, 1)), pack_bf16x2(value(i + 1, 2), value(i + 1, 3)));
}

// Writes kGroups column groups (8 columns each) of the fragment into staging columns [8 first_group, ...):
// value(i, x) gives the fp32 value of column group i, register x (see the layout above).
template <int kGroups, typename ValueFn>
__device__ __forceinline__ void stage_fragment(uint8_t* staging, const Fragment& f, int first_group, ValueFn&& value) {
    static_assert(kGroups % 2 == 0, "column groups are stored in pairs, one stmatrix each");
    const MatrixLane m = MatrixLane::of(f);
#pragma unroll
    for (int i = 0; i < kGroups; i += 2) {
        stage_group_pair(staging + staging_offset(m.row, first_group + i + m.group), i, value);
    }
}

// Stores the staged rows: `lookup(row)` gives a row's destination, `valid(destination)` whether the row is stored
// (`skip` is a destination that is not), and `address(destination, col)` the 16-byte word of column `col` there. Only
// chunks whose first column is below `num_cols` are stored (widths are multiples of 8, so a chunk is all in or all
// out). Chunks [chunk_begin, chunk_end) of each row are stored, staging chunk chunk_begin going to column 0. Every
// destination is looked up before the first store: lookup may read global memory (a row map, the plan's row sources),
// and a load issued after a store would wait for it. `thread` is the caller's index among the kThreads threads that
// store (a consumer warpgroup, or the epilogue warps); kRowBytes is the staging tile's row pitch.
template <int kThreads, int kRowBytes, typename Dest, typename LookupFn, typename ValidFn, typename AddressFn>
__device__ __forceinline__ void store_staged_chunks(const uint8_t* staging, int thread, int chunk_begin, int chunk_end,
                                                    int num_cols, Dest skip, LookupFn&& lookup, ValidFn&& valid,
                                                    AddressFn&& address) {
    // Items (16-byte chunks) per thread, handled in batches of kBatch: a batch's lookups, then its stores.
    constexpr int kMaxItems = (gemm::WGMMA_M * kChunksPerRow + kThreads - 1) / kThreads;
    constexpr int kBatch = 4;
    const int chunks_per_row = chunk_end - chunk_begin;
    const int num_chunks = gemm::WGMMA_M * chunks_per_row;
#pragma unroll 1
    for (int first = 0; first < kMaxItems; first += kBatch) {
        Dest dest[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            const int c = thread + (first + j) * kThreads;
            dest[j] = c < num_chunks ? lookup(c / chunks_per_row) : skip;
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            const int c = thread + (first + j) * kThreads;
            const int chunk = chunk_begin + c % chunks_per_row;
            const int col = (chunk - chunk_begin) * kElementsPerChunk;
            if (valid(dest[j]) && col < num_cols) {
                *address(dest[j], col) =
                    *reinterpret_cast<const uint4*>(staging + staging_offset<kRowBytes>(c / chunks_per_row, chunk));
            }
        }
    }
}

// Rows to base + dest_row(row) * ld (a negative row skips it): a 32-bit index per lookup.
template <int kThreads = gemm::kThreadsPerWarpgroup, int kRowBytes = gemm::kStagingRowBytes, typename DestRowFn>
__device__ __forceinline__ void store_staged_rows(const uint8_t* staging, int thread, int chunk_begin, int chunk_end,
                                                  int num_cols, __nv_bfloat16* base, int64_t ld, DestRowFn&& dest_row) {
    store_staged_chunks<kThreads, kRowBytes>(
        staging, thread, chunk_begin, chunk_end, num_cols, int32_t{-1},
        [&](int row) -> int32_t { return dest_row(row); }, [](int32_t d) { return d >= 0; },
        [&](int32_t d, int col) { return reinterpret_cast<uint4*>(base + d * ld + col); });
}

// Rows to the address dest_row(row) gives (nullptr skips it): rows in different buffers, such as other ranks'.
template <int kThreads = gemm::kThreadsPerWarpgroup, typename DestRowFn>
__device__ __forceinline__ void store_staged_rows_at(const uint8_t* staging, int thread, int chunk_begin, int chunk_end,
                                                     int num_cols, DestRowFn&& dest_row) {
    store_staged_chunks<kThreads, gemm::kStagingRowBytes>(
        staging, thread, chunk_begin, chunk_end, num_cols, static_cast<__nv_bfloat16*>(nullptr),
        [&](int row) -> __nv_bfloat16* { return dest_row(row); }, [](__nv_bfloat16* d) { return d != nullptr; },
        [](__nv_bfloat16* d, int col) { return reinterpret_cast<uint4*>(d + col); });
}

// Barrier among the 128 threads of consumer warpgroup `wg` around a staging pass.
__device__ __forceinline__ void staging_barrier(int wg) {
    ptx::named_barrier_sync(static_cast<uint32_t>(gemm::NamedBarrier::kConsumer0Epilogue) + wg,
                            gemm::kThreadsPerWarpgroup);
}

// The same barrier, also telling whether `pred` held in all 128 threads.
__device__ __forceinline__ bool staging_barrier_all(int wg, bool pred) {
    return ptx::named_barrier_sync_all(static_cast<uint32_t>(gemm::NamedBarrier::kConsumer0Epilogue) + wg,
                                       gemm::kThreadsPerWarpgroup, pred);
}

}  // namespace mok::epilogue
