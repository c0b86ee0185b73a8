// The row copy: moves the rows of 128-row tiles from wherever they are to wherever they go, with 16-byte loads
// and stores spread over a team of threads. Dispatch (pull) and combine (push) are two policies of this engine.
//
// Why registers and not bulk copies: a bulk copy is issued by one thread and completes as one unit, so a single
// warp issuing them kept at most a few requests per row in flight and moved 11-15% of NVLink's bandwidth
// whatever its depth; a plain SM copy kernel with every thread keeping a few 16-byte loads in flight fills the
// link from 12-16 SMs (docs/transport.md, "Tuning"). The team keeps kChunksInFlight loads per thread in flight.
//
// Per tile, the team's leader warp (its first 32 threads) prepares and finishes; every thread copies:
//   1. leader warp: load the tile's row metadata, wait for the load gate (the rows' producers are done) and the
//      store gate (the destination is free), and list the data rows' source and destination addresses;
//   2. team barrier; 3. every thread copies its chunks (copy_geometry.hpp); 4. team barrier;
//   5. leader warp: finish the tile (publish it).
// A tile is finished before the next tile's gates are waited on, so no tile ever waits for a later one: the
// progress argument of docs/transport.md ("Token ring") holds for rings of a single tile.
//
// Memory order. The gates end in an acquire fence by the leader warp (signals.cuh); the team barrier that
// follows orders every thread's copy after it. The team barrier after the copy orders every thread's loads and
// stores before the leader warp's finish, whose release fence is cumulative over them. Everything is generic
// proxy: no proxy fences.
//
// A policy supplies the addresses, the gates and the publication (the leader warp calls all of them):
//   void load_tile_rows(int64_t tile, plan::RowSource* rows, uint32_t lane)           fill rows[0, 128)
//   bool wait_load_gate(int64_t tile, const plan::RowSource* rows, uint32_t lane)     warp-uniform, bounded
//   bool wait_store_gate(int64_t tile, uint32_t lane)                                  warp-uniform, bounded
//   const void* load_src(int64_t tile, plan::RowSource row, uint32_t row_in_tile)
//   void* store_dst(int64_t tile, plan::RowSource row, uint32_t row_in_tile)
//   void finish_tile(int64_t tile, const plan::RowSource* rows, uint32_t lane)        after the copy's barrier
//   bool copies_row(plan::RowSource row)                                              the team's share of rows
// Padding rows (RowSource::padding()) are never copied. A gate that gives up (bounded_wait recorded the error)
// ends the run: nothing of that tile is copied or published, and every thread returns false.
#pragma once

#include <cstdint>

#include "device/comm/copy_geometry.hpp"
#include "device/ptx/atomics.cuh"
#include "device/ptx/warpgroup.cuh"
#include "plan/routing_plan.hpp"

namespace mok::comm {

inline constexpr uint32_t kWarpSize = 32;
inline constexpr uint32_t kFullWarpMask = 0xffffffffu;
// 16-byte loads each thread keeps in flight: with 512 threads, 128 KiB per SM. A team's rate is bytes in flight
// over latency: with 64 KiB the copy ran at 32 GB/s per SM, local and remote rows together (about 2 us of
// latency); the link needs 25 GB/s per SM of remote rows alone from 16 SMs, and about half the rows are local.
// 16 loads of 16 bytes take 64 registers, which 512-thread blocks afford (1024-thread blocks would spill).
inline constexpr uint32_t kChunksInFlight = 16;

// The threads that run the copy together: a whole 512-thread block in the standalone kernels, the communication warps
// of a block in a fused kernel. They share one named barrier, reserved for the team.
struct CopyTeam {
    uint32_t thread_idx;   // in [0, num_threads)
    uint32_t num_threads;  // a multiple of 32
    uint32_t barrier_id;   // named barrier id (bar.sync), not used by anything else while the team runs

    __device__ __forceinline__ void sync() const { ptx::named_barrier_sync(barrier_id, num_threads); }
    __device__ __forceinline__ bool in_leader_warp() const { return thread_idx < kWarpSize; }
    __device__ __forceinline__ uint32_t lane() const { return thread_idx % kWarpSize; }
};

// The tiles of one call: begin, begin + stride, ... below end (a block's share of a rank's tiles).
struct TileRange {
    int64_t begin = 0;
    int64_t end = 0;
    int64_t stride = 1;

