// Pull dispatch: the expert owner copies its routed rows from the source ranks' symmetric windows into its token
// ring, tile by tile, and publishes each tile's readiness for the GEMM.
//
// Row r of the owner's row space (the plan's row_source[r] names its source rank and token) lands in ring slot
// r mod ring_rows. Ordering, per tile t (rows [128 t, 128 t + 128)), on the row copy (row_copy.cuh):
//   1. before loading: for each source rank not yet seen, wait until it announced its rows for this step
//      (route_ready[step parity][source] >= step for x rows, grads_ready[source] >= step for dy rows; polled
//      by acquire loads at system scope);
//   2. before storing into the ring: when t >= ring_tiles, wait until tile t - ring_tiles (same slots, previous
//      lap) was released by its consumer (ring_free >= this pass's sequence; acquire at GPU scope);
//   3. after every copy thread's stores (the done barrier): ring_ready[t] = sequence (release at GPU scope). A consumer
//      waits for it with wait_ring_tile (device/comm/ring.cuh).
//
// Rows of one token pulled once (DispatchParams::owned_slot_rows; where the ring holds every row of the pass). A
// token that sends this rank several rows (DeepSeek-V3 at EP 2: four on average, of its eight) would cross NVLink
// once per row. Instead its rows here, in row order, form groups of up to kMaxRowFanout (token_groups.hpp); the
// group's first row (its leader) is loaded once and stored to every row of the group, and the other rows are not
// listed. A group's rows
// lie in the leader's tile or later ones (rows are expert-major, and a token's experts ascend with its rows), so a
// tile's rows land from its own team and from teams of earlier tiles. Each tile therefore counts its rows as they
// land (tile_parts: every row of a group, once its leader's team has stored them, and the tile's padding rows, from
// its own team); the tile's own team waits for the count to reach 128, publishes the tile and resets the count
// (count_landed_rows has the memory order and the progress argument). Without laps there is no store gate. The
// rows' bytes are those of a pull per row.
// Pulling keeps the owner's NVLink reads in its own hands: an imbalanced owner pulls at its own pace, and no
// cross-GPU completion flag is needed for the data (the loads complete in the pulling threads' registers).
#pragma once

#include <cstdint>

#include "common/device_status.hpp"
#include "device/comm/copy_geometry.hpp"
#include "device/comm/row_copy.cuh"
#include "device/comm/signals.cuh"
#include "device/comm/token_groups.hpp"
#include "device/common/bounded_wait.cuh"
#include "device/layout/transport_layout.hpp"
#include "device/ptx/atomics.cuh"
#include "plan/routing_plan.hpp"

namespace mok::comm {

// Source-rank masks are 64-bit words: the EP group has at most this many ranks (checked on the host).
inline constexpr int32_t kMaxEpRanks = 64;

template <typename Peers>
struct DispatchParams {
    Peers peers;
    layout::SymmetricLayout window;  // window offsets, the same on every rank
    layout::TransportPass pass;      // kBackwardGrads pulls dy rows; the others pull x rows
    int32_t top_k;
    const plan::RowSource* row_source;  // [capacity_rows] this rank's plan
    const int32_t* owner_padded_rows;   // [R] this rank's entry bounds its tiles
    char* ring_rows;                    // [ring_rows, H] bf16, the destination
    int64_t ring_rows_count;            // rows in the ring, a multiple of 128
    uint64_t* ring_ready;               // [capacity_rows / 128] written here
    const uint64_t* ring_free;          // [capacity_rows / 128] written by the consumer
    const layout::TransportControl* control;
    device::WaitContext ctx;
    uint32_t* tile_parts;   // [capacity_rows / 128] join counters of tiles split between two teams (RowShare), or
                            // the rows landed per tile when tokens are pulled once (reset at every step's plan)
    uint64_t* tile_claims;  // [kClaimWordsPerRole] the claim words of this ring's dispatch teams (TileQueue)
    // [R][T * k] this rank's plan's owned_slot_rows (each source slot's row here, or -1): a token's rows here are
    // pulled once per group of kMaxRowFanout, where the ring holds every row of the pass; nullptr: every row pulled.
    const int32_t* owned_slot_rows;
};

// Tiles of this rank's row space: the plan's padded rows over 128 (read from device memory, so the grid can be
// sized for the worst case and the launch captured in a graph).
template <typename Peers>
__device__ __forceinline__ int64_t dispatch_num_tiles(const DispatchParams<Peers>& p) {
    return plan_num_tiles(p.owner_padded_rows, p.peers.rank);
}

template <typename Peers>
class DispatchPolicy {
  public:
    __device__ DispatchPolicy(const DispatchParams<Peers>& p, RowShare share)
        : p_(p),
          share_(share),
          step_(p.control->step),
          sequence_(layout::pass_sequence(step_, p.pass)),
          row_bytes_(p.window.shape.row_bytes()),
          ring_tiles_(p.ring_rows_count / kTileRows),
          grouped_(p.owned_slot_rows != nullptr && p.ring_rows_count >= p.owner_padded_rows[p.peers.rank]) {}

