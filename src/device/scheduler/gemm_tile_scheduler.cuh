// Tile schedulers of the grouped GEMMs: the one place that decides which CTA computes which tile, in which
// order. The producer warp and both consumer warpgroups of a CTA each run their own copy of the same scheduler
// and so walk the same tile sequence; no role re-derives the order.
//
// Work is static and persistent: CTA b takes tiles b, b + gridDim.x, b + 2 gridDim.x, ... A tile's result
// depends only on the tile (its K loop always runs in the same order), so the output bits are the same for
// any grid size -- the determinism contract's "any number of SMs".
#pragma once

#include <cstdint>

#include "common/host_device.hpp"
#include "device/gemm/gemm_config.cuh"
#include "device/gemm/row_groups.hpp"

namespace mok::gemm {

struct Tile {
    int32_t m_idx;         // M tile index: a row tile (grouped forms) or an output-row tile (weight gradients)
    int32_t n_idx;         // N tile index
    int32_t expert;        // local expert
    int32_t row_begin;     // grouped: the tile's first row; weight gradients: the expert segment's first row
    int32_t num_rows;      // grouped: rows of the tile holding data; weight gradients: the expert's rows (K)
    int32_t num_k_blocks;  // BLOCK_K blocks of the K loop
    bool last;             // the last tile this copy of the scheduler hands out: no K loop of its role follows it
};

// Which tiles one copy of a scheduler hands out: first, first + stride, first + 2 stride, ... A CTA's own in the
// cooperative arrangement; in the ping-pong one both CTAs of a cluster walk their cluster's (each computing one
// row half of every tile).
struct TileSlots {
    int32_t first;
    int32_t stride;

    __device__ static TileSlots of_cta() { return {static_cast<int32_t>(blockIdx.x), static_cast<int32_t>(gridDim.x)}; }
    __device__ static TileSlots of_cluster(int32_t cluster_size) {
        return {static_cast<int32_t>(blockIdx.x) / cluster_size, static_cast<int32_t>(gridDim.x) / cluster_size};
    }
};

// M-grouped forms (gate/up, down, dgrad): tiles over (row tile, N tile). Row tiles are walked in bands of about
// `band_tiles`, row tiles fastest within a band, so that the CTAs running at one time share both their A row
// tiles (across N) and their B weight tiles (across the band) in L2. A band that would start inside a short expert
// starts at that expert's first row tile instead (BandStarts), so that its row tiles read each weight tile together.
// Host and device: tests/device/scheduler checks the order on the CPU.
class GroupedRowScheduler {
  public:
    // Row tiles per band. Eight: in the layer at 128-256 rows per expert, gate/up and the dgrad forms ran up to 1.04x
    // faster than with bands of 16, bands of 12 gained less and bands of 32 lost 1-7% (docs/gemm.md, "Bands of eight
    // row tiles"; not profiled: a wave of eight-tile bands spans more N tiles of fewer row tiles).
    static constexpr int32_t kBandTiles = 8;
    // The down projection's: with bands of eight its stage lost 2-3.5% for DeepSeek-V3 at EP 2, so it keeps sixteen.
    static constexpr int32_t kDownBandTiles = 16;

    // Where bands start: at every band_tiles-th row tile (kFixed), or there unless that cuts an expert that began
    // less than half a band before, whose first row tile then starts the band (kExpertAligned, band_start). Aligned
    // starts ran gate/up and dgrad_gate_up up to 1.07x in the layer at 128-256 rows per expert and cost the down
    // projection up to 1.6% (docs/gemm.md, "Bands that start at an expert"), which keeps fixed ones.
    enum class BandStarts { kFixed, kExpertAligned };

    MOK_HOST_DEVICE GroupedRowScheduler(const RowGroups& groups, int32_t n_extent, int32_t num_k_blocks,
                                        TileSlots slots = TileSlots::of_cta(), int32_t band_tiles = kBandTiles,
                                        BandStarts starts = BandStarts::kExpertAligned)
        : groups_(groups),
          band_tiles_(band_tiles),
          expert_aligned_(starts == BandStarts::kExpertAligned),
          num_m_tiles_(*groups.num_padded_rows / BLOCK_M),
          num_n_tiles_((n_extent + BLOCK_N - 1) / BLOCK_N),
          num_k_blocks_(num_k_blocks),
          next_(slots.first),
          stride_(slots.stride) {}

    MOK_HOST_DEVICE int32_t num_n_tiles() const { return num_n_tiles_; }
    MOK_HOST_DEVICE int32_t num_tiles() const { return num_m_tiles_ * num_n_tiles_; }

