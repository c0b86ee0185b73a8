// The transport's buffers, as offsets that the host (to allocate and document) and the device (to address) share.
//
// Every rank holds two kinds of memory (docs/transport.md, "Memory"):
//   SymmetricLayout  one window per rank, the same size and layout on every rank, that peers read and write
//                    through their NVLink mappings (NCCL symmetric window, or a slice of one allocation when
//                    virtual ranks share a GPU). Only what another rank touches lives here.
//   LocalLayout      ordinary device memory of the rank: its routing plan, its token rings, the rings' flags,
//                    the control words and the DeviceStatus record.
// Regions are described by byte offsets so that one description serves every rank: a peer's region is the
// peer's window base plus the same offset.
//
// Flags hold 64-bit sequence numbers that only grow (TransportControl), so nothing is ever reset between
// passes: a waiter waits for "at least this pass's number", and a flag left over from an earlier pass always
// reads smaller.
#pragma once

#include <array>
#include <cstdint>

#include "common/device_status.hpp"
#include "common/host_device.hpp"
#include "plan/routing_plan.hpp"

namespace mok::layout {

// Every region starts on a 256-byte boundary: bulk copies need 16, flags 8, and 256 keeps unrelated regions
// off each other's L2 sectors.
inline constexpr uint64_t kRegionAlignment = 256;
// A window's size is a multiple of 4096 bytes, NCCL's required window alignment (NCCL_WIN_REQUIRED_ALIGNMENT),
// so that the same size is valid for ncclCommWindowRegister and for the virtual-rank slices.
inline constexpr uint64_t kWindowGranularity = 4096;
// The routing ids and weights are double-buffered by step parity: a rank may receive step s + 1's ids while it
// still plans step s (docs/transport.md, "Routing exchange").
inline constexpr int32_t kRouteBuffers = 2;
// bf16 rows: two bytes an element.
inline constexpr int64_t kRowElementBytes = 2;

MOK_HOST_DEVICE MOK_INLINE uint64_t align_up(uint64_t value, uint64_t alignment) {
    return (value + alignment - 1) / alignment * alignment;
}

struct Region {
    uint64_t offset = 0;  // bytes from the start of the window (or of the local block)
    uint64_t bytes = 0;

    MOK_HOST_DEVICE uint64_t end() const { return offset + bytes; }
};

// The shapes the windows depend on. T and k are per rank; every rank has the same.
struct TransportShape {
    int32_t ep_size = 1;          // R
    int64_t tokens_per_rank = 0;  // T
    int64_t hidden = 0;           // H, a multiple of 8 (16-byte rows)
    int32_t top_k = 1;            // k

    MOK_HOST_DEVICE int64_t slots() const { return tokens_per_rank * top_k; }
    MOK_HOST_DEVICE int64_t row_bytes() const { return hidden * kRowElementBytes; }
};

// Hands out consecutive aligned regions.
struct RegionAllocator {
    uint64_t next = 0;