    // The number this pass's flags carry; it also tags the pass's tile claims.
    __device__ uint64_t sequence() const { return sequence_; }

    __device__ void load_tile_rows(int64_t tile, plan::RowSource* rows, uint32_t lane) const {
        load_plan_tile_rows(p_.row_source, tile, rows, lane);
    }

    __device__ bool copies_row(plan::RowSource row) const { return share_takes(share_, row.src_rank == p_.peers.rank); }

    // Load gate: every source rank of the tile announced its rows for this step. Lane 0 keeps the sources it
    // already observed, so each flag is acquired once per team and pass.
    __device__ bool load_gate_open(int64_t, const plan::RowSource* rows, uint32_t lane) {
        bool open = true;
        if (lane == 0) {
            uint64_t pending = unseen_sources(rows);
            while (open && pending != 0) {
                const int32_t src = __ffsll(static_cast<long long>(pending)) - 1;
                open = flag_reached_sys(source_ready_flag(src), step_);
                pending &= pending - 1;
                sources_seen_ |= open ? uint64_t{1} << src : 0;
            }
        }
        return warp_uniform(open);
    }

    __device__ bool wait_load_gate(int64_t, const plan::RowSource* rows, uint32_t lane) {
        bool ok = true;
        if (lane == 0) {
            uint64_t pending = unseen_sources(rows);
            while (ok && pending != 0) {
                const int32_t src = __ffsll(static_cast<long long>(pending)) - 1;
                ok = wait_flag_sys(p_.ctx, WaitSite::kRoutingExchange, source_ready_flag(src), step_);
                pending &= pending - 1;
                sources_seen_ |= ok ? uint64_t{1} << src : 0;
            }
        }
        return warp_uniform(ok);
    }

    // Store gate: the ring slots of this tile were freed by the previous lap's consumer (its reads of them are
    // done before its release; the acquire orders the stores here after them).
    __device__ bool store_gate_open(int64_t tile, uint32_t lane) const {
        if (tile < ring_tiles_) {
            return true;
        }
        bool open = true;
        if (lane == 0) {
            open = flag_reached_gpu(&p_.ring_free[tile - ring_tiles_], sequence_);
        }
        return warp_uniform(open);
    }

    __device__ bool wait_store_gate(int64_t tile, uint32_t lane) const {
        if (tile < ring_tiles_) {
            return true;
        }
        bool ok = true;
        if (lane == 0) {
            ok = wait_flag_gpu(p_.ctx, WaitSite::kRingSlotFree, &p_.ring_free[tile - ring_tiles_], sequence_);
        }
        return warp_uniform(ok);
    }

    __device__ const void* load_src(int64_t, plan::RowSource row, uint32_t) const {
        const int64_t token = row.token_slot / p_.top_k;
        const uint64_t offset =
            p_.pass == layout::TransportPass::kBackwardGrads ? p_.window.grad_row(token) : p_.window.token_row(token);
        return p_.peers.peer_ptr(row.src_rank, offset);
    }

    // Rows of the team's share: each with its ring slot, or (tokens pulled once) only a group's leader, with the
    // ring slots of its group.
    __device__ uint32_t list_row(int64_t tile, plan::RowSource row, uint32_t row_in_tile,
                                 uint4* (&dsts)[kMaxRowFanout]) const {
        if (!copies_row(row)) {
            return 0;
        }
        const int64_t first = tile * kTileRows + row_in_tile;
        if (!grouped_) {
            dsts[0] = ring_row(first);
            return 1;
        }
        const TokenGroup group = token_group(first, row);
        if (!group.leader) {
            return 0;
        }
        dsts[0] = ring_row(first);
        uint32_t num_rows = 1;
        // next[] holds the group's rows first, then -1s: entry i is destination i + 1 while it holds a row.
#pragma unroll
        for (uint32_t i = 0; i < kMaxRowFanout - 1; ++i) {
            if (group.next[i] >= 0) {
                dsts[i + 1] = ring_row(group.next[i]);
                ++num_rows;
            }
        }
        return num_rows;
    }

    // Every thread of the team stored its part of the tile (the done barrier before this call): publish it. The
    // release is cumulative over those stores. A consumer that reads the ring through the async proxy (TMA) adds
    // its own proxy fence after its acquire.
    __device__ void finish_tile(const RowCopyBuffer& buf, uint32_t lane) const {
        if (grouped_) {
            count_landed_rows(buf, lane);
            return;
        }
        if (lane == 0 && (share_ == RowShare::kAll || join_split_tile(p_.tile_parts, buf.tile))) {
            ptx::st_release_gpu(&p_.ring_ready[buf.tile], sequence_);
        }
    }

  private:
    // The group of row `row` (token_groups.hpp), from its token's entries in owned_slot_rows.
    __device__ TokenGroup token_group(int64_t row, plan::RowSource source) const {
        const int32_t* slots = p_.owned_slot_rows + static_cast<int64_t>(source.src_rank) * p_.window.shape.slots() +
                               source.token_slot / p_.top_k * p_.top_k;
        return comm::token_group(row, slots, p_.top_k);
    }

