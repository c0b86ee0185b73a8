// The persistent, warp-specialised grouped GEMM kernel, shared by every form (gate/up + SwiGLU, down,
// dgrad, weight gradients). A form supplies what differs -- its Params, scheduler, operand loads, operand
// majorness and epilogue -- and this file supplies the roles, the stage ring and the wgmma mainloop.
//
// Form interface (see forms/*.cuh):
//   struct Params { KernelCommon common; ... };                    grid-invariant, passed by value
//   using Scheduler = ...;  static Scheduler make_scheduler(const Params&);
//   static constexpr Major kMajorA, kMajorB;                      operand layouts in shared memory
//   static constexpr bool kMaskKTail;                             zero K rows past the expert's end (dW forms)
//   static constexpr bool kGatedRows;                             A is rows that may still be arriving (RowGroups)
//   static void prefetch(const Params&);                          tensor-map prefetch, one thread
//   static void load(const Params&, const Tile&, int k_block, uint8_t* a, uint8_t* b, uint64_t* full_barrier);
//   static void epilogue(const Params&, const Tile&, float (&acc)[kNumAccumulators], int row_half, int thread_in_wg,
//                        const epilogue::EpilogueContext&);
// and, optionally (the weight gradients' accumulate mode, which loads main_grad while the K loop runs):
//   static void begin_tile(const Params&, const Tile&, int wg, int thread_in_wg, const EpilogueContext&);
//   static void abandon_tile(...same...);                        after a failed K loop, in place of the epilogue
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/device_status.hpp"
#include "device/comm/ring.cuh"
#include "device/common/bounded_wait.cuh"
#include "device/epilogue/epilogue_context.cuh"
#include "device/gemm/gemm_config.cuh"
#include "device/gemm/operands.cuh"
#include "device/pipeline/tma_pipeline.cuh"
#include "device/ptx/bulk_copy.cuh"
#include "device/ptx/warpgroup.cuh"
#include "device/ptx/wgmma.cuh"
#include "device/scheduler/gemm_tile_scheduler.cuh"
#include "device/scheduler/wave_sync.cuh"

namespace mok::gemm {

// Parameters every form carries: where to report a failed wait, and the wave counter.
struct KernelCommon {
    DeviceStatus* status;    // the launch's error record
    int32_t rank;            // EP rank, for the report
    uint64_t timeout_ns;     // budget of each bounded wait
    uint32_t* wave_counter;  // WaveSync's count, zeroed before the launch; nullptr: waves not aligned
};

// A consumer's wait budget, in units of the launch's timeout (see grouped_gemm_kernel).
inline constexpr uint64_t kConsumerWaitBudgets = 2;

// The wait contexts of the kernel's roles. The consumers wait on the producer, which may itself wait on rows still
// arriving (wait_rows_ready): their waits get twice the budget, so that a timeout names the upstream wait that
// caused it, not the pipeline.
struct RoleWaits {
    device::WaitContext producer;
    device::WaitContext consumer;

    __device__ static RoleWaits of(const KernelCommon& c) {
        return {{c.status, c.rank, c.timeout_ns}, {c.status, c.rank, kConsumerWaitBudgets * c.timeout_ns}};
    }
};

// Shared memory of one CTA. Operand tiles are 1024-byte aligned: the 128-byte swizzle pattern is a function
// of address bits 4-9, which TMA and wgmma must see identically.
template <int kNumStages, int kStagingBytes, int kEpilogueLoadSlots>
struct alignas(1024) GemmSharedStorage {
    using Pipeline = pipeline::TmaPipeline<kNumStages, kNumConsumerWarps>;