    MOK_HOST_DEVICE Region take(uint64_t bytes) {
        const Region region{next, bytes};
        next = align_up(next + bytes, kRegionAlignment);
        return region;
    }
};

// One rank's symmetric window. "Writer" is who stores into the region of rank r's window; "reader" who loads.
struct SymmetricLayout {
    TransportShape shape{};
    Region tokens;              // [T, H] bf16. x rows of rank r. Writer: r (staged before its routing exchange).
                                // Reader: expert owners, pulling rows (forward dispatch, backward replay).
    Region grads;               // [T, H] bf16. dy rows of rank r. Writer: r (staged before it announces them).
                                // Reader: expert owners (backward dispatch).
    Region route_ids;           // [kRouteBuffers][R][T * k] int32. Every rank's expert ids; [p][s] written by rank s
                                // for steps of parity p. Reader: r's planner.
    Region route_weights;       // [kRouteBuffers][R][T * k] fp32. The router weights, alongside the ids (the owners
                                // need them in the backward).
    Region route_ready;         // [kRouteBuffers][R] u64. Step number; rank s stores it after writing [p][s] (and
                                // after staging its x rows). Reader: r's planner and r's forward dispatch.
    Region grads_ready;         // [R] u64. Step number; rank s stores it into r's window after staging its dy rows.
    Region combine_rows;        // [T * k, H] bf16. Row (t * k + j): the output of r's token t, slot j, pushed by the
                                // slot's expert owner. Forward: expert outputs; backward: dx rows. The two are never
                                // live at once (the backward pushes only after r announced its dy rows, which r does
                                // after its forward combine), so one buffer serves both.
    Region combine_ready;       // [T * k] u64. Pass sequence number; the owner stores it after row (t * k + j) of
                                // combine_rows (and its weight gradient) landed. Reader: r's combine.
    Region weight_grads;        // [T * k] fp32. d router weight of r's slot (t, j), pushed by its owner (backward).
    Region barrier_inbox;       // [R] u64. Barrier epoch of each peer (PeerBarrier); written by the peers.
    uint64_t window_bytes = 0;  // the window's size, a multiple of kWindowGranularity

    MOK_HOST_DEVICE static SymmetricLayout make(const TransportShape& s) {
        SymmetricLayout l;
        l.shape = s;
        RegionAllocator a;
        const uint64_t ranks = static_cast<uint64_t>(s.ep_size);
        const uint64_t slots = static_cast<uint64_t>(s.slots());
        const uint64_t rows_bytes = static_cast<uint64_t>(s.tokens_per_rank) * s.row_bytes();
        l.tokens = a.take(rows_bytes);
        l.grads = a.take(rows_bytes);
        l.route_ids = a.take(kRouteBuffers * ranks * slots * sizeof(int32_t));
        l.route_weights = a.take(kRouteBuffers * ranks * slots * sizeof(float));
        l.route_ready = a.take(kRouteBuffers * ranks * sizeof(uint64_t));
        l.grads_ready = a.take(ranks * sizeof(uint64_t));
        l.combine_rows = a.take(slots * s.row_bytes());
        l.combine_ready = a.take(slots * sizeof(uint64_t));
        l.weight_grads = a.take(slots * sizeof(float));
        l.barrier_inbox = a.take(ranks * sizeof(uint64_t));
        l.window_bytes = align_up(a.next, kWindowGranularity);
        return l;
    }

    // Byte offsets of single entries, for peer addressing (peer window base + offset).
    MOK_HOST_DEVICE uint64_t token_row(int64_t token) const {
        return tokens.offset + static_cast<uint64_t>(token) * shape.row_bytes();
    }
    MOK_HOST_DEVICE uint64_t grad_row(int64_t token) const {
        return grads.offset + static_cast<uint64_t>(token) * shape.row_bytes();
    }
    MOK_HOST_DEVICE uint64_t route_ids_of(int32_t parity, int32_t src_rank) const {
        return route_ids.offset + route_entry(parity, src_rank) * sizeof(int32_t);
    }
    MOK_HOST_DEVICE uint64_t route_weights_of(int32_t parity, int32_t src_rank) const {
        return route_weights.offset + route_entry(parity, src_rank) * sizeof(float);
    }
    MOK_HOST_DEVICE uint64_t route_ready_of(int32_t parity, int32_t src_rank) const {
        return route_ready.offset + (static_cast<uint64_t>(parity) * shape.ep_size + src_rank) * sizeof(uint64_t);
    }
    MOK_HOST_DEVICE uint64_t grads_ready_of(int32_t src_rank) const {
        return grads_ready.offset + static_cast<uint64_t>(src_rank) * sizeof(uint64_t);
    }
    MOK_HOST_DEVICE uint64_t combine_row(int64_t token_slot) const {
        return combine_rows.offset + static_cast<uint64_t>(token_slot) * shape.row_bytes();
    }
    MOK_HOST_DEVICE uint64_t combine_ready_of(int64_t token_slot) const {
        return combine_ready.offset + static_cast<uint64_t>(token_slot) * sizeof(uint64_t);
    }
    MOK_HOST_DEVICE uint64_t weight_grad_of(int64_t token_slot) const {
        return weight_grads.offset + static_cast<uint64_t>(token_slot) * sizeof(float);
    }
    MOK_HOST_DEVICE uint64_t barrier_inbox_of(int32_t peer) const {
        return barrier_inbox.offset + static_cast<uint64_t>(peer) * sizeof(uint64_t);
    }

