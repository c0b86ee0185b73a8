// The row pipeline: moves the rows of 128-row tiles from wherever they are to wherever they go, through shared
// memory, with bulk copies. Dispatch (pull) and combine (push) are two policies of this one engine.
//
// One warp runs it. Lane 0 issues every bulk copy and owns the bulk async-groups; the other lanes load tile
// metadata and publish flags in parallel. Shared memory holds kCopyStages stages (copy_geometry.hpp):
//
//   load  unit v : global -> stage v % kCopyStages, completing on full[stage] (mbarrier, tx-count = bytes)
//   store unit u : stage -> global, one bulk async-group per unit
//
// Loads run up to kCopyStages - kStoreLag units ahead of stores. After committing store u, lane 0 waits until at
// most kStoreLag groups are pending, so store u - kStoreLag has completed: its stage may take another load, and a
// tile whose last unit is u - kStoreLag or earlier is complete and is finished (published).
//
// Gates. Before the first load of a tile the policy's load gate must be open (its rows' producers are done), and
// before the first store of a tile its store gate (its destination is free). A gate is first polled; only when
// it is closed does the engine block on it, and before blocking it flushes: it stores every unit already loaded,
// waits for all stores, and finishes every complete tile. So a tile is published without depending on any later
// tile, whatever the ring sizes and however many blocks share the tiles: the progress argument of
// docs/transport.md ("Token ring") holds for rings of a single tile.
//
// A policy supplies the addresses, the gates and the publication:
//   void load_tile_rows(int64_t tile, plan::RowSource* rows, uint32_t lane)          warp: fill rows[0, 128)
//   bool load_gate_open(int64_t tile, const plan::RowSource* rows, uint32_t lane)    warp-uniform, never blocks
//   bool wait_load_gate(int64_t tile, const plan::RowSource* rows, uint32_t lane)    warp-uniform, bounded
//   bool store_gate_open(int64_t tile, uint32_t lane)                                 warp-uniform, never blocks
//   bool wait_store_gate(int64_t tile, uint32_t lane)                                 warp-uniform, bounded
//   const void* load_src(int64_t tile, plan::RowSource row, uint32_t row_in_tile)     lane 0
//   void* store_dst(int64_t tile, plan::RowSource row, uint32_t row_in_tile)          lane 0
//   void finish_tile(int64_t tile, const plan::RowSource* rows, uint32_t lane)        warp, after the tile's
//        stores completed and lane 0 issued a generic/async proxy fence
// An open gate has already issued the acquire (and proxy) fences its data needs. Padding rows
// (RowSource::padding()) are never copied.
//
// A wait that gives up (bounded_wait recorded the error) stops the pipeline: nothing more is issued, the copies
// already in flight are drained so that no bulk copy targets this CTA's shared memory after it exits, and the
// call returns false. Nothing of the failed tile is published.
#pragma once

#include <cstdint>

#include "common/device_status.hpp"
#include "device/comm/copy_geometry.hpp"
#include "device/common/bounded_wait.cuh"
#include "device/ptx/atomics.cuh"
#include "device/ptx/bulk_copy.cuh"
#include "device/ptx/mbarrier.cuh"
#include "plan/routing_plan.hpp"

namespace mok::comm {

inline constexpr uint32_t kWarpSize = 32;
inline constexpr uint32_t kFullWarpMask = 0xffffffffu;
// Loads run ahead of stores by at most this many units: the stages not reserved for stores in flight.
inline constexpr int32_t kLoadLead = kCopyStages - kStoreLag;
// Loads never run more than one tile ahead of the finished tiles (a tile has at least kCopyStages units), so
// the row metadata of two tiles is all the pipeline holds.
inline constexpr int32_t kTileRowBuffers = 2;

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

struct RowPipelineStorage {
    alignas(128) uint8_t stages[kCopyStages][kStageBytes];  // (kStageBytes) x kCopyStages
    plan::RowSource tile_rows[kTileRowBuffers][kTileRows];  // (kTileRows) x 2: metadata of the tiles in flight
    uint64_t full[kCopyStages];                             // stage loaded: 1 arrival + the load bytes
};

// Shared memory a kernel reserves for the pipeline (dynamic shared memory is only 16-byte aligned).
inline constexpr size_t kRowPipelineSmemBytes = sizeof(RowPipelineStorage) + alignof(RowPipelineStorage);

__device__ __forceinline__ RowPipelineStorage& row_pipeline_storage(void* dynamic_smem) {
    const uintptr_t raw = reinterpret_cast<uintptr_t>(dynamic_smem);
    const uintptr_t aligned = (raw + alignof(RowPipelineStorage) - 1) & ~(uintptr_t{alignof(RowPipelineStorage)} - 1);
    return *reinterpret_cast<RowPipelineStorage*>(aligned);
}

// Units issued by this CTA's pipeline so far: the stage ring's position and phase, kept across calls so that a
// persistent kernel can run the pipeline many times on barriers initialised once.
struct RowPipelineState {
    uint32_t units = 0;

