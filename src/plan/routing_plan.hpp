// The routing plan: where every routed (token, slot) row goes, computed by the same code on the CPU and GPU.
//
// Contract (docs/semantics.md, "Canonical order"): the rows of an expert are ordered by (source rank, token,
// slot). Each expert's rows form one segment, padded at its end to kExpertRowAlignment rows so that a GEMM
// M tile never spans two experts; segments follow each other in local-expert order. The padding rows carry
// RowSource::padding() and are never read as data.
//
// Every rank all-gathers every rank's expert ids and then computes, with integer arithmetic only:
//   1. count_chunk      rows per (global expert, source rank, token chunk)   [E][R][C]
//   2. scan_expert      each chunk's first row inside its expert, and rows per expert
//   3. layout_owner     padded segment starts of an owner rank's experts; overflow check
//   4. locate_slot      the (owner rank, row) of any (source rank, token, slot)
// from which the owner fills its row table (place_slot), the row of every slot it owns (owned_slot_rows, whose
// entries for one source token name all of that token's rows here: the dispatch pulls such a row once and stores it
// to each of them) and M-tile table (fill_tiles), and a source fills the inverse map of its own slots (SlotLocation).
// Every function below is a pure function of its inputs: the GPU runs it with one thread per item, the CPU with a loop,
// and the results are identical by construction. Chunks bound the work of locate_slot (it counts earlier equal ids
// inside one chunk) and give the GPU parallelism for the counts.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/host_device.hpp"

namespace mok::plan {

// M tile of the grouped GEMMs: every expert segment is padded to a multiple of it.
inline constexpr int kExpertRowAlignment = 128;
// Tokens per counting chunk. 64 tokens x k slots keeps locate_slot's in-chunk scan to a few hundred ids.
inline constexpr int kPlanChunkTokens = 64;
inline constexpr int32_t kUnusedSlot = -1;

MOK_HOST_DEVICE MOK_INLINE int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}
MOK_HOST_DEVICE MOK_INLINE int64_t round_up(int64_t a, int64_t b) {
    return ceil_div(a, b) * b;
}

// Where a row of an owner's expert-major buffer comes from.
struct RowSource {
    int32_t src_rank;    // rank whose x row it is; -1 for a padding row
    int32_t token_slot;  // token * top_k + slot on that rank; -1 for a padding row

    MOK_HOST_DEVICE static RowSource padding() { return {-1, -1}; }
    MOK_HOST_DEVICE bool is_padding() const { return src_rank < 0; }
};

// Where a source rank's (token, slot) row is processed: the inverse of RowSource.
struct SlotLocation {
    int32_t rank;  // owner of the slot's expert; -1 for an unused slot
    int32_t row;   // row in the owner's expert-major buffer; -1 for an unused slot
};

enum class PlanStatus : int32_t {
    kOk = 0,
    kScheduleOverflow = 1,  // an owner needs more padded rows than capacity_rows
};

struct PlanShape {
    int32_t ep_size = 1;          // R
    int32_t rank = 0;             // the rank this plan is for (as owner and as source)
    int64_t tokens_per_rank = 0;  // T
    int32_t top_k = 1;            // k
    int32_t num_experts = 1;      // E, global
    int64_t capacity_rows = 0;    // rows the row table holds, a multiple of kExpertRowAlignment
    int64_t minibatch_rows = 0;   // rows per signalling unit, a multiple of kExpertRowAlignment
    int64_t ring_rows = 0;        // rows in the token ring, a multiple of minibatch_rows

    MOK_HOST_DEVICE int32_t num_local_experts() const { return num_experts / ep_size; }
    MOK_HOST_DEVICE int32_t num_chunks() const {
        return static_cast<int32_t>(ceil_div(tokens_per_rank, kPlanChunkTokens));
    }
    MOK_HOST_DEVICE int64_t slots_per_rank() const { return tokens_per_rank * top_k; }
    MOK_HOST_DEVICE int32_t owner_of(int32_t expert) const { return expert / num_local_experts(); }
    MOK_HOST_DEVICE int64_t max_tiles() const { return capacity_rows / kExpertRowAlignment; }
    // Index into the [E][R][C] count and offset tables.
    MOK_HOST_DEVICE int64_t chunk_index(int32_t expert, int32_t src_rank, int32_t chunk) const {
        return (static_cast<int64_t>(expert) * ep_size + src_rank) * num_chunks() + chunk;
    }
};