  private:
    MOK_HOST_DEVICE uint64_t route_entry(int32_t parity, int32_t src_rank) const {
        return (static_cast<uint64_t>(parity) * shape.ep_size + src_rank) * static_cast<uint64_t>(shape.slots());
    }
};

// The kinds of pass a step makes through the transport. Each pass's flags carry its own sequence number
// (pass_sequence), so a ring or combine flag from the forward never satisfies a wait of the backward.
enum class TransportPass : uint32_t {
    kForward = 0,         // pull x rows, push expert outputs
    kBackwardGrads = 1,   // pull dy rows, push dx rows and router-weight gradients
    kBackwardReplay = 2,  // pull x rows again for the recomputed forward of later macrobatches
};
inline constexpr uint64_t kPassesPerStep = 3;

// The number every flag of `pass` in step `step` (>= 1) carries; strictly increasing over (step, pass).
MOK_HOST_DEVICE MOK_INLINE uint64_t pass_sequence(uint64_t step, TransportPass pass) {
    return step * kPassesPerStep + static_cast<uint64_t>(pass);
}

// Control words of one rank, in its local memory.
struct alignas(16) TransportControl {
    uint64_t step;                  // routing exchanges done; a step's kernels read it, the exchange advances it
    uint64_t barrier_epoch;         // PeerBarrier rounds done
    uint32_t exchange_blocks_done;  // the exchange kernel's last-block counter; back to 0 after every exchange
    uint32_t reserved;
};

// The rows a token ring holds and its per-tile flags. Rows of the owner's row space go round the ring
// (plan::ring_position); tile t of the row space (rows [128 t, 128 t + 128)) has two flags:
//   ready[t]  pass sequence; the dispatcher stores it (release, gpu) once the tile's rows are in the ring.
//   free[t]   pass sequence; the consumer stores it (release, gpu) once it no longer reads the tile's rows,
//             so that tile t + ring_tiles may overwrite them.
enum class RingId : int32_t {
    kTokens = 0,  // x rows: forward dispatch and backward replay
    kGrads = 1,   // dy rows: backward dispatch
};
inline constexpr int32_t kNumRings = 2;
// Claim words per copy role: [0] for the teams that copy every row or the rows that cross NVLink, [1] for the teams
// that copy the rows that stay on the GPU (comm::RowShare).
inline constexpr int32_t kClaimWordsPerRole = 2;

// The routing plan's tables (plan::PlanTables) as consecutive regions of one allocation: the transport's local
// block and the layer's context (host/cuda/layer_layout.hpp) each hold a plan this way. Writer: the planner of the
// rank that owns the allocation. Readers: its dispatch, combine, row gate and GEMMs.
struct PlanRegions {
    static constexpr int kNumRegions = 10;

    Region chunk_counts;       // [E][R][C] int32
    Region chunk_offsets;      // [E][R][C] int32
    Region expert_rows;        // [E] int32
    Region segment_begin;      // [E] int32
    Region owner_padded_rows;  // [R] int32
    Region row_source;         // [capacity_rows] RowSource
    Region tile_expert;        // [capacity_rows / 128] int32
    Region slot_location;      // [T * k] SlotLocation
    Region owned_slot_rows;    // [R][T * k] int32
    Region status;             // [1] int32 PlanStatus

