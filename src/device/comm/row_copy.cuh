// The row copy: moves the rows of 128-row tiles from wherever they are to wherever they go, by bulk copies through
// shared memory. Dispatch (pull) and combine (push) are two policies of this engine.
//
// Why bulk copies. Lane 0 of each of a team's kBulkIssuers copy warps (an issuer) moves whole rows: a bulk load
// (cp.async.bulk, global -> shared, completing on an mbarrier) into a stage of its own ring, then a bulk store of the
// landed stage to the row's destination. The TMA unit keeps a whole row per stage in flight, so four issuers with
// three to six stages each keep 150-190 KiB in flight per SM for a handful of instructions; 480 threads with sixteen
// 16-byte loads each kept 120 KiB for 7,680 loads and as many stores. Measured on the dispatch's remote rows alone, a
// bulk gather with four issuers per SM moved them at 0.84-0.86 of the peer copy from 8 SMs, where 16-byte loads from
// every thread needed 16-24 SMs for the same (docs/transport.md, "Bulk copies"). With one issuer per SM the same
// gather reached 0.25-0.83, and the first bulk copy here, one issuing warp per SM, 0.11-0.15: an issuer's reload of a
// stage waits for the previous store's read of it, so one issuer leaves the TMA unit idle between rows.
//
// Roles. The team's first warp is its control warp: it claims the team's next tile (TileQueue), loads its row
// metadata, passes the tile's gates (the rows' producers are done, the destination is free), lists the data rows'
// addresses in one of kRowCopyBuffers shared buffers, and, once the tile is copied, finishes (publishes) it. The
// issuers copy: tile after tile, each its share of the rows (copy_geometry.hpp). The control warp lists the next tile
// and publishes the previous one while a tile is copied, and an issuer that is done with its part of a tile moves on
// to the next one without waiting for the others; where the next tile is listed already, its first loads go out
// before the current tile's stores have completed. Named barriers carry the hand-offs:
//   ready[b]  control warp arrives once buffer b is listed (or says that no tile is left); copy warps wait on it
//   done[b]   copy warps arrive once their part of buffer b's tile is stored; the control warp waits on it,
//             then publishes the tile and may list buffer b again
// Tiles are claimed, not dealt: the teams of a share take the rank's tiles one at a time from a counter, in
// increasing order (TileQueue), so that a team that drew cheap tiles (rows that do not cross NVLink) takes more.
// Progress. The control warp first polls a tile's gates; only when one is closed does it block, and before it
// blocks it publishes every tile in flight. Claims come in increasing order, so the smallest unfinished tile has
// been claimed by a team that waits for nothing later: the progress argument of docs/transport.md ("Token ring")
// holds for rings of a single tile. An issuer therefore never waits for the next tile's listing before it has handed
// the current one back: it looks at the buffer's `listed` word and goes on without it.
//
// Memory order. An open gate has observed its flags by acquire loads (signals.cuh); ready[b] (or the `listed` word's
// release/acquire) orders the issuer after it, and the issuer's proxy fence orders its bulk copies (async proxy) after
// that. Before an issuer arrives on done[b] its stores are complete (bulk wait_group 0) and fenced back to the
// generic proxy, so that the control warp's finish, whose release fence is cumulative, covers them.
//
// A lost bulk load. An issuer waits for each of its loads to land with a time budget (bounded_wait_own: a load
// completes whatever other blocks do, so only the budget ends the wait). When it runs out, the error is recorded
// (WaitSite::kBulkCopy), the issuer copies nothing more and says so in `issuer_failed`, and the control warp
// publishes neither that tile nor any later one: it drains the tiles in flight and ends the run as a gate that gave
// up does. The lost load may still land in the block's shared memory before the block exits; the step has failed by
// then, and the host reports it.
//
// A policy supplies the addresses, the gates and the publication (the control warp calls all of them):
//   void load_tile_rows(int64_t tile, plan::RowSource* rows, uint32_t lane)           fill rows[0, 128)
//   bool load_gate_open(int64_t tile, const plan::RowSource* rows, uint32_t lane)     warp-uniform, never blocks
//   bool wait_load_gate(int64_t tile, const plan::RowSource* rows, uint32_t lane)     warp-uniform, bounded
//   bool store_gate_open(int64_t tile, uint32_t lane)                                  warp-uniform, never blocks
//   bool wait_store_gate(int64_t tile, uint32_t lane)                                  warp-uniform, bounded
//   uint32_t list_row(int64_t tile, plan::RowSource row, uint32_t row_in_tile,
//                     uint4* (&dsts)[kMaxRowFanout])     0: the team does not load the row; else its destinations
//                                                        (up to kMaxRowFanout, 16-byte aligned) in dsts
//   const void* load_src(int64_t tile, plan::RowSource row, uint32_t row_in_tile)     16-byte aligned
//   void finish_tile(const RowCopyBuffer& tile, uint32_t lane)                        after the tile's copies
// Padding rows (RowSource::padding()) are never copied. A listed row is loaded once and stored to each of its
// destinations from the same stage (one bulk group per piece, so a stage is refilled once all of them have read it). A
// gate that gives up (bounded_wait recorded the error) ends the run: nothing of that tile is copied or published, and
// every thread returns false.
#pragma once