    __device__ __forceinline__ int64_t count() const { return begin >= end ? 0 : (end - begin + stride - 1) / stride; }
    __device__ __forceinline__ int64_t tile(int64_t idx) const { return begin + idx * stride; }
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

__device__ __forceinline__ bool share_takes(RowShare share, bool row_is_local) {
    return share == RowShare::kAll || (share == RowShare::kLocal) == row_is_local;
}

// Called by lane 0 of each of the two teams that split `tile`, after its copies (team barrier); true for the
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

struct RowCopyStorage {
    plan::RowSource tile_rows[kTileRows];  // (kTileRows) the tile's row metadata, padding included
    const uint4* src[kTileRows];           // (kTileRows) the data rows' sources, densely listed
    uint4* dst[kTileRows];                 // (kTileRows) their destinations
    uint32_t num_rows;                     // data rows listed
    uint32_t gates_open;                   // 0 when a gate gave up
};

template <typename Policy>
class RowCopyRun {
  public:
    __device__ RowCopyRun(RowCopyStorage& storage, const CopyTeam& team, const CopyGeometry& geometry, Policy& policy,
                          const TileRange& tiles)
        : storage_(storage), team_(team), geometry_(geometry), policy_(policy), tiles_(tiles) {}

    // Copies and finishes every tile; true when all were. Every thread of the team calls it.
    __device__ bool execute() {
        const int64_t num_tiles = tiles_.count();
        for (int64_t idx = 0; idx < num_tiles; ++idx) {
            const int64_t tile = tiles_.tile(idx);
            if (team_.in_leader_warp()) {
                prepare(tile);
            }
            team_.sync();
            if (storage_.gates_open == 0) {
                return false;
            }
            copy_chunks();
            // Every thread's loads and stores of the tile come before the leader's release in finish_tile; the
            // barrier also keeps the address lists alive until every thread is done with them.
            team_.sync();
            if (team_.in_leader_warp()) {
                policy_.finish_tile(tile, storage_.tile_rows, team_.lane());
            }
        }
        return true;
    }

  private:
    // Leader warp: metadata, gates, and the dense list of the data rows' addresses.
    __device__ void prepare(int64_t tile) {
        const uint32_t lane = team_.lane();
        policy_.load_tile_rows(tile, storage_.tile_rows, lane);
        __syncwarp();
        const bool open = policy_.wait_load_gate(tile, storage_.tile_rows, lane) && policy_.wait_store_gate(tile, lane);
        uint32_t listed = 0;
        for (uint32_t base = 0; base < static_cast<uint32_t>(kTileRows); base += kWarpSize) {
            const uint32_t r = base + lane;
            const plan::RowSource row = storage_.tile_rows[r];
            const bool data = !row.is_padding() && policy_.copies_row(row);
            const uint32_t ballot = __ballot_sync(kFullWarpMask, data);
            if (data) {
                // Rows keep their order: each data row's slot is the count of data rows before it.
                const uint32_t slot = listed + __popc(ballot & ((1u << lane) - 1));
                storage_.src[slot] = static_cast<const uint4*>(policy_.load_src(tile, row, r));
                storage_.dst[slot] = static_cast<uint4*>(policy_.store_dst(tile, row, r));
            }
            listed += __popc(ballot);
        }
        if (lane == 0) {
            storage_.num_rows = listed;
            storage_.gates_open = open ? 1 : 0;
        }
    }

    // Every thread: chunks thread_idx, thread_idx + n, ... of the tile, kChunksInFlight loads at a time. Two
    // cursors walk the same chunks: one for the loads, one, kChunksInFlight behind, for the stores.
    __device__ void copy_chunks() {
        const uint32_t chunks = geometry_.tile_chunks(storage_.num_rows);
        const uint32_t n = team_.num_threads;
        uint32_t c = team_.thread_idx;
        ChunkCursor load = ChunkCursor::make(geometry_, c, n);
        ChunkCursor store = load;
        for (; c + (kChunksInFlight - 1) * n < chunks; c += kChunksInFlight * n) {
            uint4 v[kChunksInFlight];
#pragma unroll
            for (uint32_t j = 0; j < kChunksInFlight; ++j) {
                v[j] = *source(load);
                load.advance();
            }
#pragma unroll
            for (uint32_t j = 0; j < kChunksInFlight; ++j) {
                *destination(store) = v[j];
                store.advance();
            }
        }
        for (; c < chunks; c += n) {
            *destination(store) = *source(store);
            store.advance();
        }
    }

    __device__ const uint4* source(const ChunkCursor& at) const {
        return storage_.src[at.row] + at.chunk_in_row;
    }

    __device__ uint4* destination(const ChunkCursor& at) const {
        return storage_.dst[at.row] + at.chunk_in_row;
    }

    RowCopyStorage& storage_;
    const CopyTeam& team_;
    const CopyGeometry geometry_;
    Policy& policy_;
    const TileRange tiles_;
};

// Runs the copy over `tiles` with `policy`; every thread of `team` calls it. True on success.
template <typename Policy>
__device__ __forceinline__ bool run_row_copy(RowCopyStorage& storage, const CopyTeam& team,
                                             const CopyGeometry& geometry, Policy& policy, const TileRange& tiles) {
    RowCopyRun<Policy> run(storage, team, geometry, policy, tiles);
    return run.execute();
}

}  // namespace mok::comm