    MOK_HOST_DEVICE static PlanRegions take(RegionAllocator& a, const plan::PlanTableSizes& n) {
        PlanRegions r;
        r.chunk_counts = a.take(n.chunk_entries * sizeof(int32_t));
        r.chunk_offsets = a.take(n.chunk_entries * sizeof(int32_t));
        r.expert_rows = a.take(n.experts * sizeof(int32_t));
        r.segment_begin = a.take(n.experts * sizeof(int32_t));
        r.owner_padded_rows = a.take(n.ranks * sizeof(int32_t));
        r.row_source = a.take(n.rows * sizeof(plan::RowSource));
        r.tile_expert = a.take(n.tiles * sizeof(int32_t));
        r.slot_location = a.take(n.slots * sizeof(plan::SlotLocation));
        r.owned_slot_rows = a.take(n.all_slots * sizeof(int32_t));
        r.status = a.take(sizeof(int32_t));
        return r;
    }

    // The tables' pointers in an allocation at `base`.
    MOK_HOST_DEVICE plan::PlanTables bind(void* base) const {
        char* b = static_cast<char*>(base);
        plan::PlanTables t;
        t.chunk_counts = reinterpret_cast<int32_t*>(b + chunk_counts.offset);
        t.chunk_offsets = reinterpret_cast<int32_t*>(b + chunk_offsets.offset);
        t.expert_rows = reinterpret_cast<int32_t*>(b + expert_rows.offset);
        t.segment_begin = reinterpret_cast<int32_t*>(b + segment_begin.offset);
        t.owner_padded_rows = reinterpret_cast<int32_t*>(b + owner_padded_rows.offset);
        t.row_source = reinterpret_cast<plan::RowSource*>(b + row_source.offset);
        t.tile_expert = reinterpret_cast<int32_t*>(b + tile_expert.offset);
        t.slot_location = reinterpret_cast<plan::SlotLocation*>(b + slot_location.offset);
        t.owned_slot_rows = reinterpret_cast<int32_t*>(b + owned_slot_rows.offset);
        t.status = reinterpret_cast<int32_t*>(b + status.offset);
        return t;
    }

    // Bytes from the first table's start to the last one's end.
    MOK_HOST_DEVICE uint64_t span_bytes() const { return status.end() - chunk_counts.offset; }

    // Every table's region (host side: for checks that walk them all).
    std::array<Region, kNumRegions> all() const {
        return {chunk_counts, chunk_offsets, expert_rows,   segment_begin,   owner_padded_rows,
                row_source,   tile_expert,   slot_location, owned_slot_rows, status};
    }
};

// One rank's local block: the plan tables, the rings and their flags, control and status.
struct LocalLayout {
    plan::PlanShape plan{};  // the plan shape the block was made for; ring_rows capped at capacity_rows
    int64_t hidden = 0;
    PlanRegions plan_tables;
    Region ring_rows[kNumRings];   // [ring_rows, H] bf16
    Region ring_ready[kNumRings];  // [capacity_rows / 128] u64
    Region ring_free[kNumRings];   // [capacity_rows / 128] u64
    // Per tile, the copy teams that finished it in the current pass, when a tile's remote and local rows are
    // copied by different teams (device/comm/row_copy.cuh, RowShare), or the rows landed in it when the dispatch
    // pulls a token's rows once (device/comm/dispatch.cuh); the add that completes it publishes and resets it.
    Region ring_parts[kNumRings];  // [capacity_rows / 128] u32, dispatch into each ring
    Region push_parts;             // [capacity_rows / 128] u32, push of the owner's output rows
    // Per copy role, the claim words its teams take tiles from (device/comm/row_copy.cuh, TileQueue).
    Region ring_claims[kNumRings];  // [kClaimWordsPerRole] u64, dispatch into each ring
    Region push_claims;             // [kClaimWordsPerRole] u64, push of the owner's output rows
    // Each rank's combine rows, then each rank's combine flags, as this rank addresses them (peer pointers), for a
    // GEMM that stores rows straight into them (gemm::SourceTargets); written by enqueue_combine_targets.
    Region combine_targets;  // [2][R] pointers
    Region control;          // [1] TransportControl
    Region status;           // [1] DeviceStatus
    uint64_t total_bytes = 0;