    uint8_t a[kNumStages][kStageBytesA];  // (BLOCK_M, BLOCK_K) bf16 per stage
    uint8_t b[kNumStages][kStageBytesB];  // (BLOCK_N, BLOCK_K) bf16 per stage
    // (64, 128) bf16 each, or (64, 32) fp32 main_grad boxes, whose 128-byte swizzle needs 1024-byte alignment.
    alignas(1024) uint8_t staging[kNumConsumerWarpgroups][kStagingBytes];
    typename Pipeline::Storage pipeline;
    uint64_t epilogue_loaded[kNumConsumerWarpgroups][kEpilogueLoadSlots];  // TMA loads into the staging buffer
};

// What the storage needs besides its stages and staging buffers: up to 1 KiB lost to aligning the dynamic
// allocation, and the barriers.
inline constexpr int kGemmSharedSlack = 2 * 1024;

// A form's staging buffer per warpgroup and the TMA loads its epilogue keeps in flight there: what the form declares
// (kCooperativeStagingBytes, kEpilogueLoadSlots; the accumulate mode's main_grad boxes), or a kStagingBytesPerWarpgroup
// buffer loaded in two halves.
template <class Form>
consteval int cooperative_staging_bytes() {
    if constexpr (requires { Form::kCooperativeStagingBytes; }) {
        return Form::kCooperativeStagingBytes;
    } else {
        return kStagingBytesPerWarpgroup;
    }
}

template <class Form>
consteval int epilogue_load_slots() {
    if constexpr (requires { Form::kEpilogueLoadSlots; }) {
        return Form::kEpilogueLoadSlots;
    } else {
        return epilogue::kStagingHalves;
    }
}

// The cooperative kernel's shared memory for `Form`: kStages stages where the staging buffers leave room for them,
// fewer where a form's epilogue takes more (the accumulate mode by loads, whose K loops are short where its main_grad
// traffic matters: weight_grad_epilogue.cuh).
template <class Form>
struct GemmLayout {
    static constexpr int kStagingBytes = cooperative_staging_bytes<Form>();
    static constexpr int kEpilogueLoadSlots = epilogue_load_slots<Form>();
    static constexpr int kNumStages =
        std::min(kStages, (kMaxCtaSharedBytes - kGemmSharedSlack - kNumConsumerWarpgroups * kStagingBytes) /
                              (kStageBytesA + kStageBytesB));
    using Storage = GemmSharedStorage<kNumStages, kStagingBytes, kEpilogueLoadSlots>;
    using Pipeline = typename Storage::Pipeline;
    // Dynamic shared memory to request: the storage plus slack to align its start to 1024 bytes.
    static constexpr size_t kSharedBytes = sizeof(Storage) + alignof(Storage);

