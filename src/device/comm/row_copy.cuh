// The row copy: moves the rows of 128-row tiles from wherever they are to wherever they go, with 16-byte loads
// and stores spread over a team of threads. Dispatch (pull) and combine (push) are two policies of this engine.
//
// Why registers and not bulk copies: a bulk copy is issued by one thread and completes as one unit, so a single
// warp issuing them kept at most a few requests per row in flight and moved 11-15% of NVLink's bandwidth
// whatever its depth; a plain SM copy kernel with every thread keeping a few 16-byte loads in flight fills the
// link from 12-16 SMs (docs/transport.md, "Tuning").
//
// Roles. The team's first warp is its control warp: it claims the team's next tile (TileQueue), loads its row
// metadata, passes the tile's gates (the rows' producers are done, the destination is free), lists the data rows'
// addresses in one of kRowCopyBuffers shared buffers, and, once the tile is copied, finishes (publishes) it. The other
// warps copy: tile after tile, each thread its chunks (copy_geometry.hpp) with kChunksInFlight loads in flight. The
// control warp lists the next tile and publishes the previous one while a tile is copied, and a copy warp that is
// done with its part of a tile moves on to the next one without waiting for the others. Named barriers carry the
// hand-offs:
//   ready[b]  control warp arrives once buffer b is listed (or says that no tile is left); copy warps wait on it
//   done[b]   copy warps arrive once their part of buffer b's tile is stored; the control warp waits on it,
//             then publishes the tile and may list buffer b again
// Tiles are claimed, not dealt: the teams of a share take the rank's tiles one at a time from a counter, in
// increasing order (TileQueue), so that a team that drew cheap tiles (rows that do not cross NVLink) takes more.
// Progress. The control warp first polls a tile's gates; only when one is closed does it block, and before it
// blocks it publishes every tile in flight. Claims come in increasing order, so the smallest unfinished tile has
// been claimed by a team that waits for nothing later: the progress argument of docs/transport.md ("Token ring")
// holds for rings of a single tile.
//
// Memory order. An open gate has issued its acquire fence (signals.cuh); ready[b] orders the copies after it.
// done[b] orders every copy thread's loads and stores before the control warp's finish, whose release fence
// is cumulative over them. Everything is generic proxy: no proxy fences.
//
// A policy supplies the addresses, the gates and the publication (the control warp calls all of them):
//   void load_tile_rows(int64_t tile, plan::RowSource* rows, uint32_t lane)           fill rows[0, 128)
//   bool load_gate_open(int64_t tile, const plan::RowSource* rows, uint32_t lane)     warp-uniform, never blocks
//   bool wait_load_gate(int64_t tile, const plan::RowSource* rows, uint32_t lane)     warp-uniform, bounded
//   bool store_gate_open(int64_t tile, uint32_t lane)                                  warp-uniform, never blocks
//   bool wait_store_gate(int64_t tile, uint32_t lane)                                  warp-uniform, bounded
//   bool copies_row(plan::RowSource row)                                              the team's share of rows
//   const void* load_src(int64_t tile, plan::RowSource row, uint32_t row_in_tile)
//   void* store_dst(int64_t tile, plan::RowSource row, uint32_t row_in_tile)
//   void finish_tile(int64_t tile, const plan::RowSource* rows, uint32_t lane)        after the tile's copies
// Padding rows (RowSource::padding()) are never copied. A gate that gives up (bounded_wait recorded the error)
// ends the run: nothing of that tile is copied or published, and every thread returns false.
#pragma once

#include <cstdint>

#include "device/comm/copy_geometry.hpp"
#include "device/comm/tile_claims.hpp"
#include "device/common/warp.cuh"
#include "device/layout/transport_layout.hpp"
#include "device/ptx/atomics.cuh"
#include "device/ptx/warpgroup.cuh"
#include "plan/routing_plan.hpp"

namespace mok::comm {

using device::kFullWarpMask;
using device::kWarpSize;
// 16-byte loads each copy thread keeps in flight: with 480 copy threads, 120 KiB per SM. A team's rate is bytes in
// flight over latency: with 64 KiB the copy ran at 32 GB/s per SM, local and remote rows together (about 2 us of
// latency); the link needs 25 GB/s per SM of remote rows alone from 16 SMs, and about half the rows are local.
// 16 loads of 16 bytes take 64 registers, which 512-thread blocks afford (1024-thread blocks would spill).
inline constexpr uint32_t kChunksInFlight = 16;

// The threads that run the copy together: a whole block in the standalone kernels, the communication warps of
// a block in a fused kernel. Its first warp is the control warp; the team needs at least one more.
struct CopyTeam {
    uint32_t thread_idx;        // in [0, num_threads)
    uint32_t num_threads;       // a multiple of 32, at least 64
    uint32_t first_barrier_id;  // named barriers first_barrier_id .. + kRowCopyBarriers - 1 belong to the team