    __device__ uint4* ring_row(int64_t row) const {
        return reinterpret_cast<uint4*>(p_.ring_rows + (row % p_.ring_rows_count) * row_bytes_);
    }

    // The ring row a listed destination is (the ring holds every row of the pass: slot = row).
    __device__ int64_t row_of(const uint4* dst) const {
        return (reinterpret_cast<const char*>(dst) - p_.ring_rows) / row_bytes_;
    }

    // Tokens pulled once: every row of each group this team listed in the tile has landed, and so have the tile's
    // padding rows (counted by the team of the remote rows, or the only one). Each adds one to its tile's count,
    // without waiting; then the team that claimed the tile (of the remote rows, or the only one) waits until its
    // count is whole -- the rows that teams of earlier tiles store with their groups' leaders -- and publishes it.
    // Waiting never blocks progress: a tile's rows come from its own team and from teams of earlier tiles, which
    // added theirs before they waited for anything; so the smallest unpublished tile always completes.
    //
    // Memory order: the fence releases the team's stores (ordered before this call by the done barrier, whose
    // issuers completed them and fenced them back to the generic proxy) ahead of its relaxed adds; the publisher's
    // acquire load of the whole count orders it after every adder's fence, and its release store publishes all of
    // the tile's rows. One fence per tile and adds that need no reply, where an acq_rel add per row would each
    // wait a round trip behind a fence.
    __device__ void count_landed_rows(const RowCopyBuffer& buf, uint32_t lane) const {
        __syncwarp();
        ptx::fence_acq_rel_gpu();
        for (uint32_t i = lane; i < buf.num_rows; i += kWarpSize) {
            const uint32_t num_dsts = buf.num_dsts[i];
#pragma unroll
            for (uint32_t d = 0; d < kMaxRowFanout; ++d) {
                if (d < num_dsts) {
                    ptx::red_add_relaxed_gpu(&p_.tile_parts[row_of(buf.dst[i][d]) / kTileRows], 1);
                }
            }
        }
        if (share_ == RowShare::kLocal) {
            return;
        }
        uint32_t padding = 0;
        for (uint32_t r = lane; r < kTileRows; r += kWarpSize) {
            padding += buf.tile_rows[r].is_padding() ? 1 : 0;
        }
        padding = __reduce_add_sync(kFullWarpMask, padding);
        if (lane == 0) {
            uint32_t* count = &p_.tile_parts[buf.tile];
            if (padding > 0) {
                ptx::red_add_relaxed_gpu(count, padding);
            }
            constexpr auto kWhole = static_cast<uint32_t>(kTileRows);
            const bool landed = device::bounded_wait(
                p_.ctx, WaitSite::kRowsLanded, kWhole, [&] { return ptx::ld_acquire_gpu(count) == kWhole; },
                [&] { return static_cast<int64_t>(ptx::ld_relaxed_gpu(count)); });
            if (landed) {
                *count = 0;  // the pass's adds to it are all in: the next pass starts from zero
                ptx::st_release_gpu(&p_.ring_ready[buf.tile], sequence_);
            }
        }
    }

    // Source ranks of the tile's data rows that lane 0 has not observed yet, as a mask.
    __device__ uint64_t unseen_sources(const plan::RowSource* rows) const {
        uint64_t mask = 0;
        for (uint32_t r = 0; r < kTileRows; ++r) {
            mask |= rows[r].is_padding() || !copies_row(rows[r]) ? 0 : uint64_t{1} << rows[r].src_rank;
        }
        return mask & ~sources_seen_;
    }

    __device__ const uint64_t* source_ready_flag(int32_t src) const {
        const uint64_t offset = p_.pass == layout::TransportPass::kBackwardGrads
                                    ? p_.window.grads_ready_of(src)
                                    : p_.window.route_ready_of(static_cast<int32_t>(step_ & 1), src);
        return static_cast<const uint64_t*>(p_.peers.peer_ptr(p_.peers.rank, offset));
    }

    const DispatchParams<Peers>& p_;
    const RowShare share_;
    const uint64_t step_;
    const uint64_t sequence_;
    const int64_t row_bytes_;
    const int64_t ring_tiles_;
    const bool grouped_;         // a token's rows pulled once per group (the ring holds every row of the pass)
    uint64_t sources_seen_ = 0;  // lane 0's record of the sources whose announcement it already observed
};

// Dispatches the tiles of this rank's row space that the team claims (the rows of its share); every thread of
// `team` calls it. The megakernel's communication warps call this as teams of their share; dispatch_kernel
// (row_kernels.cu) is the standalone form.
template <typename Peers>
__device__ __forceinline__ bool dispatch_tiles(const DispatchParams<Peers>& p, RowCopyStorage& storage,
                                               const CopyTeam& team, const TeamShare& share) {
    DispatchPolicy<Peers> policy(p, share.share);
    const TileQueue queue = team_queue(p.tile_claims, policy.sequence(), dispatch_num_tiles(p), share);
    return run_row_copy(storage, team, static_cast<uint32_t>(p.window.shape.row_bytes()), policy, queue, p.ctx);
}

}  // namespace mok::comm