    MOK_HOST_DEVICE static LocalLayout make(const plan::PlanShape& p, int64_t hidden) {
        LocalLayout l;
        l.plan = p;
        // A ring longer than the row table never wraps: its extra rows would never be written.
        l.plan.ring_rows = p.ring_rows < p.capacity_rows ? p.ring_rows : p.capacity_rows;
        l.hidden = hidden;
        const plan::PlanTableSizes n = plan::table_sizes(p);
        RegionAllocator a;
        l.plan_tables = PlanRegions::take(a, n);
        for (int32_t ring = 0; ring < kNumRings; ++ring) {
            l.ring_rows[ring] = a.take(static_cast<uint64_t>(l.plan.ring_rows) * hidden * kRowElementBytes);
            l.ring_ready[ring] = a.take(n.tiles * sizeof(uint64_t));
            l.ring_free[ring] = a.take(n.tiles * sizeof(uint64_t));
            l.ring_parts[ring] = a.take(n.tiles * sizeof(uint32_t));
            l.ring_claims[ring] = a.take(kClaimWordsPerRole * sizeof(uint64_t));
        }
        l.push_parts = a.take(n.tiles * sizeof(uint32_t));
        l.push_claims = a.take(kClaimWordsPerRole * sizeof(uint64_t));
        l.combine_targets = a.take(2 * static_cast<uint64_t>(p.ep_size) * sizeof(void*));
        l.control = a.take(sizeof(TransportControl));
        l.status = a.take(sizeof(DeviceStatus));
        l.total_bytes = a.next;
        return l;
    }
};

// The local block's typed pointers, for a block at `base`.
struct LocalBuffers {
    plan::PlanTables plan;
    uint16_t* ring_rows[kNumRings];  // bf16 bits
    uint64_t* ring_ready[kNumRings];
    uint64_t* ring_free[kNumRings];
    uint32_t* ring_parts[kNumRings];
    uint32_t* push_parts;
    uint64_t* ring_claims[kNumRings];
    uint64_t* push_claims;
    uint16_t** combine_rank_rows;   // [R] bf16 bits
    uint64_t** combine_rank_flags;  // [R]
    TransportControl* control;
    DeviceStatus* status;

    MOK_HOST_DEVICE static LocalBuffers bind(const LocalLayout& l, void* base) {
        char* b = static_cast<char*>(base);
        LocalBuffers out;
        out.plan = l.plan_tables.bind(base);
        for (int32_t ring = 0; ring < kNumRings; ++ring) {
            out.ring_rows[ring] = reinterpret_cast<uint16_t*>(b + l.ring_rows[ring].offset);
            out.ring_ready[ring] = reinterpret_cast<uint64_t*>(b + l.ring_ready[ring].offset);
            out.ring_free[ring] = reinterpret_cast<uint64_t*>(b + l.ring_free[ring].offset);
            out.ring_parts[ring] = reinterpret_cast<uint32_t*>(b + l.ring_parts[ring].offset);
            out.ring_claims[ring] = reinterpret_cast<uint64_t*>(b + l.ring_claims[ring].offset);
        }
        out.push_parts = reinterpret_cast<uint32_t*>(b + l.push_parts.offset);
        out.push_claims = reinterpret_cast<uint64_t*>(b + l.push_claims.offset);
        out.combine_rank_rows = reinterpret_cast<uint16_t**>(b + l.combine_targets.offset);
        out.combine_rank_flags =
            reinterpret_cast<uint64_t**>(b + l.combine_targets.offset + l.plan.ep_size * sizeof(void*));
        out.control = reinterpret_cast<TransportControl*>(b + l.control.offset);
        out.status = reinterpret_cast<DeviceStatus*>(b + l.status.offset);
        return out;
    }
};

}  // namespace mok::layout