    __device__ __forceinline__ uint32_t stage(int64_t unit) const {
        return static_cast<uint32_t>((units + unit) % kCopyStages);
    }
    __device__ __forceinline__ uint32_t parity(int64_t unit) const {
        return static_cast<uint32_t>(((units + unit) / kCopyStages) & 1);
    }
};

// Called once per CTA by the pipeline's warp, before the first run.
__device__ __forceinline__ void row_pipeline_init(RowPipelineStorage& storage) {
    if (threadIdx.x % kWarpSize == 0) {
        for (int32_t s = 0; s < kCopyStages; ++s) {
            // One arrival per phase: lane 0's arrive.expect_tx; the bytes complete the phase.
            ptx::mbarrier_init(&storage.full[s], 1);
        }
        ptx::fence_mbarrier_init();
    }
    __syncwarp();
}

// Broadcasts lane 0's verdict so that the whole warp takes the same branch.
__device__ __forceinline__ bool warp_uniform(bool lane0_value) {
    return __shfl_sync(kFullWarpMask, lane0_value ? 1 : 0, 0) != 0;
}

template <typename Policy>
class RowPipelineRun {
  public:
    __device__ RowPipelineRun(RowPipelineStorage& storage, RowPipelineState& state, const CopyGeometry& geometry,
                              Policy& policy, const TileRange& tiles, const device::WaitContext& ctx)
        : storage_(storage),
          state_(state),
          geometry_(geometry),
          policy_(policy),
          tiles_(tiles),
          ctx_(ctx),
          lane_(threadIdx.x % kWarpSize),
          num_tiles_(tiles.count()),
          num_units_(tiles.count() * geometry.units_per_tile) {}

    // Runs every unit of every tile; true when all tiles were copied and finished.
    __device__ bool execute() {
        bool ok = top_up_loads();
        while (ok && stores_ < num_units_) {
            ok = issue_store();
            if (!ok) {
                break;
            }
            if (lane_ == 0) {
                ptx::bulk_commit_group();
                // Stores up to stores_ - 1 - kStoreLag are now complete (written, not only read from shared).
                ptx::bulk_wait_group<kStoreLag>();
            }
            __syncwarp();
            finish_tiles_through(stores_ - 1 - kStoreLag);
            ok = top_up_loads();
        }
        if (ok) {
            wait_all_stores();
            finish_tiles_through(num_units_ - 1);
        } else {
            abandon();
        }
        state_.units += static_cast<uint32_t>(loads_);
        return ok;
    }

  private:
    __device__ int64_t tile_idx_of(int64_t unit) const { return unit / geometry_.units_per_tile; }
    __device__ uint32_t unit_in_tile(int64_t unit) const {
        return static_cast<uint32_t>(unit % geometry_.units_per_tile);
    }
    __device__ plan::RowSource* rows_of(int64_t tile_idx) { return storage_.tile_rows[tile_idx % kTileRowBuffers]; }

    // Issues loads while a stage is free. Load v reuses the stage of unit v - kCopyStages; with v < stores_ +
    // kLoadLead, that unit is at most stores_ - 1 - kStoreLag, which the last wait_group completed.
    __device__ bool top_up_loads() {
        bool ok = true;
        while (ok && loads_ < num_units_ && loads_ < stores_ + kLoadLead) {
            ok = issue_load();
        }
        return ok;
    }

    // Loads unit loads_ into its stage. The first unit of a tile first fetches the tile's row metadata (into the
    // buffer of tile tile_idx - 2, finished by now: see kTileRowBuffers) and passes the tile's load gate.
    __device__ bool issue_load() {
        const int64_t unit_idx = loads_;
        const int64_t tile_idx = tile_idx_of(unit_idx);
        const uint32_t in_tile = unit_in_tile(unit_idx);
        const int64_t tile = tiles_.tile(tile_idx);
        plan::RowSource* rows = rows_of(tile_idx);
        if (in_tile == 0) {
            policy_.load_tile_rows(tile, rows, lane_);
            __syncwarp();
            if (!policy_.load_gate_open(tile, rows, lane_)) {
                if (!flush_loaded_units() || !policy_.wait_load_gate(tile, rows, lane_)) {
                    return false;
                }
            }
        }
        if (lane_ == 0) {
            const CopyUnit unit = geometry_.unit(in_tile);
            const uint32_t stage = state_.stage(unit_idx);
            uint32_t bytes = 0;
            for (uint32_t g = 0; g < unit.num_rows; ++g) {
                bytes += rows[unit.first_row + g].is_padding() ? 0 : unit.bytes;
            }
            // Announce the bytes before issuing the copies; an all-padding unit completes its phase at once.
            ptx::mbarrier_arrive_expect_tx_release_cta(&storage_.full[stage], bytes);
            for (uint32_t g = 0; g < unit.num_rows; ++g) {
                const uint32_t row = unit.first_row + g;
                if (!rows[row].is_padding()) {
                    const char* src = static_cast<const char*>(policy_.load_src(tile, rows[row], row));
                    ptx::bulk_load_global_to_shared(storage_.stages[stage] + g * unit.bytes, src + unit.byte_offset,
                                                    unit.bytes, &storage_.full[stage]);
                }
            }
        }
        ++loads_;
        return true;
    }

