// The routing plan on the GPU: the shared plan code (src/plan/routing_plan.hpp) run with one thread per item, in
// four kernels (one launch each; a launch may drive several virtual ranks, one slice of blocks per rank).
//
//   count   block (source rank, group of chunks): waits for the source's ids (route_ready), counts each chunk
//           with count_chunk (one warp per chunk, its lanes on interleaved slots, shared-memory integer atomics,
//           then one coalesced store of the group's [E][chunks] counts), and checks every token of the group
//           with check_token
//   layout  one block of kLayoutThreads: scan_expert's scan (one warp per expert), then layout_owner's (one warp
//           per owner rank), each a warp-wide prefix sum of what the shared code adds one by one
//   place   one thread per (source rank, token, slot): locate_slot, then place_slot (this rank owns the expert),
//           the slot's SlotLocation (this rank is the source) and its owned_slot_rows entry (every slot)
//   finish  one thread per item: fill_segment_tail per local expert, clear_tile per tile, padding rows past the
//           rank's segments
// Integer adds commute and associate, so neither the counts (atomics in any order) nor the warp scans (sums
// grouped by lanes) depend on how the GPU splits the work; every other table entry has one writer. The results
// are the host plan's tables bit for bit (tests/device/plan).
//
// Errors never trap: invalid routing records kInvalidRouting (rank = the token's rank, observed = token,
// expected = slot); an owner that needs more rows than the table holds records kScheduleOverflow (rank = that
// owner, observed = its padded rows, expected = capacity). Every rank checks every rank's tokens and every
// owner's layout, so all ranks reach the same verdict and skip the step's remaining kernels together.
#pragma once

#include <cstdint>

#include "common/device_status.hpp"
#include "device/comm/signals.cuh"
#include "device/common/bounded_wait.cuh"
#include "device/common/warp.cuh"
#include "device/layout/transport_layout.hpp"
#include "plan/routing_plan.hpp"