    __device__ __forceinline__ bool in_control_warp() const { return thread_idx < kWarpSize; }
    __device__ __forceinline__ uint32_t lane() const { return thread_idx % kWarpSize; }
    __device__ __forceinline__ uint32_t copy_thread_idx() const { return thread_idx - kWarpSize; }
    __device__ __forceinline__ uint32_t num_copy_threads() const { return num_threads - kWarpSize; }
};

// Address-list buffers, and the named barriers they take: ready and done per buffer. Two let the control warp
// list tile i + 1 and publish tile i - 1 while the copy warps copy tile i; publishing costs the control warp a
// release fence, which waits for the SM's stores in flight (microseconds under a full copy stream), and a tile's
// copy (tens of microseconds) covers it. Four measured the same (docs/transport.md, "Measurements"), and every
// buffer is a tile claimed ahead: a team that holds claimed tiles when the queue runs dry finishes after the
// others, so the fewest buffers that cover the fence balance the teams best.
inline constexpr uint32_t kRowCopyBuffers = 2;
inline constexpr uint32_t kRowCopyBarriers = 2 * kRowCopyBuffers;

// The tiles of one pass, claimed one at a time by the teams of a share (every block of a standalone kernel, or the
// communication warps of several blocks), from a claim word (tile_claims.hpp; LocalLayout::ring_claims and
// push_claims, one per copy role and share).
//
// Why claims: a tile costs a team by its rows that cross NVLink, and with each team's tiles fixed (t, t + n, ...)
// the busiest of 16 teams carried 1.1-1.25x the mean rows, and 1.3-1.7x the mean remote rows, at DeepSeek-V3's
// shapes under uniform routing (an expert's rows are ordered by source rank, so whole tiles are remote or local),
// and a pass lasts as long as its busiest team. A claim decides only which team copies a tile, never a byte.
struct TileQueue {
    uint64_t* word;     // the claim word
    uint64_t tag;       // the pass's sequence (layout::pass_sequence)
    int64_t num_tiles;  // tiles of the rank's row space
    int64_t num_teams;  // teams that claim from this word in this launch