// The tables one rank's plan fills. Sizes are in PlanTableSizes; host and device share this struct.
struct PlanTables {
    int32_t* chunk_counts;        // [E][R][C]  rows of expert e from source r's token chunk c
    int32_t* chunk_offsets;       // [E][R][C]  first row of that chunk inside expert e's (unpadded) rows
    int32_t* expert_rows;         // [E]        routed rows per global expert
    int32_t* segment_begin;       // [E]        padded start of expert e inside its owner's row space
    int32_t* owner_padded_rows;   // [R]        padded rows each owner holds (its segments end to end)
    RowSource* row_source;        // [capacity_rows]  this rank as owner: the source of each row
    int32_t* tile_expert;         // [capacity_rows / kExpertRowAlignment]  local expert of each M tile; -1 past the end
    SlotLocation* slot_location;  // [T * k]    this rank as source: where each of its slots is processed
    int32_t* owned_slot_rows;     // [R][T * k] this rank as owner: the row of each source rank's slot; -1 where
                                  //            the slot is unused or its expert lives on another rank
    int32_t* status;              // [1]        PlanStatus
};

struct PlanTableSizes {
    int64_t chunk_entries;  // E * R * C
    int64_t experts;        // E
    int64_t ranks;          // R
    int64_t rows;           // capacity_rows
    int64_t tiles;          // capacity_rows / kExpertRowAlignment
    int64_t slots;          // T * k
    int64_t all_slots;      // R * T * k
};

MOK_HOST_DEVICE MOK_INLINE PlanTableSizes table_sizes(const PlanShape& s) {
    return {static_cast<int64_t>(s.num_experts) * s.ep_size * s.num_chunks(),
            s.num_experts,
            s.ep_size,
            s.capacity_rows,
            s.max_tiles(),
            s.slots_per_rank(),
            s.ep_size * s.slots_per_rank()};
}

// Rows the schedule table needs in the worst case: every slot of every rank on this rank's experts -- a token
// names an expert at most once, so it sends a rank at most min(k, E/R) rows -- plus the padding of each segment,
// less than one row tile for every local expert that gets rows (rows may spread over all of them).
MOK_HOST_DEVICE MOK_INLINE int64_t worst_case_rows(int32_t ep_size, int64_t tokens_per_rank, int32_t top_k,
                                                   int32_t num_local_experts) {
    const int32_t slots_per_token = top_k < num_local_experts ? top_k : num_local_experts;
    const int64_t rows = static_cast<int64_t>(ep_size) * tokens_per_rank * slots_per_token;
    const int64_t padded_segments = rows < num_local_experts ? rows : num_local_experts;
    return round_up(rows, kExpertRowAlignment) + padded_segments * kExpertRowAlignment;
}

// The schedule table's rows for Config::schedule_capacity_factor (host side: the capacity is chosen before any
// launch). 0 means the worst case, which never overflows; otherwise the balanced load (T * k rows per owner)
// times the factor, plus a row tile of padding per local expert, never more than the worst case.
inline int64_t schedule_capacity_rows(int32_t ep_size, int64_t tokens_per_rank, int32_t top_k,
                                      int32_t num_local_experts, double capacity_factor) {
    const int64_t worst_case = worst_case_rows(ep_size, tokens_per_rank, top_k, num_local_experts);
    if (capacity_factor == 0.0) {
        return worst_case;
    }
    const auto balanced =
        static_cast<int64_t>(std::ceil(capacity_factor * static_cast<double>(tokens_per_rank * top_k)));
    const int64_t rows =
        round_up(balanced, kExpertRowAlignment) + static_cast<int64_t>(num_local_experts) * kExpertRowAlignment;
    return rows < worst_case ? rows : worst_case;
}

// Routing-row validation shared by the API (CPU) and the device planner (GPU): one token's k ids and weights.
enum class TokenCheck : int32_t {
    kOk = 0,
    kExpertOutOfRange,  // an id outside [-1, E)
    kRepeatedExpert,    // the same expert twice in one token
    kNonFiniteWeight,   // a NaN or infinite router weight in a used slot
};

struct TokenCheckResult {
    TokenCheck check;
    int32_t slot;  // the offending slot
};

MOK_HOST_DEVICE MOK_INLINE bool is_finite(float v) {
    // Exponent all ones means Inf or NaN; written on the bits so both compilers agree under any math flags.
    uint32_t bits;
    static_assert(sizeof(bits) == sizeof(v));
    __builtin_memcpy(&bits, &v, sizeof(bits));
    return (bits & 0x7f800000u) != 0x7f800000u;
}