    MOK_HOST_DEVICE MOK_INLINE bool next(Tile& tile) {
        if (next_ >= num_tiles()) {
            return false;
        }
        // Fixed starts by their own formula, not band_start's: through the aligned path's branch, ptxas serialised
        // the down projection's ping-pong wgmma (C7518).
        if (!expert_aligned_) {
            const int32_t band_size = band_tiles_ * num_n_tiles_;
            const int32_t band = next_ / band_size;
            const int32_t first = band * band_tiles_;
            const int32_t m_tiles = min(band_tiles_, num_m_tiles_ - first);
            const int32_t in_band = next_ - band * band_size;
            fill(tile, first + in_band % m_tiles, in_band / m_tiles);
            return true;
        }
        // Tiles before a band are its first row tile times the N tiles, so the row tile next_ / N names the band.
        const int32_t row_position = next_ / num_n_tiles_;
        const int32_t nominal = row_position / band_tiles_;
        int32_t band_first_m = band_start(nominal);
        int32_t band_end_m = band_start(nominal + 1);
        if (band_end_m <= row_position) {
            band_first_m = band_end_m;
            band_end_m = band_start(nominal + 2);
        }
        const int32_t band_m_tiles = band_end_m - band_first_m;
        const int32_t in_band = next_ - band_first_m * num_n_tiles_;
        fill(tile, band_first_m + in_band % band_m_tiles, in_band / band_m_tiles);
        return true;
    }

  private:
    // Completes `tile` at (m_idx, n_idx) from the row groups and steps to this copy's next slot.
    MOK_HOST_DEVICE MOK_INLINE void fill(Tile& tile, int32_t m_idx, int32_t n_idx) {
        tile.m_idx = m_idx;
        tile.n_idx = n_idx;
        tile.expert = groups_.tile_expert[tile.m_idx];
        tile.row_begin = tile.m_idx * BLOCK_M;
        const int32_t segment_end = groups_.segment_begin[tile.expert] + groups_.segment_rows[tile.expert];
        tile.num_rows = min(BLOCK_M, segment_end - tile.row_begin);
        tile.num_k_blocks = num_k_blocks_;
        next_ += stride_;
        tile.last = next_ >= num_tiles();
    }

    // First row tile of band `band` with aligned starts: the multiple of band_tiles_, moved back to the first row
    // tile of the expert it would cut where that expert starts less than half a band before it. A wave of the
    // layer's GEMMs holds about one band, so an expert cut by a band start read its weight tiles twice, a band apart
    // (the routed gate/up at 256 rows per expert read its weights from DRAM 1.28 times, with aligned starts 1.10).
    // Moving each start back by less than half a band keeps the starts increasing and every band at least half a
    // band long, so row tile q lies in band q / band_tiles_ or the next.
    MOK_HOST_DEVICE MOK_INLINE int32_t band_start(int32_t band) const {
        const int32_t nominal = band * band_tiles_;
        if (nominal >= num_m_tiles_) {
            return num_m_tiles_;
        }
        const int32_t expert_first = groups_.segment_begin[groups_.tile_expert[nominal]] / BLOCK_M;
        return 2 * (nominal - expert_first) < band_tiles_ ? expert_first : nominal;
    }

    RowGroups groups_;
    int32_t band_tiles_;
    bool expert_aligned_;
    int32_t num_m_tiles_;
    int32_t num_n_tiles_;
    int32_t num_k_blocks_;
    int32_t next_;
    int32_t stride_;
};

// Weight-gradient forms: dW_e = A_e^T B_e with K running over expert e's rows. Tiles over (expert, output-row
// tile, output-column tile), expert-major so that the CTAs running at one time read the same expert's rows.
class ExpertWeightScheduler {
  public:
    __device__ ExpertWeightScheduler(const RowGroups& groups, int32_t num_experts, int32_t num_m_tiles,
                                     int32_t n_extent)
        : groups_(groups),
          num_experts_(num_experts),
          num_m_tiles_(num_m_tiles),
          num_n_tiles_((n_extent + BLOCK_N - 1) / BLOCK_N),
          next_(static_cast<int32_t>(blockIdx.x)) {}

    __device__ int32_t num_tiles() const { return num_experts_ * num_m_tiles_ * num_n_tiles_; }

    __device__ bool next(Tile& tile) {
        const int32_t tiles_per_expert = num_m_tiles_ * num_n_tiles_;
        if (next_ >= num_tiles()) {
            return false;
        }
        tile.expert = next_ / tiles_per_expert;
        const int32_t in_expert = next_ - tile.expert * tiles_per_expert;
        tile.m_idx = in_expert / num_n_tiles_;
        tile.n_idx = in_expert - tile.m_idx * num_n_tiles_;
        tile.row_begin = groups_.segment_begin[tile.expert];
        tile.num_rows = groups_.segment_rows[tile.expert];
        tile.num_k_blocks = (tile.num_rows + BLOCK_K - 1) / BLOCK_K;
        next_ += static_cast<int32_t>(gridDim.x);
        tile.last = next_ >= num_tiles();
        return true;
    }

  private:
    RowGroups groups_;
    int32_t num_experts_;
    int32_t num_m_tiles_;
    int32_t num_n_tiles_;
    int32_t next_;
};

}  // namespace mok::gemm