namespace mok::device_plan {

using device::kFullWarpMask;
using device::kWarpSize;

inline constexpr int32_t kPlanThreads = 256;
// The layout kernel is one block per rank, so it takes the largest block: its warps scan experts side by side.
inline constexpr int32_t kLayoutThreads = 1024;
// The count kernel's shared histogram ([chunks per block][E] int32) stays within 32 KiB, the default dynamic
// shared memory of a block, for any E up to 8192; beyond that, one chunk per block.
inline constexpr int32_t kCountHistogramEntries = 8192;
// Chunks per count block: one warp counts each chunk, so a block of kPlanThreads holds that many, and the grid
// has a block per eight chunks of every source (8 blocks per source at 4096 tokens).
inline constexpr int32_t kMaxChunksPerCountBlock = kPlanThreads / static_cast<int32_t>(kWarpSize);

struct PlannerParams {
    plan::PlanShape shape;           // rank = this rank
    const char* window;              // this rank's symmetric window (local address): the gathered ids
    layout::SymmetricLayout layout;  // its offsets
    plan::PlanTables tables;         // this rank's plan, in its local memory
    const layout::TransportControl* control;
    device::WaitContext ctx;
    // The copy teams' join counters of this rank (layout::LocalLayout): reset at every step's plan, so that a
    // step that failed half-way through a dispatch or push leaves none behind.
    uint32_t* ring_parts[layout::kNumRings];
    uint32_t* push_parts;
};

MOK_HOST_DEVICE MOK_INLINE int32_t chunks_per_count_block(const plan::PlanShape& s) {
    int32_t per_block = kCountHistogramEntries / s.num_experts;
    per_block = per_block < kMaxChunksPerCountBlock ? per_block : kMaxChunksPerCountBlock;
    per_block = per_block < s.num_chunks() ? per_block : s.num_chunks();
    return per_block > 0 ? per_block : 1;
}

MOK_HOST_DEVICE MOK_INLINE int32_t count_groups_per_source(const plan::PlanShape& s) {
    return static_cast<int32_t>(plan::ceil_div(s.num_chunks(), chunks_per_count_block(s)));
}

__device__ __forceinline__ const int32_t* gathered_ids(const PlannerParams& p, int32_t src_rank) {
    const int32_t parity = static_cast<int32_t>(p.control->step & 1);
    return reinterpret_cast<const int32_t*>(p.window + p.layout.route_ids_of(parity, src_rank));
}

__device__ __forceinline__ const float* gathered_weights(const PlannerParams& p, int32_t src_rank) {
    const int32_t parity = static_cast<int32_t>(p.control->step & 1);
    return reinterpret_cast<const float*>(p.window + p.layout.route_weights_of(parity, src_rank));
}

// The wait context with the report's rank replaced: routing and overflow errors name the rank they concern.
__device__ __forceinline__ device::WaitContext context_for_rank(const device::WaitContext& ctx, int32_t rank) {
    device::WaitContext named = ctx;
    named.rank = rank;
    return named;
}

// Count block `group` of source `src`; block-wide. `histogram` is [chunks per block][E] int32 shared memory.
__device__ __forceinline__ void count_group(const PlannerParams& p, int32_t src, int32_t group, int32_t* histogram) {
    const plan::PlanShape& s = p.shape;
    const int32_t per_block = chunks_per_count_block(s);
    const int32_t first_chunk = group * per_block;
    const int32_t last_chunk = first_chunk + per_block < s.num_chunks() ? first_chunk + per_block : s.num_chunks();
    const int32_t num_chunks = last_chunk - first_chunk;
    const int32_t* ids = gathered_ids(p, src);

    for (int32_t i = threadIdx.x; i < num_chunks * s.num_experts; i += blockDim.x) {
        histogram[i] = 0;
    }
    __syncthreads();
    const auto warp = static_cast<int32_t>(threadIdx.x / kWarpSize);
    const uint32_t lane = threadIdx.x % kWarpSize;
    if (warp < num_chunks) {
        int32_t* row = histogram + warp * s.num_experts;
        plan::count_chunk(
            s, ids, first_chunk + warp,
            [&](int32_t e) {
                // Ids were not validated yet (check_token runs alongside): an id out of range is counted nowhere,
                // and the error recorded below stops the step before the counts are used.
                if (e >= 0 && e < s.num_experts) {
                    atomicAdd(&row[e], 1);
                }
            },
            lane, kWarpSize);
    }
    __syncthreads();
    // Chunks of one expert are consecutive in the [E][R][C] table: consecutive threads store consecutive chunks.
    for (int32_t i = threadIdx.x; i < num_chunks * s.num_experts; i += blockDim.x) {
        const int32_t e = i / num_chunks;
        const int32_t c = i % num_chunks;
        p.tables.chunk_counts[s.chunk_index(e, src, first_chunk + c)] = histogram[c * s.num_experts + e];
    }
}

// check_token on every token of the group.
__device__ __forceinline__ void check_group(const PlannerParams& p, int32_t src, int32_t group) {
    const plan::PlanShape& s = p.shape;
    const int64_t tokens_per_group = static_cast<int64_t>(chunks_per_count_block(s)) * plan::kPlanChunkTokens;
    const int64_t first = group * tokens_per_group;
    const int64_t last = first + tokens_per_group < s.tokens_per_rank ? first + tokens_per_group : s.tokens_per_rank;
    const int32_t* ids = gathered_ids(p, src);
    const float* weights = gathered_weights(p, src);
    const device::WaitContext report = context_for_rank(p.ctx, src);
    for (int64_t t = first + threadIdx.x; t < last; t += blockDim.x) {
        const plan::TokenCheckResult r =
            plan::check_token(ids + t * s.top_k, weights + t * s.top_k, s.top_k, s.num_experts);
        if (r.check != plan::TokenCheck::kOk) {
            device::record_error(report, DeviceErrorCode::kInvalidRouting, WaitSite::kNone, t, r.slot);
        }
    }
}

// Zeroes the join counters of every tile of the row space (one block).
__device__ __forceinline__ void reset_tile_joins(const PlannerParams& p) {
    const int64_t tiles = p.shape.capacity_rows / plan::kExpertRowAlignment;
    for (int64_t t = threadIdx.x; t < tiles; t += blockDim.x) {
        for (int32_t ring = 0; ring < layout::kNumRings; ++ring) {
            p.ring_parts[ring][t] = 0;
        }
        p.push_parts[t] = 0;
    }
}

// An exclusive prefix sum over n values, one warp: value(i) gives the i-th (0 past n), store(i, prefix) takes
// the sum of values 0 .. i-1, for i < n. Returns the total to every lane. Each step loads kScanBatch values
// per lane before it adds any: one load latency per batch, not per value.
inline constexpr int32_t kScanBatch = 4;
template <typename T, typename ValueFn, typename StoreFn>
__device__ __forceinline__ T warp_exclusive_scan(int64_t n, uint32_t lane, ValueFn&& value, StoreFn&& store) {
    constexpr int64_t kLanes = kWarpSize;
    T carry = 0;
    for (int64_t first = 0; first < n; first += kScanBatch * kLanes) {
        T batch[kScanBatch];
#pragma unroll
        for (int32_t j = 0; j < kScanBatch; ++j) {
            const int64_t i = first + j * kLanes + lane;
            batch[j] = i < n ? value(i) : T{0};
        }
#pragma unroll
        for (int32_t j = 0; j < kScanBatch; ++j) {
            const int64_t i = first + j * kLanes + lane;
            const T inclusive = device::warp_inclusive_sum(batch[j], lane);
            if (i < n) {
                store(i, carry + inclusive - batch[j]);
            }
            carry += __shfl_sync(kFullWarpMask, inclusive, kWarpSize - 1);
        }
    }
    return carry;
}

// plan::scan_expert for expert e, by one warp: its [R][C] counts are contiguous in the [E][R][C] table, so the
// canonical (source rank, chunk) order is index order.
__device__ __forceinline__ void scan_expert_warp(const PlannerParams& p, int32_t e, uint32_t lane) {
    const plan::PlanShape& s = p.shape;
    const plan::PlanTables& t = p.tables;
    const int64_t base = s.chunk_index(e, 0, 0);
    const int32_t total = warp_exclusive_scan<int32_t>(
        static_cast<int64_t>(s.ep_size) * s.num_chunks(), lane, [&](int64_t i) { return t.chunk_counts[base + i]; },
        [&](int64_t i, int32_t offset) { t.chunk_offsets[base + i] = offset; });
    if (lane == 0) {
        t.expert_rows[e] = total;
    }
}

// plan::layout_owner for `owner`, by one warp: the same segment starts (clamped to int32 as there) and status.
__device__ __forceinline__ plan::PlanStatus layout_owner_warp(const PlannerParams& p, int32_t owner, uint32_t lane) {
    const plan::PlanShape& s = p.shape;
    const plan::PlanTables& t = p.tables;
    const int32_t first = owner * s.num_local_experts();
    const int64_t total = warp_exclusive_scan<int64_t>(
        s.num_local_experts(), lane,
        [&](int64_t l) { return plan::round_up(t.expert_rows[first + l], plan::kExpertRowAlignment); },
        [&](int64_t l, int64_t start) {
            t.segment_begin[first + l] = static_cast<int32_t>(start < INT32_MAX ? start : INT32_MAX);
        });
    if (lane == 0) {
        t.owner_padded_rows[owner] = static_cast<int32_t>(total < INT32_MAX ? total : INT32_MAX);
    }
    return total <= s.capacity_rows ? plan::PlanStatus::kOk : plan::PlanStatus::kScheduleOverflow;
}

// scan_expert for every expert, then layout_owner for every owner; one block, a warp per expert and per owner.
__device__ __forceinline__ void layout_all(const PlannerParams& p) {
    const plan::PlanShape& s = p.shape;
    const auto warp = static_cast<int32_t>(threadIdx.x / kWarpSize);
    const uint32_t lane = threadIdx.x % kWarpSize;
    const auto num_warps = static_cast<int32_t>(blockDim.x / kWarpSize);
    for (int32_t e = warp; e < s.num_experts; e += num_warps) {
        scan_expert_warp(p, e, lane);
    }
    // The expert totals, written by other warps, are visible to the whole block after the barrier.
    __syncthreads();
    for (int32_t owner = warp; owner < s.ep_size; owner += num_warps) {
        const plan::PlanStatus status = layout_owner_warp(p, owner, lane);
        if (lane != 0) {
            continue;
        }
        if (owner == s.rank) {
            *p.tables.status = static_cast<int32_t>(status);
        }
        if (status != plan::PlanStatus::kOk) {
            device::record_error(context_for_rank(p.ctx, owner), DeviceErrorCode::kScheduleOverflow, WaitSite::kNone,
                                 p.tables.owner_padded_rows[owner], s.capacity_rows);
        }
    }
}

// Item `item` of the place kernel: (source rank, token, slot) in that order.
__device__ __forceinline__ void place_item(const PlannerParams& p, int64_t item) {
    const plan::PlanShape& s = p.shape;
    const int32_t src = static_cast<int32_t>(item / s.slots_per_rank());
    const int64_t flat = item % s.slots_per_rank();
    const int64_t token = flat / s.top_k;
    const int32_t slot = static_cast<int32_t>(flat % s.top_k);
    const int32_t* ids = gathered_ids(p, src);
    const int32_t e = ids[flat];
    const bool mine_as_source = src == s.rank;
    if (e == plan::kUnusedSlot) {
        if (mine_as_source) {
            p.tables.slot_location[flat] = plan::SlotLocation{-1, -1};
        }
        plan::record_owned_slot(s, src, token, slot, plan::SlotLocation{-1, -1}, p.tables);
        return;
    }
    const bool mine_as_owner = s.owner_of(e) == s.rank;
    if (!mine_as_owner && !mine_as_source) {
        plan::record_owned_slot(s, src, token, slot, plan::SlotLocation{s.owner_of(e), -1}, p.tables);
        return;
    }
    const plan::SlotLocation where = plan::locate_slot(s, ids, src, token, slot, p.tables);
    if (mine_as_owner) {
        plan::place_slot(s, src, token, slot, where, p.tables);
    }
    plan::record_owned_slot(s, src, token, slot, where, p.tables);
    if (mine_as_source) {
        p.tables.slot_location[flat] = where;
    }
}

// Item `item` of the finish kernel: local expert, tile and row at once (the three ranges overlap from 0).
__device__ __forceinline__ void finish_item(const PlannerParams& p, int64_t item) {
    const plan::PlanShape& s = p.shape;
    if (item < s.num_local_experts()) {
        plan::fill_segment_tail(s, static_cast<int32_t>(item), p.tables);
    }
    if (item < s.max_tiles()) {
        plan::clear_tile(s, item, p.tables);
    }
    if (item >= p.tables.owner_padded_rows[s.rank] && item < s.capacity_rows) {
        p.tables.row_source[item] = plan::RowSource::padding();
    }
}

// Items of the finish kernel: the longest of its three ranges.
MOK_HOST_DEVICE MOK_INLINE int64_t finish_items(const plan::PlanShape& s) {
    const int64_t rows = s.capacity_rows > s.max_tiles() ? s.capacity_rows : s.max_tiles();
    return rows > s.num_local_experts() ? rows : s.num_local_experts();
}

}  // namespace mok::device_plan