MOK_HOST_DEVICE MOK_INLINE TokenCheckResult check_token(const int32_t* ids, const float* weights, int32_t top_k,
                                                        int32_t num_experts) {
    for (int32_t j = 0; j < top_k; ++j) {
        const int32_t e = ids[j];
        if (e < kUnusedSlot || e >= num_experts) {
            return {TokenCheck::kExpertOutOfRange, j};
        }
        if (e == kUnusedSlot) {
            continue;
        }
        for (int32_t i = 0; i < j; ++i) {
            if (ids[i] == e) {
                return {TokenCheck::kRepeatedExpert, j};
            }
        }
        if (!is_finite(weights[j])) {
            return {TokenCheck::kNonFiniteWeight, j};
        }
    }
    return {TokenCheck::kOk, -1};
}

// Ids count_chunk loads before it counts any of them: independent loads in flight rather than one latency per id.
inline constexpr int32_t kCountBatch = 4;

// Step 1. Counts the slots of source `src_rank`'s token chunk `chunk` per expert, through `add(expert)`: a
// plain increment on the CPU, a shared-memory integer atomic on the GPU (integer sums are order-free).
// `ids` is that rank's [T, k] expert ids. A caller counts the chunk's slots first, first + stride, ...: all of
// them by default; the GPU splits a chunk over a warp's lanes (first = lane, stride = 32), whose counts add up to
// the chunk's.
template <typename AddFn>
MOK_HOST_DEVICE MOK_INLINE void count_chunk(const PlanShape& s, const int32_t* ids, int32_t chunk, AddFn&& add,
                                            int64_t first = 0, int64_t stride = 1) {
    const int64_t begin = static_cast<int64_t>(chunk) * kPlanChunkTokens * s.top_k;
    const int64_t end_token = (static_cast<int64_t>(chunk) + 1) * kPlanChunkTokens;
    const int64_t end = (end_token < s.tokens_per_rank ? end_token : s.tokens_per_rank) * s.top_k;
    for (int64_t i = begin + first; i < end; i += kCountBatch * stride) {
        int32_t batch[kCountBatch];
        for (int32_t j = 0; j < kCountBatch; ++j) {
            const int64_t at = i + j * stride;
            batch[j] = at < end ? ids[at] : kUnusedSlot;
        }
        for (int32_t j = 0; j < kCountBatch; ++j) {
            if (batch[j] != kUnusedSlot) {
                add(batch[j]);
            }
        }
    }
}

// Step 2. For one expert: exclusive scan of its chunk counts in (source rank, chunk) order -- the canonical
// order -- and its total.
MOK_HOST_DEVICE MOK_INLINE void scan_expert(const PlanShape& s, int32_t expert, const PlanTables& t) {
    int32_t running = 0;
    for (int32_t r = 0; r < s.ep_size; ++r) {
        for (int32_t c = 0; c < s.num_chunks(); ++c) {
            const int64_t idx = s.chunk_index(expert, r, c);
            t.chunk_offsets[idx] = running;
            running += t.chunk_counts[idx];
        }
    }
    t.expert_rows[expert] = running;
}

// Step 3. For one owner rank: its experts' padded segment starts, end to end in local-expert order. Returns
// kScheduleOverflow when they do not fit the row table.
MOK_HOST_DEVICE MOK_INLINE PlanStatus layout_owner(const PlanShape& s, int32_t owner, const PlanTables& t) {
    int64_t running = 0;
    const int32_t first = owner * s.num_local_experts();
    for (int32_t l = 0; l < s.num_local_experts(); ++l) {
        t.segment_begin[first + l] = static_cast<int32_t>(running < INT32_MAX ? running : INT32_MAX);
        running += round_up(t.expert_rows[first + l], kExpertRowAlignment);
    }
    t.owner_padded_rows[owner] = static_cast<int32_t>(running < INT32_MAX ? running : INT32_MAX);
    return running <= s.capacity_rows ? PlanStatus::kOk : PlanStatus::kScheduleOverflow;
}

// Step 4. Where source `src_rank`'s slot (token, slot) is processed. `ids` is that rank's [T, k] ids.
// Its row is the expert's segment start, plus the rows of earlier chunks, plus the earlier slots of the same
// expert inside its own chunk (at most one per token, since a token names an expert at most once).
MOK_HOST_DEVICE MOK_INLINE SlotLocation locate_slot(const PlanShape& s, const int32_t* ids, int32_t src_rank,
                                                    int64_t token, int32_t slot, const PlanTables& t) {
    const int64_t flat = token * s.top_k + slot;
    const int32_t e = ids[flat];
    if (e == kUnusedSlot) {
        return {-1, -1};
    }
    const int32_t chunk = static_cast<int32_t>(token / kPlanChunkTokens);
    int32_t earlier = 0;
    for (int64_t i = static_cast<int64_t>(chunk) * kPlanChunkTokens * s.top_k; i < flat; ++i) {
        earlier += ids[i] == e ? 1 : 0;
    }
    const int64_t row =
        static_cast<int64_t>(t.segment_begin[e]) + t.chunk_offsets[s.chunk_index(e, src_rank, chunk)] + earlier;
    return {s.owner_of(e), static_cast<int32_t>(row)};
}