    static_assert(kSharedBytes <= kMaxCtaSharedBytes, "the GEMM's shared memory must fit one Hopper CTA");
};

template <class Form>
__device__ __forceinline__ typename GemmLayout<Form>::Storage& shared_storage(uint8_t* raw) {
    using Storage = typename GemmLayout<Form>::Storage;
    const uintptr_t address = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = (address + alignof(Storage) - 1) & ~(uintptr_t{alignof(Storage)} - 1);
    return *reinterpret_cast<Storage*>(aligned);
}

// The pipelined path's gate (RowGroups::tile_ready): row tile m's rows may still be arriving. wait_ring_tile
// acquires the dispatch's release of the tile and fences the proxies, so the TMA loads issued next see the rows.
__device__ __forceinline__ bool wait_rows_ready(const RowGroups& groups, const Tile& tile,
                                                const device::WaitContext& wait_ctx) {
    return groups.tile_ready == nullptr ||
           comm::wait_ring_tile(wait_ctx, groups.tile_ready, tile.m_idx, *groups.ready_sequence);
}

// The producer thread's loop, shared by both arrangements: every tile the scheduler hands out, paced by `waves`,
// gated on its rows where the form's A may still be arriving; per K block a free stage, the bytes it will
// receive, and load(tile, k_block, stage_index, full_barrier) to fill it.
template <class Form, class Scheduler, class Pipe, class LoadFn>
__device__ void produce_tiles(const typename Form::Params& params, Scheduler& scheduler, WaveSync& waves, Pipe& pipe,
                              const device::WaitContext& wait_ctx, uint32_t stage_bytes, LoadFn&& load) {
    typename Pipe::State state;
    int32_t wave = 0;
    for (Tile tile; scheduler.next(tile); ++wave) {
        waves.start_tile(wave);
        if constexpr (Form::kGatedRows) {
            if (!wait_rows_ready(params.groups, tile, wait_ctx)) {
                return;
            }
        }
        for (int k_block = 0; k_block < tile.num_k_blocks; ++k_block) {
            if (!pipe.producer_acquire(wait_ctx, state)) {
                return;
            }
            uint64_t* full = pipe.producer_expect(state, stage_bytes);
            load(tile, k_block, state.index, full);
            state.advance();
        }
    }
}

// The producer thread of the arrangements whose stages each hold a whole tile's A and B block (`Storage` has the
// stage arrays a and b): the cooperative kernel and the epilogue-warps one.
template <class Form, class Storage, class Pipe>
__device__ void run_producer(const typename Form::Params& params, Storage& smem, Pipe& pipe,
                             const device::WaitContext& wait_ctx) {
    auto scheduler = Form::make_scheduler(params);
    WaveSync waves(params.common.wave_counter, scheduler.num_tiles());
    produce_tiles<Form>(params, scheduler, waves, pipe, wait_ctx, kStageBytesA + kStageBytesB,
                        [&](const Tile& tile, int k_block, uint32_t stage, uint64_t* full) {
                            Form::load(params, tile, k_block, smem.a[stage], smem.b[stage], full);
                        });
}

// Zeroes K rows [first_row, BLOCK_K) of the stage: the rows past the end of the expert's segment that a
// weight-gradient K block reads (they belong to the next expert, or to nothing). Both operands are MN-major,
// so each K row is one 128-byte line in every box; warpgroup wg clears its own A box and half of the B boxes,
// then both warpgroups meet so that no wgmma reads a stage before it is clean.
__device__ __forceinline__ void mask_k_tail(uint8_t* stage_a, uint8_t* stage_b, int first_row, int wg,
                                            int thread_in_wg) {
    constexpr int kChunksPerLine = ptx::kSwizzleBytes / 16;
    constexpr int kBBoxesPerWarpgroup = BLOCK_N / kMnBoxElements / kNumConsumerWarpgroups;
    const int num_chunks = (BLOCK_K - first_row) * kChunksPerLine;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int c = thread_in_wg; c < num_chunks; c += kThreadsPerWarpgroup) {
        const int offset = first_row * ptx::kSwizzleBytes + c * 16;
        *reinterpret_cast<uint4*>(stage_a + wg * kMnBoxBytes + offset) = zero;
#pragma unroll
        for (int box = 0; box < kBBoxesPerWarpgroup; ++box) {
            *reinterpret_cast<uint4*>(stage_b + (wg * kBBoxesPerWarpgroup + box) * kMnBoxBytes + offset) = zero;
        }
    }
    // The zeros are generic-proxy writes that wgmma (async proxy) will read.
    ptx::fence_proxy_async_shared_cta();
    ptx::named_barrier_sync(static_cast<uint32_t>(NamedBarrier::kConsumersMask),
                            kNumConsumerWarpgroups * kThreadsPerWarpgroup);
}

// Whether a form's tiles are row tiles of the grouped row space (gate/up, down, dgrad), whose `Tile::num_rows` counts
// the rows of the tile that hold data. The weight gradients' tiles are output tiles, whose K is the expert's rows.
template <class Form>
inline constexpr bool kRowTiles = std::is_same_v<typename Form::Scheduler, GroupedRowScheduler>;

// Whether the 64-row A block of a row tile that begins at `block_first_row` holds no data row: the padding of an
// expert's last row tile, which the plan pads to BLOCK_M. The warpgroup that owns such a block computes nothing for
// it (no epilogue stores a row past `Tile::num_rows`); the loads stay as they are. Measured, it gains 1-2% in the
// down projection where experts are small and nothing in gate/up, whose padded tiles cost their loads and their
// wave, not their MMA (docs/gemm.md, "Padding blocks without MMA"). Broadcast from lane 0, so that ptxas sees a
// warp-uniform branch around the K loop: a K loop on a path it cannot prove uniform gets its wgmma serialised (C7518).
template <class Form, bool kSkipEmptyBlocks>
__device__ __forceinline__ bool block_without_rows(const Tile& tile, int block_first_row) {
    if constexpr (kRowTiles<Form> && kSkipEmptyBlocks) {
        return __shfl_sync(0xffffffffu, tile.num_rows <= block_first_row ? 1 : 0, 0) != 0;
    } else {
        return false;
    }
}

