// The row copy's deal of a tile's rows to a team's bulk-copy issuers: every byte of every listed row exactly once, in
// 16-byte-aligned pieces that fit a stage, for any row length, number of data rows and issuers, and stages that fit
// the issuer's share of the staging.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "device/comm/copy_geometry.hpp"

namespace mok::comm {
namespace {

constexpr uint32_t kStaging = kBulkStagingBytes;

::testing::AssertionResult covers_rows_once(uint32_t row_bytes, uint32_t num_rows, uint32_t num_issuers) {
    const uint32_t share = BulkGeometry::share_bytes(kStaging, num_issuers);
    const BulkGeometry g = BulkGeometry::make(row_bytes, share);
    if (g.num_stages < kMinBulkStages || g.num_stages > kMaxBulkStages ||
        static_cast<uint64_t>(g.num_stages) * g.piece_bytes > share || share % kStagingShareAlignment != 0 ||
        g.piece_bytes % kCopyGranule != 0 || g.piece_bytes > kMaxPieceBytes) {
        return ::testing::AssertionFailure()
               << g.num_stages << " stages of " << g.piece_bytes << " bytes in a share of " << share;
    }
    std::vector<std::vector<uint8_t>> copied(num_rows, std::vector<uint8_t>(row_bytes, 0));
    for (uint32_t w = 0; w < num_issuers; ++w) {
        const uint32_t items = g.issuer_items(num_rows, w, num_issuers);
        for (uint32_t i = 0; i < items; ++i) {
            const PiecePosition at = g.piece(i, w, num_issuers);
            if (at.row >= num_rows || at.row % num_issuers != w || at.byte_offset % kCopyGranule != 0 ||
                at.bytes % kCopyGranule != 0 || at.bytes == 0 || at.bytes > g.piece_bytes ||
                at.byte_offset + at.bytes > row_bytes) {
                return ::testing::AssertionFailure() << "issuer " << w << " item " << i << " lands at row " << at.row
                                                     << " byte " << at.byte_offset << " for " << at.bytes;
            }
            for (uint32_t b = 0; b < at.bytes; ++b) {
                ++copied[at.row][at.byte_offset + b];
            }
        }
    }
    for (uint32_t row = 0; row < num_rows; ++row) {
        for (uint32_t b = 0; b < row_bytes; ++b) {
            if (copied[row][b] != 1) {
                return ::testing::AssertionFailure()
                       << "row " << row << " byte " << b << " copied " << static_cast<int>(copied[row][b]) << " times";
            }
        }
    }
    return ::testing::AssertionSuccess();
}

TEST(CopyGeometry, ModelRowsAreCoveredOnce) {
    for (const uint32_t row_bytes : {14336u, 12288u, 8192u, 16u, 128u, 16400u}) {
        for (const uint32_t num_rows : {0u, 1u, 77u, static_cast<uint32_t>(kTileRows)}) {
            for (const uint32_t issuers : {1u, 4u, 7u}) {
                EXPECT_TRUE(covers_rows_once(row_bytes, num_rows, issuers))
                    << row_bytes << " bytes, " << num_rows << " rows, " << issuers << " issuers";
            }
        }
    }
}

TEST(CopyGeometry, RandomRowsAndTeamsAreCoveredOnce) {
    std::mt19937 rng(7);
    for (int i = 0; i < 40; ++i) {
        const uint32_t row_bytes = kCopyGranule * std::uniform_int_distribution<uint32_t>(1, 3000)(rng);
        const uint32_t num_rows = std::uniform_int_distribution<uint32_t>(0, kTileRows)(rng);
        const uint32_t issuers = std::uniform_int_distribution<uint32_t>(1, 8)(rng);
        EXPECT_TRUE(covers_rows_once(row_bytes, num_rows, issuers))
            << row_bytes << " bytes, " << num_rows << " rows, " << issuers << " issuers";
    }
}

// A model row is one piece, and the stages of four issuers hold three (H = 7168) to six (H = 4096) rows each.
TEST(CopyGeometry, ModelRowsAreOnePieceWithSeveralStages) {
    const uint32_t share = BulkGeometry::share_bytes(kStaging, kBulkIssuers);
    EXPECT_EQ(BulkGeometry::make(14336, share).pieces_per_row, 1u);
    EXPECT_EQ(BulkGeometry::make(14336, share).num_stages, 3u);
    EXPECT_EQ(BulkGeometry::make(8192, share).num_stages, 6u);
}

TEST(CopyGeometry, LongestRowIsCutIntoStagePieces) {
    const BulkGeometry g = BulkGeometry::make(kMaxCopyRowBytes, BulkGeometry::share_bytes(kStaging, 4));
    EXPECT_EQ(g.piece_bytes, kMaxPieceBytes);
    EXPECT_EQ(g.pieces_per_row, kMaxCopyRowBytes / kMaxPieceBytes);
    const PiecePosition last = g.piece(g.issuer_items(kTileRows, 3, 4) - 1, 3, 4);
    EXPECT_EQ(last.row, static_cast<uint32_t>(kTileRows - 1));
    EXPECT_EQ(last.byte_offset + last.bytes, kMaxCopyRowBytes);
}

}  // namespace
}  // namespace mok::comm