// The owner's row table entry for one of its slots (call only when locate_slot named this rank).
MOK_HOST_DEVICE MOK_INLINE void place_slot(const PlanShape& s, int32_t src_rank, int64_t token, int32_t slot,
                                           SlotLocation where, const PlanTables& t) {
    // The guard keeps an overflowing plan (status kScheduleOverflow) from writing past the table.
    if (where.row >= 0 && where.row < s.capacity_rows) {
        t.row_source[where.row] = RowSource{src_rank, static_cast<int32_t>(token * s.top_k + slot)};
    }
}

// The owner's entry for source `src_rank`'s slot (token, slot) in owned_slot_rows: its row where locate_slot named
// this rank (and the row fits the table), else -1. Every slot of every source is written, every step.
MOK_HOST_DEVICE MOK_INLINE void record_owned_slot(const PlanShape& s, int32_t src_rank, int64_t token, int32_t slot,
                                                  SlotLocation where, const PlanTables& t) {
    const bool owned = where.rank == s.rank && where.row >= 0 && where.row < s.capacity_rows;
    t.owned_slot_rows[static_cast<int64_t>(src_rank) * s.slots_per_rank() + token * s.top_k + slot] =
        owned ? where.row : -1;
}

// Padding rows of local expert `local_expert` on this rank, and the local expert of each of its M tiles.
MOK_HOST_DEVICE MOK_INLINE void fill_segment_tail(const PlanShape& s, int32_t local_expert, const PlanTables& t) {
    const int32_t e = s.rank * s.num_local_experts() + local_expert;
    const int64_t begin = t.segment_begin[e];
    const int64_t used_end = begin + t.expert_rows[e];
    const int64_t padded_end = begin + round_up(t.expert_rows[e], kExpertRowAlignment);
    // Clamped so that an overflowing plan (status kScheduleOverflow) stays inside the tables.
    const int64_t end = padded_end < s.capacity_rows ? padded_end : s.capacity_rows;
    for (int64_t row = used_end; row < end; ++row) {
        t.row_source[row] = RowSource::padding();
    }
    for (int64_t tile = begin / kExpertRowAlignment; tile < end / kExpertRowAlignment; ++tile) {
        t.tile_expert[tile] = local_expert;
    }
}

// Tiles past this rank's last segment hold no expert.
MOK_HOST_DEVICE MOK_INLINE void clear_tile(const PlanShape& s, int64_t tile, const PlanTables& t) {
    if (tile * kExpertRowAlignment >= t.owner_padded_rows[s.rank]) {
        t.tile_expert[tile] = -1;
    }
}

// ---- Minibatches and the token ring: pure index arithmetic on the owner's row space. ----

MOK_HOST_DEVICE MOK_INLINE int64_t num_minibatches(const PlanShape& s, int64_t padded_rows) {
    return ceil_div(padded_rows, s.minibatch_rows);
}

struct RowRange {
    int64_t begin;
    int64_t end;
};

MOK_HOST_DEVICE MOK_INLINE RowRange minibatch_rows(const PlanShape& s, int64_t minibatch, int64_t padded_rows) {
    const int64_t begin = minibatch * s.minibatch_rows;
    const int64_t end = begin + s.minibatch_rows;
    return {begin, end < padded_rows ? end : padded_rows};
}

// A row's place in the ring: rows go round it in order, lap after lap. Row `row` may be written only after
// row - ring_rows (same slot, previous lap) has been consumed.
struct RingPosition {
    int64_t slot;
    int64_t lap;
};

MOK_HOST_DEVICE MOK_INLINE RingPosition ring_position(const PlanShape& s, int64_t row) {
    return {row % s.ring_rows, row / s.ring_rows};
}

MOK_HOST_DEVICE MOK_INLINE int64_t previous_occupant(const PlanShape& s, int64_t row) {
    return row >= s.ring_rows ? row - s.ring_rows : -1;
}

}  // namespace mok::plan
