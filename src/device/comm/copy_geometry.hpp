// How the row pipeline (device/comm/row_pipeline.cuh) cuts a 128-row tile into copy units.
//
// A unit is what one shared-memory stage carries: either several whole rows (short rows), or one piece of one
// row (rows longer than a stage). Plain integer arithmetic, shared by host and device so the host tests can
// check that the units of a tile cover each of its bytes exactly once.
#pragma once

#include <cstdint>

#include "common/host_device.hpp"
#include "plan/routing_plan.hpp"

namespace mok::comm {

// Shared-memory staging: kCopyStages buffers of kStageBytes. 8 x 16 KiB keeps 64 KiB of loads and 64 KiB of
// stores in flight per SM, enough to cover NVLink latency at the per-SM bandwidth 12-16 SMs need to fill the
// link (docs/transport.md, "Tuning").
inline constexpr int32_t kCopyStages = 8;
inline constexpr uint32_t kStageBytes = 16384;
// Bulk-store groups left in flight before a stage is refilled: stages are split between loads in flight
// (kCopyStages - kStoreLag) and stores in flight (kStoreLag).
inline constexpr int32_t kStoreLag = 4;
// Rows per tile: the GEMM M tile, the grain of every readiness flag.
inline constexpr int32_t kTileRows = plan::kExpertRowAlignment;
// Alignment and size granule of bulk copies.
inline constexpr uint32_t kCopyGranule = 16;
// At most this many rows share a unit, so that a tile has at least kCopyStages units: the pipeline's lookahead
// then never spans more than two tiles, and two tiles of row metadata in shared memory suffice.
inline constexpr int32_t kMaxRowsPerUnit = kTileRows / kCopyStages;

// Tiles a ring (of dispatched rows, or of output rows feeding the push) must hold at least. One is enough: the
// row pipeline publishes every tile it holds before it blocks on a gate (row_pipeline.cuh), so tile t never waits
// for a later tile, provided a consumer releases tile t without waiting for any later tile (docs/transport.md,
// "Token ring").
inline constexpr int32_t kMinRingTiles = 1;

static_assert(kStoreLag > 0 && kStoreLag < kCopyStages, "the pipeline needs both loads and stores in flight");
static_assert(kStageBytes % kCopyGranule == 0, "stages hold whole bulk-copy granules");
static_assert(kMaxRowsPerUnit >= 1, "a tile needs at least one unit per stage");

struct CopyUnit {
    uint32_t first_row;    // first row of the unit inside its tile
    uint32_t num_rows;     // rows in the unit
    uint32_t byte_offset;  // offset of the unit's bytes inside each of its rows
    uint32_t bytes;        // bytes per row; row g of the unit sits at g * bytes in the stage
};

struct CopyGeometry {
    uint32_t row_bytes = 0;
    uint32_t pieces_per_row = 1;  // > 1 only for rows longer than a stage
    uint32_t piece_bytes = 0;     // bytes of every piece but the last
    uint32_t rows_per_unit = 1;   // > 1 only for rows of at most half a stage
    uint32_t units_per_tile = 0;

    // `row_bytes` is a positive multiple of kCopyGranule.
    MOK_HOST_DEVICE static CopyGeometry make(uint32_t row_bytes) {
        CopyGeometry g;
        g.row_bytes = row_bytes;
        if (row_bytes > kStageBytes) {
            g.pieces_per_row = (row_bytes + kStageBytes - 1) / kStageBytes;
            const uint32_t even_share = (row_bytes + g.pieces_per_row - 1) / g.pieces_per_row;
            g.piece_bytes = (even_share + kCopyGranule - 1) / kCopyGranule * kCopyGranule;
            g.rows_per_unit = 1;
        } else {
            g.piece_bytes = row_bytes;
            // A power of two, so that units never straddle a tile of 128 rows.
            uint32_t rows = 1;
            while (rows * 2 <= static_cast<uint32_t>(kMaxRowsPerUnit) && rows * 2 * row_bytes <= kStageBytes) {
                rows *= 2;
            }
            g.rows_per_unit = rows;
        }
        g.units_per_tile = static_cast<uint32_t>(kTileRows) / g.rows_per_unit * g.pieces_per_row;
        return g;
    }

    // Unit `unit_idx` (in [0, units_per_tile)) of a tile.
    MOK_HOST_DEVICE CopyUnit unit(uint32_t unit_idx) const {
        const uint32_t row_group = unit_idx / pieces_per_row;
        const uint32_t piece = unit_idx % pieces_per_row;
        const uint32_t offset = piece * piece_bytes;
        const uint32_t bytes = piece + 1 == pieces_per_row ? row_bytes - offset : piece_bytes;
        return {row_group * rows_per_unit, rows_per_unit, offset, bytes};
    }
};

// Longest row the geometry handles: the last piece must stay non-empty (pieces_per_row * 16 bytes of rounding
// stay below one piece), which holds with a wide margin for every row up to 1 MiB (H up to 512 Ki elements).
inline constexpr uint32_t kMaxCopyRowBytes = 1u << 20;

}  // namespace mok::comm