    // Lane 0 of a control warp: the team's next tile; num_tiles or more when none is left. Relaxed: a claim only
    // picks a tile; the tile's gates order its data. The loop is no wait: a compare-and-swap fails only when another
    // team's claim came between, so every round some team claims.
    __device__ __forceinline__ int64_t claim() const {
        uint64_t seen = ptx::ld_relaxed_gpu(word);
        for (;;) {
            const ClaimStep step = next_claim(seen, tag);
            const uint64_t previous = ptx::atom_cas_relaxed_gpu(word, seen, step.desired);
            if (previous == seen) {
                if (is_last_claim(step.tile, num_tiles, num_teams)) {
                    ptx::st_relaxed_gpu(word, kClearedClaimWord);
                }
                return static_cast<int64_t>(step.tile);
            }
            seen = previous;
        }
    }
};

// The row-space tiles of this rank's plan: its padded rows over 128 (read from device memory, so that grids can
// be sized for the worst case and launches captured in a graph).
__device__ __forceinline__ int64_t plan_num_tiles(const int32_t* owner_padded_rows, int32_t rank) {
    return owner_padded_rows[rank] / kTileRows;
}

// Loads a tile's row metadata from the plan's row table, the whole warp in parallel (a policy's load_tile_rows).
__device__ __forceinline__ void load_plan_tile_rows(const plan::RowSource* row_source, int64_t tile,
                                                    plan::RowSource* rows, uint32_t lane) {
    for (uint32_t r = lane; r < kTileRows; r += kWarpSize) {
        rows[r] = row_source[tile * kTileRows + r];
    }
}

// Broadcasts lane 0's verdict so that the whole warp takes the same branch.
__device__ __forceinline__ bool warp_uniform(bool lane0_value) {
    return __shfl_sync(kFullWarpMask, lane0_value ? 1 : 0, 0) != 0;
}

// Which rows of each tile a team copies. Rows that stay on this GPU cost the communication SMs as much copy
// throughput as rows that cross NVLink, so the kernels can give them to a second team on other SMs: then each
// tile is split between a kRemote and a kLocal team, and the one that finishes it last publishes it
// (join_split_tile).
enum class RowShare : uint8_t {
    kAll,     // every row: one team per tile
    kRemote,  // rows whose other end (source or destination rank) is a peer
    kLocal,   // rows whose other end is this rank
};

// A copy role's block among its remote_blocks + local_blocks blocks, remote ones first: its share of the rows, and
// how many teams take that share. With no local blocks, the remote blocks copy every row.
struct TeamShare {
    RowShare share;
    int32_t num_teams;  // teams of this share in the launch: they claim tiles from one word (TileQueue)
};

__device__ __forceinline__ TeamShare team_share(int32_t block_idx, int32_t remote_blocks, int32_t local_blocks) {
    if (local_blocks == 0) {
        return {RowShare::kAll, remote_blocks};
    }
    return block_idx < remote_blocks ? TeamShare{RowShare::kRemote, remote_blocks}
                                     : TeamShare{RowShare::kLocal, local_blocks};
}

// The queue of a team of `t`: its share's claim word among a copy role's kClaimWordsPerRole words.
__device__ __forceinline__ TileQueue team_queue(uint64_t* role_words, uint64_t tag, int64_t num_tiles,
                                                const TeamShare& t) {
    const int32_t word = t.share == RowShare::kLocal ? 1 : 0;
    return TileQueue{role_words + word, tag, num_tiles, t.num_teams};
}

__device__ __forceinline__ bool share_takes(RowShare share, bool row_is_local) {
    return share == RowShare::kAll || (share == RowShare::kLocal) == row_is_local;
}

// Called by lane 0 of each of the two teams that split `tile`, after its copies (the done barrier); true for the
// team that finished last, which then publishes the tile. The add is acq_rel: the first team's copies (before
// its release) are acquired by the last team, whose publication (a cumulative release) then covers both. The
// last team resets the counter for the next pass, which uses it only after this one has ended.
__device__ __forceinline__ bool join_split_tile(uint32_t* parts, int64_t tile) {
    constexpr uint32_t kTeamsPerSplitTile = 2;
    if (ptx::atom_add_acq_rel_gpu(&parts[tile], 1) + 1 < kTeamsPerSplitTile) {
        return false;
    }
    parts[tile] = 0;
    return true;
}

// What a listed buffer tells the copy warps.
enum class BufferState : uint32_t {
    kListed = 0,      // copy the listed rows
    kNoTileLeft = 1,  // the queue ran dry: the run is over
    kGateGaveUp = 2,  // a gate's bounded wait gave up (the error is recorded): the run ends
};

// One tile's address lists, written by the control warp, read by the copy warps.
struct RowCopyBuffer {
    plan::RowSource tile_rows[kTileRows];  // (kTileRows) the tile's row metadata, padding included
    const uint4* src[kTileRows];           // (kTileRows) the data rows' sources, densely listed
    uint4* dst[kTileRows];                 // (kTileRows) their destinations
    int64_t tile;                          // the claimed tile (control warp: which one to finish)
    uint32_t num_rows;                     // data rows listed
    BufferState state;
};

struct RowCopyStorage {
    RowCopyBuffer buffers[kRowCopyBuffers];  // the team's i-th tile uses buffers[i % kRowCopyBuffers]
};

template <typename Policy>
class RowCopyRun {
  public:
    __device__ RowCopyRun(RowCopyStorage& storage, const CopyTeam& team, const CopyGeometry& geometry, Policy& policy,
                          const TileQueue& queue)
        : storage_(storage), team_(team), geometry_(geometry), policy_(policy), queue_(queue) {}

    // Copies and finishes every tile the team claims; true when all were. Every thread of the team calls it.
    __device__ bool execute() { return team_.in_control_warp() ? control() : copy(); }

  private:
    __device__ uint32_t ready_barrier(int64_t idx) const {
        return team_.first_barrier_id + static_cast<uint32_t>(idx % kRowCopyBuffers);
    }
    __device__ uint32_t done_barrier(int64_t idx) const { return ready_barrier(idx) + kRowCopyBuffers; }
    __device__ RowCopyBuffer& buffer_of(int64_t idx) { return storage_.buffers[idx % kRowCopyBuffers]; }

    // The control warp: claim, list, hand over, publish, in the order of its claims. idx counts the team's tiles.
    __device__ bool control() {
        const uint32_t lane = team_.lane();
        for (int64_t idx = 0;; ++idx) {
            // The buffer's previous tile must be copied and published before the buffer is listed again.
            finish_through(idx - static_cast<int64_t>(kRowCopyBuffers));
            RowCopyBuffer& buf = buffer_of(idx);
            const int64_t tile = claim_tile();
            if (tile >= queue_.num_tiles) {
                if (lane == 0) {
                    buf.state = BufferState::kNoTileLeft;
                }
                ptx::named_barrier_arrive(ready_barrier(idx), team_.num_threads);
                finish_through(idx - 1);
                return true;
            }
            policy_.load_tile_rows(tile, buf.tile_rows, lane);
            __syncwarp();
            bool open = policy_.load_gate_open(tile, buf.tile_rows, lane) && policy_.store_gate_open(tile, lane);
            if (!open) {
                // Publish everything in flight before blocking (see "Progress" above).
                finish_through(idx - 1);
                open = policy_.wait_load_gate(tile, buf.tile_rows, lane) && policy_.wait_store_gate(tile, lane);
            }
            list_rows(tile, buf, open);
            ptx::named_barrier_arrive(ready_barrier(idx), team_.num_threads);
            if (!open) {
                return false;
            }
        }
    }