// The K loop of a warpgroup whose A block holds no data row: each stage is awaited, so that the ring's phases
// stay in step with the other warpgroup's, and handed back at once, unread. The accumulator is left as it is: its
// rows are padding, which the epilogues compute on but never store, as they always did with the padding rows' loaded
// values. Zeroing it here would define accumulator registers outside wgmma, and ptxas would serialise every wgmma
// of the kernel for it (C7515).
template <class Pipe>
__device__ __forceinline__ bool skip_mainloop(const Tile& tile, Pipe& pipe, typename Pipe::State& state,
                                              const device::WaitContext& wait_ctx) {
    const uint32_t lane = threadIdx.x % 32;
    for (int k_block = 0; k_block < tile.num_k_blocks; ++k_block) {
        if (!pipe.consumer_wait(wait_ctx, state)) {
            return false;
        }
        pipe.consumer_release(state.index, lane);
        state.advance();
    }
    return true;
}

// One K block: four m64nBLOCK_Nk16 wgmma over the stage's BLOCK_K = 64, on the stage's 64-row A block `a_block`.
template <class Form>
__device__ __forceinline__ void mma_stage(const uint8_t* stage_a, const uint8_t* stage_b, int a_block,
                                          float (&acc)[kNumAccumulators], bool accumulate) {
#pragma unroll
    for (int k_step = 0; k_step < BLOCK_K / WGMMA_K; ++k_step) {
        const uint64_t desc_a = a_descriptor<Form::kMajorA>(stage_a, a_block, k_step);
        const uint64_t desc_b = b_descriptor<Form::kMajorB>(stage_b, k_step);
        ptx::WgmmaBf16<BLOCK_N>::template mma<static_cast<int>(Form::kMajorA), static_cast<int>(Form::kMajorB)>(
            desc_a, desc_b, acc, accumulate || k_step > 0);
    }
}

// The K loop of one tile into `acc`. wgmma of block k runs while block k+1's barrier is awaited; a stage is
// handed back only once the wgmma that read it has completed (wait_group<1> after the next block's commit).
// The accumulator is touched only by wgmma here -- no reads, no zeroing -- so the compiler keeps it in place
// and injects no extra waits (a tile with no K blocks is the epilogue's business). Shared by both arrangements:
// `Storage` has the stage arrays a and b, `Pipe` the wait and release of a stage; the warpgroup reads A block
// `a_block` of each stage (its own 64 rows; the ping-pong arrangement's stages hold one block), which begins at row
// `block_first_row` of the tile; a block without data rows takes skip_mainloop instead, unless the caller says
// otherwise (kSkipEmptyBlocks: the test needs the tile's row count, so a register, in the consumer).
template <class Form, bool kSkipEmptyBlocks = true, class Storage, class Pipe>
__device__ __forceinline__ bool run_mainloop(const Tile& tile, Storage& smem, Pipe& pipe, typename Pipe::State& state,
                                             const device::WaitContext& wait_ctx, int a_block, int block_first_row,
                                             int wg, int thread_in_wg, float (&acc)[kNumAccumulators]) {
    if (block_without_rows<Form, kSkipEmptyBlocks>(tile, block_first_row)) {
        return skip_mainloop(tile, pipe, state, wait_ctx);
    }
    const uint32_t lane = threadIdx.x % 32;
    uint32_t previous_stage = 0;
    for (int k_block = 0; k_block < tile.num_k_blocks; ++k_block) {
        if (!pipe.consumer_wait(wait_ctx, state)) {
            return false;
        }
        if constexpr (Form::kMaskKTail) {
            const int rows_left = tile.num_rows - k_block * BLOCK_K;
            if (rows_left < BLOCK_K) {
                mask_k_tail(smem.a[state.index], smem.b[state.index], rows_left, wg, thread_in_wg);
            }
        }
        ptx::wgmma_fence();
        mma_stage<Form>(smem.a[state.index], smem.b[state.index], a_block, acc, k_block > 0);
        ptx::wgmma_commit_group();
        ptx::wgmma_wait_group<1>();
        if (k_block > 0) {
            pipe.consumer_release(previous_stage, lane);
        }
        previous_stage = state.index;
        state.advance();
    }
    ptx::wgmma_wait_group<0>();
    if (tile.num_k_blocks > 0) {
        pipe.consumer_release(previous_stage, lane);
    }
    ptx::fence_accumulators(acc);
    return true;
}

