// Soft alignment of a persistent GEMM's waves: CTA b's i-th tile (tile b + i * gridDim.x) is in wave i, and its
// producer does not start loading a wave-i tile until every CTA with a wave-i tile has reached it -- a barrier
// per wave -- or until a short budget has passed, after which the CTA stops aligning for the rest of the launch.
//
// Why: the M-grouped forms give the 1-3 row tiles of an expert to neighbouring CTAs of one wave, which share
// the expert's weight tile through L2 only while their K loops stay within a few K blocks of each other. Tile
// times vary a little, the CTAs drift apart over the waves, and with few rows per expert the weights were read
// from DRAM once per row tile rather than once per expert (docs/gemm.md, "Waves"). Starting each wave together
// removes the drift; within a wave the CTA that reads a shared tile second hits L2 and catches up with the
// first.
//
// Soft, not a barrier one may rely on: it paces loads and guards no data, so the counter is relaxed, and a CTA
// that waited the budget in vain (CTAs that are not co-resident, when other kernels hold SMs) goes on unaligned
// and stops arriving, so the others give up after one budget too. Results never depend on it: which CTA
// computes a tile, and how, is the scheduler's business alone.
#pragma once

#include <cstdint>

#include "device/ptx/atomics.cuh"
#include "device/ptx/timer.cuh"

namespace mok::gemm {

class WaveSync {
  public:
    // How long a producer waits for a wave's stragglers before it gives up aligning: an order of magnitude above
    // the spread of one wave's tile times, far below a tile of the shortest K loop times the waves of a launch.
    static constexpr uint64_t kBudgetNs = 100'000;

    // `counter`: a device word zeroed before the launch, or nullptr (no alignment); `num_tiles`: the launch's;
    // `num_slots`: the tiles of one wave, one per CTA (or per cluster, counted by one CTA of each).
    __device__ WaveSync(uint32_t* counter, int32_t num_tiles, int32_t num_slots = static_cast<int32_t>(gridDim.x))
        : counter_(counter),
          num_tiles_(static_cast<uint32_t>(num_tiles)),
          num_slots_(static_cast<uint32_t>(num_slots)),
          active_(counter != nullptr) {}

    // Called by the producer thread before the first load of its tile of wave `wave`.
    __device__ void start_tile(int32_t wave) {
        if (!active_) {
            return;
        }
        ptx::atom_add_relaxed_gpu(counter_, 1);
        if (wave == 0) {
            return;  // the launch itself starts wave 0 together
        }
        // Every tile of waves 0 .. wave has started once the count reaches this (the last wave may be partial).
        const uint32_t started = min(static_cast<uint32_t>(wave + 1) * num_slots_, num_tiles_);
        const uint64_t deadline = ptx::global_timer_ns() + kBudgetNs;
        while (ptx::ld_relaxed_gpu(counter_) < started) {
            if (ptx::global_timer_ns() > deadline) {
                active_ = false;
                return;
            }
        }
    }

  private:
    uint32_t* counter_;
    uint32_t num_tiles_;
    uint32_t num_slots_;
    bool active_;
};

}  // namespace mok::gemm
