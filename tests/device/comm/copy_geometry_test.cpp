// The row pipeline's cut of a tile into copy units: every byte of every row exactly once, in stage-sized,
// 16-byte-granular pieces, with enough units per tile for the pipeline's lookahead.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "device/comm/copy_geometry.hpp"

namespace mok::comm {
namespace {

::testing::AssertionResult covers_tile_once(uint32_t row_bytes) {
    const CopyGeometry g = CopyGeometry::make(row_bytes);
    if (g.units_per_tile < static_cast<uint32_t>(kCopyStages)) {
        return ::testing::AssertionFailure() << g.units_per_tile << " units per tile, fewer than the stages";
    }
    if (g.rows_per_unit > static_cast<uint32_t>(kMaxRowsPerUnit) || kTileRows % g.rows_per_unit != 0) {
        return ::testing::AssertionFailure() << g.rows_per_unit << " rows per unit";
    }
    std::vector<std::vector<std::pair<uint32_t, uint32_t>>> pieces(kTileRows);
    for (uint32_t u = 0; u < g.units_per_tile; ++u) {
        const CopyUnit unit = g.unit(u);
        if (unit.bytes == 0 || unit.bytes % kCopyGranule != 0 || unit.byte_offset % kCopyGranule != 0 ||
            unit.num_rows * unit.bytes > kStageBytes) {
            return ::testing::AssertionFailure() << "unit " << u << ": " << unit.num_rows << " rows of " << unit.bytes
                                                 << " bytes at " << unit.byte_offset;
        }
        for (uint32_t r = 0; r < unit.num_rows; ++r) {
            if (unit.first_row + r >= static_cast<uint32_t>(kTileRows)) {
                return ::testing::AssertionFailure() << "unit " << u << " reaches past the tile";
            }
            pieces[unit.first_row + r].push_back({unit.byte_offset, unit.bytes});
        }
    }
    for (int32_t row = 0; row < kTileRows; ++row) {
        std::sort(pieces[row].begin(), pieces[row].end());
        uint32_t covered = 0;
        for (const auto& [offset, bytes] : pieces[row]) {
            if (offset != covered) {
                return ::testing::AssertionFailure() << "row " << row << ": gap or overlap at byte " << covered;
            }
            covered += bytes;
        }
        if (covered != row_bytes) {
            return ::testing::AssertionFailure() << "row " << row << ": " << covered << " of " << row_bytes << " bytes";
        }
    }
    return ::testing::AssertionSuccess();
}

TEST(CopyGeometry, ModelRowsAreCoveredOnce) {
    // H 7168 and 4096 (DeepSeek-V3, Qwen3.5), a row of exactly one stage, the smallest rows, and rows of two and
    // of many stages with an uneven last piece.
    for (const uint32_t row_bytes : {14336u, 8192u, 16384u, 16u, 128u, 16400u, 32768u, 100016u, kMaxCopyRowBytes}) {
        EXPECT_TRUE(covers_tile_once(row_bytes)) << row_bytes << " bytes per row";
    }
}

TEST(CopyGeometry, RandomRowsAreCoveredOnce) {
    std::mt19937_64 rng(1129);
    for (int trial = 0; trial < 2000; ++trial) {
        const uint32_t row_bytes =
            kCopyGranule * std::uniform_int_distribution<uint32_t>(1, kMaxCopyRowBytes / kCopyGranule)(rng);
        ASSERT_TRUE(covers_tile_once(row_bytes)) << row_bytes << " bytes per row";
    }
}

TEST(CopyGeometry, ShortRowsShareStages) {
    // 8 KiB rows (H 4096): two per 16 KiB stage; 128-byte rows: kMaxRowsPerUnit per unit.
    EXPECT_EQ(CopyGeometry::make(8192).rows_per_unit, 2u);
    EXPECT_EQ(CopyGeometry::make(128).rows_per_unit, static_cast<uint32_t>(kMaxRowsPerUnit));
    EXPECT_EQ(CopyGeometry::make(14336).rows_per_unit, 1u);
    EXPECT_EQ(CopyGeometry::make(16400).pieces_per_row, 2u);
}

}  // namespace
}  // namespace mok::comm