#include <cstdint>

#include "device/comm/copy_geometry.hpp"
#include "device/comm/tile_claims.hpp"
#include "device/common/bounded_wait.cuh"
#include "device/common/warp.cuh"
#include "device/layout/transport_layout.hpp"
#include "device/ptx/atomics.cuh"
#include "device/ptx/bulk_copy.cuh"
#include "device/ptx/mbarrier.cuh"
#include "device/ptx/warpgroup.cuh"
#include "plan/routing_plan.hpp"

namespace mok::comm {

using device::kFullWarpMask;
using device::kWarpSize;

// The threads that run the copy together: a whole block in the standalone kernels, the communication warps of
// a block in a fused kernel. Its first warp is the control warp; the team needs at least one more.
struct CopyTeam {
    uint32_t thread_idx;        // in [0, num_threads)
    uint32_t num_threads;       // a multiple of 32, at least 64 (one issuer); 32 x (1 + kBulkIssuers) uses them all
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
    uint4* dst[kTileRows][kMaxRowFanout];  // (kTileRows, kMaxRowFanout) their destinations, num_dsts[i] of row i's
    uint8_t num_dsts[kTileRows];           // (kTileRows) 1..kMaxRowFanout
    int64_t tile;                          // the claimed tile (control warp: which one to finish)
    uint64_t listed;                       // 1 + the team's count of the tile last listed here (released last)
    uint32_t num_rows;                     // data rows listed
    BufferState state;
};

struct RowCopyStorage {
    RowCopyBuffer buffers[kRowCopyBuffers];             // the team's i-th tile uses buffers[i % kRowCopyBuffers]
    uint64_t stage_full[kBulkIssuers][kMaxBulkStages];  // each issuer's stages: the bulk load has landed
    uint32_t issuer_failed;  // nonzero once an issuer's load ran out of time; written by that issuer, read by the
                             // control warp after the tile's done barrier, which orders the two
};

template <typename Policy>
class RowCopyRun {
  public:
    __device__ RowCopyRun(RowCopyStorage& storage, const CopyTeam& team, uint32_t row_bytes, Policy& policy,
                          const TileQueue& queue, const device::WaitContext& ctx, uint8_t* staging)
        : storage_(storage),
          team_(team),
          row_bytes_(row_bytes),
          policy_(policy),
          queue_(queue),
          ctx_(ctx),
          staging_(staging) {}

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
        // The issuers' look ahead reads `listed` (copy): no value from an earlier block on this SM may pass for a
        // listing of this run, nor an earlier run's failure for one of this run. The first ready barrier orders
        // these stores before any read.
        if (lane == 0) {
            for (RowCopyBuffer& b : storage_.buffers) {
                b.listed = 0;
            }
            storage_.issuer_failed = 0;
        }
        for (int64_t idx = 0;; ++idx) {
            // The buffer's previous tile must be copied and published before the buffer is listed again.
            finish_through(idx - static_cast<int64_t>(kRowCopyBuffers));
            RowCopyBuffer& buf = buffer_of(idx);
            if (copy_failed_) {
                // An issuer lost a load (see "A lost bulk load"): drain the tiles in flight unpublished, then end the
                // copy warps' run.
                finish_through(idx - 1);
                if (lane == 0) {
                    buf.state = BufferState::kGateGaveUp;
                }
                ptx::named_barrier_arrive(ready_barrier(idx), team_.num_threads);
                return false;
            }
            const int64_t tile = claim_tile();
            if (tile >= queue_.num_tiles) {
                if (lane == 0) {
                    buf.state = BufferState::kNoTileLeft;
                }
                ptx::named_barrier_arrive(ready_barrier(idx), team_.num_threads);
                finish_through(idx - 1);
                return !copy_failed_;
            }
            policy_.load_tile_rows(tile, buf.tile_rows, lane);
            __syncwarp();
            bool open = policy_.load_gate_open(tile, buf.tile_rows, lane) && policy_.store_gate_open(tile, lane);
            if (!open) {
                // Publish everything in flight before blocking (see "Progress" above).
                finish_through(idx - 1);
                open = policy_.wait_load_gate(tile, buf.tile_rows, lane) && policy_.wait_store_gate(tile, lane);
            }
            list_rows(tile, buf, open, idx);
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
    // are done; once an issuer has lost a load, none.
    __device__ void finish_through(int64_t last_idx) {
        for (; finished_ <= last_idx; ++finished_) {
            ptx::named_barrier_sync(done_barrier(finished_), team_.num_threads);
            copy_failed_ = copy_failed_ || storage_.issuer_failed != 0;
            if (!copy_failed_) {
                const RowCopyBuffer& buf = buffer_of(finished_);
                policy_.finish_tile(buf, team_.lane());
            }
        }
    }

    // The dense list of the data rows' addresses (rows keep their order), and the gates' verdict.
    __device__ void list_rows(int64_t tile, RowCopyBuffer& buf, bool open, int64_t idx) {
        const uint32_t lane = team_.lane();
        uint32_t listed = 0;
        for (uint32_t base = 0; base < static_cast<uint32_t>(kTileRows); base += kWarpSize) {
            const uint32_t r = base + lane;
            const plan::RowSource row = buf.tile_rows[r];
            uint4* dsts[kMaxRowFanout];
            const uint32_t num_dsts = row.is_padding() ? 0 : policy_.list_row(tile, row, r, dsts);
            const uint32_t ballot = __ballot_sync(kFullWarpMask, num_dsts > 0);
            if (num_dsts > 0) {
                // Each data row's slot is the count of data rows before it.
                const uint32_t slot = listed + __popc(ballot & ((1u << lane) - 1));
                buf.src[slot] = static_cast<const uint4*>(policy_.load_src(tile, row, r));
                buf.num_dsts[slot] = static_cast<uint8_t>(num_dsts);
#pragma unroll
                for (uint32_t d = 0; d < kMaxRowFanout; ++d) {
                    if (d < num_dsts) {  // a policy fills only the destinations it counts
                        buf.dst[slot][d] = dsts[d];
                    }
                }
            }
            listed += __popc(ballot);
        }
        if (lane == 0) {
            buf.tile = tile;
            buf.num_rows = listed;
            buf.state = open ? BufferState::kListed : BufferState::kGateGaveUp;
        }
        __syncwarp();
        // For the issuers' look ahead (copy): the warp's writes above, released after the warp barrier.
        if (lane == 0) {
            ptx::st_release_cta_shared(&buf.listed, static_cast<uint64_t>(idx) + 1);
        }
    }

    // A copy warp. The first kBulkIssuers copy warps are issuers: their lane 0 moves the rows by bulk copies
    // (bulk_pieces); the others only keep the barriers' counts. Where the control warp has listed the next tile by
    // the time the current one's pieces are all stored, the issuer starts the next tile's loads before it waits for the
    // current tile's stores to complete. It only looks (the buffer's `listed` word), never waits: the control warp may
    // wait for this tile's done barrier before it lists the next one (it publishes every tile in flight before it
    // blocks on a gate), so waiting here for the next ready barrier first could deadlock.
    __device__ bool copy() {
        const uint32_t warp = team_.copy_thread_idx() / kWarpSize;
        const uint32_t num_issuers = min(kBulkIssuers, team_.num_copy_threads() / kWarpSize);
        if (warp >= num_issuers) {
            for (int64_t idx = 0;; ++idx) {
                ptx::named_barrier_sync(ready_barrier(idx), team_.num_threads);
                const RowCopyBuffer& buf = buffer_of(idx);
                if (buf.state != BufferState::kListed) {
                    return buf.state == BufferState::kNoTileLeft;
                }
                ptx::named_barrier_arrive(done_barrier(idx), team_.num_threads);
            }
        }
        const bool lead = team_.lane() == 0;
        bool lost_load = false;  // lead: a load of this issuer ran out of time; it copies nothing more
        BulkPieces pieces = bulk_pieces(warp, num_issuers);
        if (lead) {
            for (uint32_t s = 0; s < pieces.geometry.num_stages; ++s) {
                ptx::mbarrier_init(&pieces.full[s], 1);  // the issuer's own arrive_expect_tx
            }
            ptx::fence_mbarrier_init();
        }
        ptx::named_barrier_sync(ready_barrier(0), team_.num_threads);
        if (lead && buffer_of(0).state == BufferState::kListed) {
            pieces.start(buffer_of(0));
        }
        for (int64_t idx = 0;; ++idx) {
            const RowCopyBuffer& buf = buffer_of(idx);
            if (buf.state != BufferState::kListed) {
                return !lost_load && buf.state == BufferState::kNoTileLeft;
            }
            const RowCopyBuffer& next = buffer_of(idx + 1);
            bool started_next = false;
            if (lead && !lost_load) {
                lost_load = !pieces.run(buf, ctx_);
                if (!lost_load) {
                    ptx::bulk_wait_group_read<0>();  // every stage free for the next tile's loads
                    // The next tile's first loads, if the control warp has listed it already (no wait: the control
                    // warp may itself wait for this tile's done barrier before it lists the next one).
                    if (ptx::ld_acquire_cta_shared(&next.listed) == static_cast<uint64_t>(idx) + 2 &&
                        next.state == BufferState::kListed) {
                        pieces.start(next);
                        started_next = true;
                    }
                } else {
                    storage_.issuer_failed = 1;  // before the done barrier, which orders it for the control warp
                }
                // This tile's stores performed, and visible to the generic proxy, before the done barrier hands the
                // tile to the control warp's release.
                ptx::bulk_wait_group<0>();
                ptx::fence_proxy_async_global();
            }
            // Lane 0's verdict to the warp, which also reconverges it (lane 0 ran the copies alone) before the
            // barrier arrival.
            started_next = __shfl_sync(kFullWarpMask, started_next, 0);
            ptx::named_barrier_arrive(done_barrier(idx), team_.num_threads);
            ptx::named_barrier_sync(ready_barrier(idx + 1), team_.num_threads);
            if (lead && !lost_load && !started_next && next.state == BufferState::kListed) {
                pieces.start(next);
            }
        }
    }

    // Issuer w of num_issuers and its ring of stages: its share of each tile's rows, in pieces (BulkGeometry), every
    // stage but one loading while a landed piece is stored.
    struct BulkPieces {
        BulkGeometry geometry;
        uint8_t* stages;  // (num_stages, piece_bytes)
        uint64_t* full;   // (num_stages) the stage's load has landed
        uint32_t w;
        uint32_t num_issuers;
        uint64_t uses = 0;       // stage uses before this tile's: item i takes stage (uses + i) % num_stages
        uint32_t num_items = 0;  // this tile's pieces
        uint32_t issued = 0;     // of them loaded so far

        __device__ uint32_t stage_of(uint32_t i) const {
            return static_cast<uint32_t>((uses + i) % geometry.num_stages);
        }

        __device__ void load(const RowCopyBuffer& buf, uint32_t i) {
            const PiecePosition at = geometry.piece(i, w, num_issuers);
            const uint32_t stage = stage_of(i);
            ptx::mbarrier_arrive_expect_tx_release_cta(&full[stage], at.bytes);
            ptx::bulk_load_global_to_shared(stages + stage * geometry.piece_bytes,
                                            reinterpret_cast<const uint8_t*>(buf.src[at.row]) + at.byte_offset,
                                            at.bytes, &full[stage]);
        }

        // The tile's first loads, into stages whose stores have all read them.
        __device__ void start(const RowCopyBuffer& buf) {
            num_items = geometry.issuer_items(buf.num_rows, w, num_issuers);
            issued = 0;
            if (num_items == 0) {
                return;
            }
            // The gates' acquire (the control warp's, ordered before this thread by the ready barrier or the listing's
            // release) must order the bulk copies too, which are async-proxy accesses.
            ptx::fence_proxy_async_global();
            for (; issued < num_items && issued < geometry.num_stages; ++issued) {
                load(buf, issued);
            }
        }

        // The rest of the tile: each landed piece stored, each stage refilled once its store has read it. False when
        // a load did not land within the budget (the error is recorded); the pieces after it are not stored.
        __device__ bool run(const RowCopyBuffer& buf, const device::WaitContext& ctx) {
            for (uint32_t j = 0; j < num_items; ++j) {
                const uint32_t stage = stage_of(j);
                const auto parity = static_cast<uint32_t>((uses + j) / geometry.num_stages) & 1u;
                // The gates opened the source, so the load lands unless the hardware lost it; the budget turns that
                // into a reported error. Reported: the tile's pieces stored so far, of its pieces.
                const bool landed = device::bounded_wait_own(
                    ctx, WaitSite::kBulkCopy, num_items,
                    [&] { return ptx::mbarrier_try_wait_parity_acquire_cta(&full[stage], parity); },
                    [&] { return static_cast<int64_t>(j); });
                if (!landed) {
                    return false;
                }
                const PiecePosition at = geometry.piece(j, w, num_issuers);
                const uint32_t num_dsts = buf.num_dsts[at.row];
                for (uint32_t d = 0; d < num_dsts; ++d) {
                    ptx::bulk_store_shared_to_global(reinterpret_cast<uint8_t*>(buf.dst[at.row][d]) + at.byte_offset,
                                                     stages + stage * geometry.piece_bytes, at.bytes);
                }
                ptx::bulk_commit_group();
                // Once the previous piece's store has read its stage (at most this one pending), that stage takes
                // the next load.
                if (j >= 1 && issued < num_items) {
                    ptx::bulk_wait_group_read<1>();
                    load(buf, issued);
                    ++issued;
                }
            }
            uses += num_items;
            num_items = 0;
            return true;
        }
    };

    __device__ BulkPieces bulk_pieces(uint32_t w, uint32_t num_issuers) const {
        BulkPieces p;
        const uint32_t share = BulkGeometry::share_bytes(kBulkStagingBytes, num_issuers);
        p.geometry = BulkGeometry::make(row_bytes_, share);
        p.stages = staging_ + static_cast<size_t>(w) * share;
        p.full = storage_.stage_full[w];
        p.w = w;
        p.num_issuers = num_issuers;
        return p;
    }

    RowCopyStorage& storage_;
    const CopyTeam& team_;
    const uint32_t row_bytes_;  // a multiple of kCopyGranule, at most kMaxCopyRowBytes
    Policy& policy_;
    const TileQueue queue_;
    const device::WaitContext& ctx_;  // the bulk loads' wait budget and where a lost one is reported
    uint8_t* staging_;                // kBulkStagingBytes of shared memory, 128-byte aligned
    int64_t finished_ = 0;            // control warp: the team's tiles finished so far
    bool copy_failed_ = false;        // control warp: an issuer lost a load; nothing more is published
};

// Runs the copy over the tiles the team claims from `queue` with `policy`; every thread of `team` calls it. True on
// success.
template <typename Policy>
__device__ __forceinline__ bool run_row_copy(RowCopyStorage& storage, const CopyTeam& team, uint32_t row_bytes,
                                             Policy& policy, const TileQueue& queue, const device::WaitContext& ctx) {
    // The block's dynamic shared memory: kBulkStagingBytes for the bulk copies' stages.
    extern __shared__ __align__(128) uint8_t bulk_staging[];
    RowCopyRun<Policy> run(storage, team, row_bytes, policy, queue, ctx, bulk_staging);
    return run.execute();
}

}  // namespace mok::comm