// Epilogues that store by TMA (the weight gradients') leave their last stores draining; their source, the staging
// buffer, must stay until they have read it, so the consumer waits for that before it exits. For the other forms
// nothing is pending and the wait returns at once.
__device__ __forceinline__ void drain_epilogue_stores(int thread_in_wg) {
    if (thread_in_wg == 0) {
        ptx::bulk_wait_group_read<0>();
    }
}

template <class Form>
concept HasTileBegin = requires(const typename Form::Params& p, const Tile& t, const epilogue::EpilogueContext& e) {
    Form::begin_tile(p, t, 0, 0, e);
    Form::abandon_tile(p, t, 0, 0, e);
};

template <class Form>
__device__ void run_consumer(const typename Form::Params& params, typename GemmLayout<Form>::Storage& smem,
                             typename GemmLayout<Form>::Pipeline& pipe, const device::WaitContext& wait_ctx, int wg) {
    const int thread_in_wg = static_cast<int>(threadIdx.x) % kThreadsPerWarpgroup;
    const epilogue::EpilogueContext epilogue_ctx{smem.staging[wg], smem.epilogue_loaded[wg], &wait_ctx, wg, false};
    auto scheduler = Form::make_scheduler(params);
    typename GemmLayout<Form>::Pipeline::State state;
    for (Tile tile; scheduler.next(tile);) {
        if constexpr (HasTileBegin<Form>) {
            Form::begin_tile(params, tile, wg, thread_in_wg, epilogue_ctx);
        }
        float acc[kNumAccumulators];
        if (!run_mainloop<Form>(tile, smem, pipe, state, wait_ctx, wg, wg * WGMMA_M, wg, thread_in_wg, acc)) {
            if constexpr (HasTileBegin<Form>) {
                Form::abandon_tile(params, tile, wg, thread_in_wg, epilogue_ctx);
            }
            drain_epilogue_stores(thread_in_wg);
            return;
        }
        Form::epilogue(params, tile, acc, wg, thread_in_wg, epilogue_ctx);
    }
    drain_epilogue_stores(thread_in_wg);
}

template <class Form>
__global__ void __launch_bounds__(kNumThreads, 1)
    grouped_gemm_kernel(const __grid_constant__ typename Form::Params params) {
    extern __shared__ uint8_t smem_raw[];
    auto& smem = shared_storage<Form>(smem_raw);
    typename GemmLayout<Form>::Pipeline pipe(smem.pipeline);
    if (threadIdx.x == 0) {
        pipe.init();
        for (auto& warpgroup_barriers : smem.epilogue_loaded) {
            for (uint64_t& loaded : warpgroup_barriers) {
                ptx::mbarrier_init(&loaded, 1);  // the loading thread's arrive_expect_tx
            }
        }
        ptx::fence_mbarrier_init();
        Form::prefetch(params);
    }
    __syncthreads();
    const RoleWaits waits = RoleWaits::of(params.common);
    const int warpgroup = static_cast<int>(threadIdx.x) / kThreadsPerWarpgroup;
    if (warpgroup == static_cast<int>(WarpgroupRole::kProducer)) {
        ptx::warpgroup_release_registers<kProducerRegisters>();
        if (threadIdx.x == 0) {
            run_producer<Form>(params, smem, pipe, waits.producer);
        }
    } else {
        ptx::warpgroup_claim_registers<kConsumerRegisters>();
        run_consumer<Form>(params, smem, pipe, waits.consumer, warpgroup - 1);
    }
}

}  // namespace mok::gemm
