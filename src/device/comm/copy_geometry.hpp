// How the row copy (device/comm/row_copy.cuh) cuts a tile's rows into bulk-copy pieces and deals them to the issuing
// threads of a copy team.
//
// A tile's data rows are listed densely (padding rows dropped). Issuer w of n takes listed rows w, w + n, w + 2n, ...
// and moves each in pieces of at most piece_bytes, in order: its item i is piece i % pieces_per_row of its
// (i / pieces_per_row)-th row. A piece passes through one stage of the issuer's ring in shared memory, so a piece is
// at most a stage, and the issuer's share of the staging holds num_stages of them (at least two: one loading while
// another is stored). Plain integer arithmetic, shared by host and device, so that the host tests can check that
// every byte of every row is copied once and that the stages fit.
#pragma once

#include <cstdint>

#include "common/host_device.hpp"
#include "plan/routing_plan.hpp"

namespace mok::comm {

// Rows per tile: the GEMM M tile, the grain of every readiness flag.
inline constexpr int32_t kTileRows = plan::kExpertRowAlignment;
// Bulk copies move multiples of 16 bytes between 16-byte-aligned addresses (rows are: H is a multiple of 8).
inline constexpr uint32_t kCopyGranule = 16;
// Longest row the transport takes (H up to 512 Ki elements).
inline constexpr uint32_t kMaxCopyRowBytes = 1u << 20;

// Tiles a ring (of dispatched rows, or of output rows feeding the push) must hold at least. One is enough: the
// row copy finishes and publishes each tile before it waits on the next tile's gates (row_copy.cuh), so tile t
// never waits for a later tile, provided a consumer releases tile t without waiting for any later tile
// (docs/transport.md, "Token ring").
inline constexpr int32_t kMinRingTiles = 1;

// Issuers per team: with one, an issuer's reload of a stage waits out the previous store's read of it; two or four
// moved the dispatch's remote rows at the link's rate from 8-12 SMs, four where rows are shorter (H = 4096).
inline constexpr uint32_t kBulkIssuers = 4;
// Destinations one listed row may have: a row loaded once and stored to each (the dispatch's rows of one source token
// on this rank, dispatch.cuh). Four halve the loads of DeepSeek-V3's EP 2 dispatch (a token sends a rank four rows
// on average) at 3 KiB of listing per buffer.
inline constexpr uint32_t kMaxRowFanout = 4;
// A copy block's dynamic shared memory for its issuers' stages: what a Hopper block may have, less the team's buffers.
inline constexpr uint32_t kBulkStagingBytes = 192 * 1024;
// The largest piece: a whole row of every model of the brief (H = 7168: 14 KiB) is one piece.
inline constexpr uint32_t kMaxPieceBytes = 16 * 1024;
// Stages per issuer: at least two (run() refills the previous piece's stage while the next one's store goes out), at
// most as many mbarriers as RowCopyStorage keeps per issuer.
inline constexpr uint32_t kMinBulkStages = 2;
inline constexpr uint32_t kMaxBulkStages = 16;
// An issuer's share of the staging starts 128-byte aligned (bulk copies need 16).
inline constexpr uint32_t kStagingShareAlignment = 128;

struct PiecePosition {
    uint32_t row;          // index into the tile's list of data rows
    uint32_t byte_offset;  // offset of the piece inside the row
    uint32_t bytes;        // its length
};

struct BulkGeometry {
    uint32_t row_bytes = 0;
    uint32_t piece_bytes = 0;     // a stage
    uint32_t pieces_per_row = 0;  // the last piece of a row may be shorter
    uint32_t num_stages = 0;      // of piece_bytes each, in the issuer's share

    // `row_bytes`: a positive multiple of kCopyGranule, at most kMaxCopyRowBytes; `share_bytes`: one issuer's part of
    // the staging, at least kMinBulkStages x kCopyGranule.
    MOK_HOST_DEVICE static BulkGeometry make(uint32_t row_bytes, uint32_t share_bytes) {
        BulkGeometry g;
        g.row_bytes = row_bytes;
        const uint32_t fit = share_bytes / kMinBulkStages / kCopyGranule * kCopyGranule;
        g.piece_bytes = row_bytes < kMaxPieceBytes ? row_bytes : kMaxPieceBytes;
        g.piece_bytes = g.piece_bytes < fit ? g.piece_bytes : fit;
        g.pieces_per_row = (row_bytes + g.piece_bytes - 1) / g.piece_bytes;
        const uint32_t stages = share_bytes / g.piece_bytes;
        g.num_stages = stages < kMaxBulkStages ? stages : kMaxBulkStages;
        return g;
    }

    // One issuer's share of `staging_bytes` among `num_issuers`.
    MOK_HOST_DEVICE static uint32_t share_bytes(uint32_t staging_bytes, uint32_t num_issuers) {
        return staging_bytes / num_issuers / kStagingShareAlignment * kStagingShareAlignment;
    }

    // Pieces issuer `w` of `n` moves of a tile with `num_rows` listed rows.
    MOK_HOST_DEVICE uint32_t issuer_items(uint32_t num_rows, uint32_t w, uint32_t n) const {
        const uint32_t rows = num_rows > w ? (num_rows - w + n - 1) / n : 0;
        return rows * pieces_per_row;
    }

    // Where issuer `w` of `n`'s item `i` lies.
    MOK_HOST_DEVICE PiecePosition piece(uint32_t i, uint32_t w, uint32_t n) const {
        const uint32_t offset = (i % pieces_per_row) * piece_bytes;
        const uint32_t left = row_bytes - offset;
        return {w + (i / pieces_per_row) * n, offset, left < piece_bytes ? left : piece_bytes};
    }
};

}  // namespace mok::comm
