// Push combine: the expert owner sends each output row to the rank that owns the row's token, into a private
// combine row per (token, slot), and flags it. Forward: expert outputs; backward: dx rows plus the router-weight
// gradient of the slot. The source then reduces in the contract's fixed order (combine_reduce.cuh).
//
// Ordering, per tile t of the owner's row space:
//   1. load gate: when the producer publishes per tile (out_ready != nullptr), out_ready[t] >= this pass's
//      sequence (acquire at GPU scope);
//   2. rows go registers -> the source's combine_rows[token * k + slot] (row_copy.cuh); no wait is needed on the
//      destination: a source reuses its combine rows only for a later pass, which it starts only after its
//      combine of this pass finished (docs/transport.md, "Why the combine rows can be shared");
//   3. after every copy thread's stores (row_copy.cuh's done barrier): the router-weight gradients are stored with
//      plain stores, then every lane issues one release fence at system scope and stores the per-row flags
//      combine_ready[token * k + slot] = sequence with relaxed stores: one fence per lane instead of one per row;
//   4. out_free[t] = sequence (release, GPU scope) hands the output rows back to their producer.
// Pushing keeps the source's waits local: it polls flags in its own memory.
#pragma once

#include <cstdint>

#include "common/device_status.hpp"
#include "device/comm/copy_geometry.hpp"
#include "device/comm/row_copy.cuh"
#include "device/comm/signals.cuh"
#include "device/common/bounded_wait.cuh"
#include "device/layout/transport_layout.hpp"
#include "device/ptx/atomics.cuh"
#include "plan/routing_plan.hpp"

namespace mok::comm {

template <typename Peers>
struct PushParams {
    Peers peers;
    layout::SymmetricLayout window;     // window offsets, the same on every rank
    layout::TransportPass pass;         // kForward pushes expert outputs; kBackwardGrads dx rows and d weights
    const plan::RowSource* row_source;  // [capacity_rows] this rank's plan
    const int32_t* owner_padded_rows;   // [R]
    const char* out_rows;               // [out_ring_rows, H] bf16: output of owner row r at r mod out_ring_rows
    int64_t out_ring_rows;              // a multiple of 128 (or at least the padded rows, for no ring)
    const uint64_t* out_ready;          // [capacity_rows / 128] or nullptr: the producer's per-tile readiness
    uint64_t* out_free;                 // [capacity_rows / 128] or nullptr: set here once a tile was sent
    const float* weight_grads;          // [out_ring_rows] or nullptr: d router weight of owner row r (backward)
    const layout::TransportControl* control;
    device::WaitContext ctx;
    uint32_t* tile_parts;   // [capacity_rows / 128] join counters of tiles split between two teams (RowShare)
    uint64_t* tile_claims;  // [kClaimWordsPerRole] the claim words of the push teams (TileQueue)
};

template <typename Peers>
__device__ __forceinline__ int64_t push_num_tiles(const PushParams<Peers>& p) {
    return plan_num_tiles(p.owner_padded_rows, p.peers.rank);
}

template <typename Peers>
class PushPolicy {
  public:
    __device__ PushPolicy(const PushParams<Peers>& p, RowShare share)
        : p_(p),
          share_(share),
          sequence_(layout::pass_sequence(p.control->step, p.pass)),
          row_bytes_(p.window.shape.row_bytes()) {}

    // The number this pass's flags carry; it also tags the pass's tile claims.
    __device__ uint64_t sequence() const { return sequence_; }

    __device__ void load_tile_rows(int64_t tile, plan::RowSource* rows, uint32_t lane) const {
        load_plan_tile_rows(p_.row_source, tile, rows, lane);
    }

    // A row's other end is the rank that owns its token.
    __device__ bool copies_row(plan::RowSource row) const { return share_takes(share_, row.src_rank == p_.peers.rank); }

