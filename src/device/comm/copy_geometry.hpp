// How the row copy (device/comm/row_copy.cuh) cuts a tile's rows into 16-byte chunks and deals them to the
// threads of a copy team.
//
// A tile's data rows are listed densely (padding rows dropped), so the chunks of the tile are the numbers
// [0, num_rows * row_chunks): chunk c is bytes [16 (c mod row_chunks), +16) of listed row c / row_chunks. Thread t
// of a team of n threads copies chunks t, t + n, t + 2n, ...: neighbouring threads touch neighbouring 16 bytes,
// so each warp's loads and stores are whole 512-byte runs of one row. Plain integer arithmetic, shared by host
// and device, so that the host tests can check that every byte of every row is copied once.
#pragma once

#include <cstdint>

#include "common/host_device.hpp"
#include "plan/routing_plan.hpp"

namespace mok::comm {

// Rows per tile: the GEMM M tile, the grain of every readiness flag.
inline constexpr int32_t kTileRows = plan::kExpertRowAlignment;
// The copy's access size: 16-byte vector loads and stores (rows are 16-byte aligned: H is a multiple of 8).
inline constexpr uint32_t kCopyGranule = 16;
// Longest row the transport takes (H up to 512 Ki elements): a tile's chunk count then fits in 32 bits.
inline constexpr uint32_t kMaxCopyRowBytes = 1u << 20;

// Tiles a ring (of dispatched rows, or of output rows feeding the push) must hold at least. One is enough: the
// row copy finishes and publishes each tile before it waits on the next tile's gates (row_copy.cuh), so tile t
// never waits for a later tile, provided a consumer releases tile t without waiting for any later tile
// (docs/transport.md, "Token ring").
inline constexpr int32_t kMinRingTiles = 1;

static_assert(static_cast<uint64_t>(kTileRows) * (kMaxCopyRowBytes / kCopyGranule) <= UINT32_MAX,
              "chunk numbers of a tile fit in 32 bits");

struct ChunkPosition {
    uint32_t row;          // index into the tile's list of data rows
    uint32_t byte_offset;  // offset of the chunk inside the row
};

struct CopyGeometry {
    uint32_t row_chunks = 0;  // 16-byte chunks per row

    // `row_bytes` is a positive multiple of kCopyGranule, at most kMaxCopyRowBytes.
    MOK_HOST_DEVICE static CopyGeometry make(uint32_t row_bytes) { return {row_bytes / kCopyGranule}; }

    MOK_HOST_DEVICE uint32_t tile_chunks(uint32_t num_rows) const { return num_rows * row_chunks; }

    MOK_HOST_DEVICE ChunkPosition position(uint32_t chunk) const {
        return {chunk / row_chunks, (chunk % row_chunks) * kCopyGranule};
    }
};

// Walks chunks first, first + stride, first + 2 stride, ... of a tile without a division per step: a thread
// copies tens of chunks per tile, and the division would cost more issue slots than the copy itself.
struct ChunkCursor {
    uint32_t row = 0;           // listed row of the current chunk
    uint32_t chunk_in_row = 0;  // its chunk inside the row
    uint32_t step_rows = 0;     // the stride, as whole rows ...
    uint32_t step_chunks = 0;   // ... and the chunks left over, fewer than a row
    uint32_t row_chunks = 0;

    MOK_HOST_DEVICE static ChunkCursor make(const CopyGeometry& g, uint32_t first, uint32_t stride) {
        return {first / g.row_chunks, first % g.row_chunks, stride / g.row_chunks, stride % g.row_chunks, g.row_chunks};
    }

    MOK_HOST_DEVICE uint32_t byte_offset() const { return chunk_in_row * kCopyGranule; }

    MOK_HOST_DEVICE void advance() {
        row += step_rows;
        chunk_in_row += step_chunks;
        if (chunk_in_row >= row_chunks) {
            chunk_in_row -= row_chunks;
            ++row;
        }
    }
};

}  // namespace mok::comm