    // Lane 0 claims; the whole warp gets the tile.
    __device__ int64_t claim_tile() const {
        const int64_t tile = team_.lane() == 0 ? queue_.claim() : 0;
        return __shfl_sync(kFullWarpMask, tile, 0);
    }

    // Publishes, in order, every tile of the team up to its `last_idx`-th not yet published, each once its copies
    // are done.
    __device__ void finish_through(int64_t last_idx) {
        for (; finished_ <= last_idx; ++finished_) {
            ptx::named_barrier_sync(done_barrier(finished_), team_.num_threads);
            const RowCopyBuffer& buf = buffer_of(finished_);
            policy_.finish_tile(buf.tile, buf.tile_rows, team_.lane());
        }
    }

    // The dense list of the data rows' addresses (rows keep their order), and the gates' verdict.
    __device__ void list_rows(int64_t tile, RowCopyBuffer& buf, bool open) {
        const uint32_t lane = team_.lane();
        uint32_t listed = 0;
        for (uint32_t base = 0; base < static_cast<uint32_t>(kTileRows); base += kWarpSize) {
            const uint32_t r = base + lane;
            const plan::RowSource row = buf.tile_rows[r];
            const bool data = !row.is_padding() && policy_.copies_row(row);
            const uint32_t ballot = __ballot_sync(kFullWarpMask, data);
            if (data) {
                // Each data row's slot is the count of data rows before it.
                const uint32_t slot = listed + __popc(ballot & ((1u << lane) - 1));
                buf.src[slot] = static_cast<const uint4*>(policy_.load_src(tile, row, r));
                buf.dst[slot] = static_cast<uint4*>(policy_.store_dst(tile, row, r));
            }
            listed += __popc(ballot);
        }
        if (lane == 0) {
            buf.tile = tile;
            buf.num_rows = listed;
            buf.state = open ? BufferState::kListed : BufferState::kGateGaveUp;
        }
        __syncwarp();
    }

    // A copy warp: every tile's chunks, handing each tile back as soon as its own part is stored.
    __device__ bool copy() {
        for (int64_t idx = 0;; ++idx) {
            ptx::named_barrier_sync(ready_barrier(idx), team_.num_threads);
            const RowCopyBuffer& buf = buffer_of(idx);
            if (buf.state != BufferState::kListed) {
                return buf.state == BufferState::kNoTileLeft;
            }
            copy_chunks(buf);
            ptx::named_barrier_arrive(done_barrier(idx), team_.num_threads);
        }
    }

    // This thread's chunks of the tile: copy_thread_idx, + n, ..., kChunksInFlight loads at a time. Two cursors
    // walk the same chunks: one for the loads, one, kChunksInFlight behind, for the stores. The last batch is
    // predicated rather than copied chunk by chunk: one chunk at a time, each load would wait out the whole
    // latency (the store after it may alias the next load), and a tile's leftover chunks cost as much as the rest.
    __device__ void copy_chunks(const RowCopyBuffer& buf) const {
        const uint32_t chunks = geometry_.tile_chunks(buf.num_rows);
        const uint32_t n = team_.num_copy_threads();
        ChunkCursor load = ChunkCursor::make(geometry_, team_.copy_thread_idx(), n);
        ChunkCursor store = load;
        for (uint32_t c = team_.copy_thread_idx(); c < chunks; c += kChunksInFlight * n) {
            uint4 v[kChunksInFlight];
#pragma unroll
            for (uint32_t j = 0; j < kChunksInFlight; ++j) {
                if (c + j * n < chunks) {
                    v[j] = *(buf.src[load.row] + load.chunk_in_row);
                }
                load.advance();
            }
#pragma unroll
            for (uint32_t j = 0; j < kChunksInFlight; ++j) {
                if (c + j * n < chunks) {
                    *(buf.dst[store.row] + store.chunk_in_row) = v[j];
                }
                store.advance();
            }
        }
    }

    RowCopyStorage& storage_;
    const CopyTeam& team_;
    const CopyGeometry geometry_;
    Policy& policy_;
    const TileQueue queue_;
    int64_t finished_ = 0;  // control warp: the team's tiles published so far
};

// Runs the copy over the tiles the team claims from `queue` with `policy`; every thread of `team` calls it. True on
// success.
template <typename Policy>
__device__ __forceinline__ bool run_row_copy(RowCopyStorage& storage, const CopyTeam& team,
                                             const CopyGeometry& geometry, Policy& policy, const TileQueue& queue) {
    RowCopyRun<Policy> run(storage, team, geometry, policy, queue);
    return run.execute();
}

}  // namespace mok::comm