    // Each output row of the team's share has one destination: its (token, slot)'s private combine row on the
    // token's rank.
    __device__ uint32_t list_row(int64_t, plan::RowSource row, uint32_t, uint4* (&dsts)[kMaxRowFanout]) const {
        if (!copies_row(row)) {
            return 0;
        }
        dsts[0] = static_cast<uint4*>(p_.peers.peer_ptr(row.src_rank, p_.window.combine_row(row.token_slot)));
        return 1;
    }

    // Load gate: the producer of the tile's output rows published them (when it publishes per tile).
    __device__ bool load_gate_open(int64_t tile, const plan::RowSource*, uint32_t lane) const {
        if (p_.out_ready == nullptr) {
            return true;
        }
        bool open = true;
        if (lane == 0) {
            open = flag_reached_gpu(&p_.out_ready[tile], sequence_);
        }
        return warp_uniform(open);
    }

    __device__ bool wait_load_gate(int64_t tile, const plan::RowSource*, uint32_t lane) const {
        if (p_.out_ready == nullptr) {
            return true;
        }
        bool ok = true;
        if (lane == 0) {
            ok = wait_flag_gpu(p_.ctx, WaitSite::kRowsReady, &p_.out_ready[tile], sequence_);
        }
        return warp_uniform(ok);
    }

    // Store gate: none; each (token, slot) has its private combine row.
    __device__ bool store_gate_open(int64_t, uint32_t) const { return true; }
    __device__ bool wait_store_gate(int64_t, uint32_t) const { return true; }

    __device__ const void* load_src(int64_t tile, plan::RowSource, uint32_t row_in_tile) const {
        const int64_t row = tile * kTileRows + row_in_tile;
        return p_.out_rows + (row % p_.out_ring_rows) * row_bytes_;
    }

    __device__ void finish_tile(const RowCopyBuffer& buf, uint32_t lane) const {
        const int64_t tile = buf.tile;
        const plan::RowSource* rows = buf.tile_rows;
        if (p_.weight_grads != nullptr) {
            for (uint32_t r = lane; r < kTileRows; r += kWarpSize) {
                if (!rows[r].is_padding() && copies_row(rows[r])) {
                    const int64_t row = tile * kTileRows + r;
                    float* dst = static_cast<float*>(
                        p_.peers.peer_ptr(rows[r].src_rank, p_.window.weight_grad_of(rows[r].token_slot)));
                    *dst = p_.weight_grads[row % p_.out_ring_rows];
                }
            }
        }
        // Every lane now releases: the team's row stores (ordered before this call by the done barrier) and the
        // lanes' gradient stores (through the warp barrier) come, by this cumulative fence, before the flags
        // stored below.
        __syncwarp();
        ptx::fence_acq_rel_sys();
        for (uint32_t r = lane; r < kTileRows; r += kWarpSize) {
            if (!rows[r].is_padding() && copies_row(rows[r])) {
                uint64_t* flag = static_cast<uint64_t*>(
                    p_.peers.peer_ptr(rows[r].src_rank, p_.window.combine_ready_of(rows[r].token_slot)));
                ptx::st_relaxed_sys(flag, sequence_);
            }
        }
        if (lane == 0 && p_.out_free != nullptr && (share_ == RowShare::kAll || join_split_tile(p_.tile_parts, tile))) {
            // Every thread's loads of the tile (both teams', when split) completed: the rows may be reused.
            ptx::st_release_gpu(&p_.out_free[tile], sequence_);
        }
    }

  private:
    const PushParams<Peers>& p_;
    const RowShare share_;
    const uint64_t sequence_;
    const int64_t row_bytes_;
};

// Pushes the tiles of this rank's output rows that the team claims (the rows of its share) to their sources; every
// thread of `team` calls it.
template <typename Peers>
__device__ __forceinline__ bool push_tiles(const PushParams<Peers>& p, RowCopyStorage& storage, const CopyTeam& team,
                                           const TeamShare& share) {
    PushPolicy<Peers> policy(p, share.share);
    const TileQueue queue = team_queue(p.tile_claims, policy.sequence(), push_num_tiles(p), share);
    return run_row_copy(storage, team, static_cast<uint32_t>(p.window.shape.row_bytes()), policy, queue, p.ctx);
}

}  // namespace mok::comm
