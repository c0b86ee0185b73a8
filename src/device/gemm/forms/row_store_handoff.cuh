// The epilogue-warps arrangement's hand-off (epilogue_warps_kernel.cuh) for the forms whose epilogue stores bf16
// rows to `Params::out` (an epilogue::RowStoreOutput): down and dgrad_gate_up inherit it. The consumer stages its
// rows into a hand-off buffer; the epilogue warps store them.
#pragma once

#include <cstdint>

#include "device/epilogue/row_store_epilogue.cuh"
#include "device/gemm/gemm_config.cuh"
#include "device/scheduler/gemm_tile_scheduler.cuh"

namespace mok::gemm {

struct RowStoreHandoff {
    static constexpr int kHandoffBytes = epilogue::kRowStoreHandoffBytes;

    template <class Params>
    __device__ static void handoff_stage(const Params&, const Tile&, const float (&acc)[kNumAccumulators],
                                         uint8_t* buffer, int thread_in_wg) {
        epilogue::stage_row_store(buffer, acc, thread_in_wg);
    }

    template <int kThreads, class Params>
    __device__ static void handoff_store(const Params& p, const Tile& t, const uint8_t* buffer, int row_half,
                                         int thread) {
        epilogue::store_row_store<kThreads>(p.out, t, buffer, row_half, thread);
    }
};

// The same for the down projection, whose rows may go to their sources: the epilogue warps resolve each row half's
// destinations before its hand-off arrives (epilogue::store_resolved_row_store).
struct ResolvedRowStoreHandoff : RowStoreHandoff {
    static constexpr int kHandoffBytes = epilogue::kResolvedRowStoreHandoffBytes;

    // The epilogue threads, before the hand-off of row half `row_half` arrives: resolves the rows' destinations
    // where they are loads. Returns whether it wrote anything (the same in every thread), after which a barrier
    // among them must follow.
    template <int kThreads, class Params>
    __device__ static bool handoff_prepare(const Params& p, const Tile& t, uint8_t* buffer, int row_half, int thread) {
        if (!epilogue::resolves_row_destinations(p.out)) {
            return false;
        }
        epilogue::resolve_row_destinations<kThreads>(p.out, t, buffer, row_half, thread);
        return true;
    }

    template <int kThreads, class Params>
    __device__ static void handoff_store(const Params& p, const Tile& t, const uint8_t* buffer, int row_half,
                                         int thread) {
        epilogue::store_resolved_row_store<kThreads>(p.out, t, buffer, row_half, thread);
    }
};

}  // namespace mok::gemm
