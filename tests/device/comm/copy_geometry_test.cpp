// The row copy's deal of a tile's chunks to a team's threads: every byte of every listed row exactly once,
// in 16-byte-aligned chunks, for any team size and any number of data rows.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "device/comm/copy_geometry.hpp"

namespace mok::comm {
namespace {

::testing::AssertionResult covers_rows_once(uint32_t row_bytes, uint32_t num_rows, uint32_t team_threads) {
    const CopyGeometry g = CopyGeometry::make(row_bytes);
    std::vector<std::vector<uint8_t>> copied(num_rows, std::vector<uint8_t>(row_bytes, 0));
    const uint32_t chunks = g.tile_chunks(num_rows);
    for (uint32_t thread = 0; thread < team_threads; ++thread) {
        for (uint32_t c = thread; c < chunks; c += team_threads) {
            const ChunkPosition at = g.position(c);
            if (at.row >= num_rows || at.byte_offset % kCopyGranule != 0 || at.byte_offset + kCopyGranule > row_bytes) {
                return ::testing::AssertionFailure()
                       << "chunk " << c << " lands at row " << at.row << " byte " << at.byte_offset;
            }
            for (uint32_t b = 0; b < kCopyGranule; ++b) {
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
    for (const uint32_t row_bytes : {14336u, 8192u, 16u, 128u, 16400u}) {
        for (const uint32_t num_rows : {0u, 1u, 77u, static_cast<uint32_t>(kTileRows)}) {
            EXPECT_TRUE(covers_rows_once(row_bytes, num_rows, 1024)) << row_bytes << " bytes, " << num_rows << " rows";
        }
    }
}

TEST(CopyGeometry, RandomRowsAndTeamsAreCoveredOnce) {
    std::mt19937 rng(7);
    for (int i = 0; i < 40; ++i) {
        const uint32_t row_bytes = kCopyGranule * std::uniform_int_distribution<uint32_t>(1, 600)(rng);
        const uint32_t num_rows = std::uniform_int_distribution<uint32_t>(0, kTileRows)(rng);
        const uint32_t team = 32 * std::uniform_int_distribution<uint32_t>(1, 32)(rng);
        EXPECT_TRUE(covers_rows_once(row_bytes, num_rows, team)) << row_bytes << " bytes, " << num_rows << " rows";
    }
}

TEST(CopyGeometry, LongestRowKeepsChunkNumbersInRange) {
    const CopyGeometry g = CopyGeometry::make(kMaxCopyRowBytes);
    const uint32_t last = g.tile_chunks(kTileRows) - 1;
    EXPECT_EQ(g.position(last).row, static_cast<uint32_t>(kTileRows - 1));
    EXPECT_EQ(g.position(last).byte_offset, kMaxCopyRowBytes - kCopyGranule);
}

// The cursor the copy walks with visits the chunks position() names, for any start and stride.
TEST(CopyGeometry, CursorFollowsPositions) {
    std::mt19937 rng(11);
    for (int i = 0; i < 200; ++i) {
        const CopyGeometry g = CopyGeometry::make(kCopyGranule * std::uniform_int_distribution<uint32_t>(1, 1200)(rng));
        const uint32_t stride = std::uniform_int_distribution<uint32_t>(1, 2048)(rng);
        const uint32_t first = std::uniform_int_distribution<uint32_t>(0, stride - 1)(rng);
        ChunkCursor cursor = ChunkCursor::make(g, first, stride);
        for (uint32_t c = first; c < g.tile_chunks(kTileRows); c += stride) {
            const ChunkPosition at = g.position(c);
            ASSERT_EQ(cursor.row, at.row) << "chunk " << c;
            ASSERT_EQ(cursor.byte_offset(), at.byte_offset) << "chunk " << c;
            cursor.advance();
        }
    }
}

}  // namespace
}  // namespace mok::comm