    // Stores unit stores_; the first unit of a tile first passes the tile's store gate.
    __device__ bool issue_store() {
        if (unit_in_tile(stores_) == 0) {
            const int64_t tile = tiles_.tile(tile_idx_of(stores_));
            if (!policy_.store_gate_open(tile, lane_)) {
                // Every unit before this one is stored: publish the finished tiles before blocking.
                wait_all_stores();
                finish_tiles_through(stores_ - 1);
                if (!policy_.wait_store_gate(tile, lane_)) {
                    return false;
                }
            }
        }
        return store_unit();
    }

    // Stores unit stores_ from its stage once its load landed; no gate.
    __device__ bool store_unit() {
        const int64_t unit_idx = stores_;
        const int64_t tile = tiles_.tile(tile_idx_of(unit_idx));
        const plan::RowSource* rows = rows_of(tile_idx_of(unit_idx));
        const uint32_t stage = state_.stage(unit_idx);
        bool landed = true;
        if (lane_ == 0) {
            landed = ptx::mbarrier_wait_parity_bounded(ctx_, WaitSite::kBulkCopy, &storage_.full[stage],
                                                       state_.parity(unit_idx));
        }
        if (!warp_uniform(landed)) {
            return false;
        }
        if (lane_ == 0) {
            const CopyUnit unit = geometry_.unit(unit_in_tile(unit_idx));
            for (uint32_t g = 0; g < unit.num_rows; ++g) {
                const uint32_t row = unit.first_row + g;
                if (!rows[row].is_padding()) {
                    char* dst = static_cast<char*>(policy_.store_dst(tile, rows[row], row));
                    ptx::bulk_store_shared_to_global(dst + unit.byte_offset, storage_.stages[stage] + g * unit.bytes,
                                                     unit.bytes);
                }
            }
        }
        ++stores_;
        return true;
    }

    // Before blocking on a load gate: stores every loaded unit, waits for every store and finishes every
    // complete tile. None of these units starts a tile (loads lead stores by fewer units than a tile has, and
    // this runs at the first unit of a tile), so no store gate is involved.
    __device__ bool flush_loaded_units() {
        while (stores_ < loads_) {
            if (!store_unit()) {
                return false;
            }
            if (lane_ == 0) {
                ptx::bulk_commit_group();
            }
        }
        wait_all_stores();
        finish_tiles_through(stores_ - 1);
        return true;
    }

    __device__ void wait_all_stores() {
        if (lane_ == 0) {
            ptx::bulk_wait_group<0>();
        }
        __syncwarp();
    }

    // Finishes, in order, every tile whose last unit is at or before `completed_unit`.
    __device__ void finish_tiles_through(int64_t completed_unit) {
        while (tiles_finished_ < num_tiles_ && (tiles_finished_ + 1) * geometry_.units_per_tile - 1 <= completed_unit) {
            if (lane_ == 0) {
                // The tile's bulk stores (async proxy) completed; order them before the generic-proxy flag
                // stores the policy makes next.
                ptx::fence_proxy_async_global();
            }
            __syncwarp();
            policy_.finish_tile(tiles_.tile(tiles_finished_), rows_of(tiles_finished_), lane_);
            ++tiles_finished_;
        }
    }

    // After a failed wait: waits for the loads in flight (so no copy lands in this CTA's shared memory after it
    // exits) and for the stores in flight. These waits are bounded too; the copies they wait for always finish,
    // and within bounded_wait's first polls, before it checks for the already-recorded abort.
    __device__ void abandon() {
        if (lane_ == 0) {
            for (int64_t unit_idx = stores_; unit_idx < loads_; ++unit_idx) {
                ptx::mbarrier_wait_parity_bounded(ctx_, WaitSite::kBulkCopy, &storage_.full[state_.stage(unit_idx)],
                                                  state_.parity(unit_idx));
            }
            ptx::bulk_commit_group();
            ptx::bulk_wait_group<0>();
        }
        __syncwarp();
    }

    RowPipelineStorage& storage_;
    RowPipelineState& state_;
    const CopyGeometry& geometry_;
    Policy& policy_;
    const TileRange tiles_;
    const device::WaitContext& ctx_;
    const uint32_t lane_;
    const int64_t num_tiles_;
    const int64_t num_units_;
    int64_t loads_ = 0;
    int64_t stores_ = 0;
    int64_t tiles_finished_ = 0;
};

// Runs the pipeline over `tiles` with `policy`; the calling warp must be converged. True on success.
template <typename Policy>
__device__ __forceinline__ bool run_row_pipeline(RowPipelineStorage& storage, RowPipelineState& state,
                                                 const CopyGeometry& geometry, Policy& policy, const TileRange& tiles,
                                                 const device::WaitContext& ctx) {
    RowPipelineRun<Policy> run(storage, state, geometry, policy, tiles, ctx);
    return run.execute();
}

}  // namespace mok::comm
