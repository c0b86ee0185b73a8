// The tests' stand-in for the GEMMs between dispatch and push: a block that waits for each dispatched tile,
// keeps a copy of its rows (to check the dispatch), writes the stand-in experts' outputs (test_transforms.hpp)
// into the output ring, and hands the ring slots back. It follows the consumer contract of device/comm/ring.cuh.
#pragma once

#include <cstdint>

#include "comm/test_transforms.hpp"
#include "device/comm/copy_geometry.hpp"
#include "device/comm/ring.cuh"
#include "device/comm/signals.cuh"
#include "device/common/bounded_wait.cuh"
#include "device/layout/transport_layout.hpp"
#include "plan/routing_plan.hpp"

namespace mok::comm::testing {

struct ConsumerParams {
    layout::TransportPass pass;
    const uint16_t* ring_rows;  // [ring_rows, H]
    int64_t ring_rows_count;
    const uint64_t* ring_ready;
    uint64_t* ring_free;
    const plan::RowSource* row_source;  // [capacity]
    const int32_t* tile_expert;         // [capacity / 128] local expert of each tile
    const int32_t* owner_padded_rows;   // [R]
    int32_t rank;
    int32_t first_expert;  // global id of this rank's local expert 0
    int64_t hidden;
    uint16_t* captured;  // [capacity, H]
    uint16_t* out_rows;  // [out_ring_rows, H]
    int64_t out_ring_rows;
    uint64_t* out_ready;       // [capacity / 128]
    const uint64_t* out_free;  // [capacity / 128] or null: the push's release of output slots
    float* out_weight_grads;   // [out_ring_rows]
    const layout::TransportControl* control;
    device::WaitContext ctx;
};

// Waits for tile `tile`'s rows and, on a second lap of the output ring, for its output slots; thread 0.
__device__ __forceinline__ bool wait_consumer_inputs(const ConsumerParams& p, int64_t tile, uint64_t sequence) {
    if (!wait_ring_tile(p.ctx, p.ring_ready, tile, sequence)) {
        return false;
    }
    const int64_t out_tiles = p.out_ring_rows / kTileRows;
    if (p.out_free != nullptr && tile >= out_tiles) {
        return wait_flag_gpu(p.ctx, WaitSite::kRingSlotFree, &p.out_free[tile - out_tiles], sequence);
    }
    return true;
}

// Consumes tiles first_tile, first_tile + stride, ...; block-wide.
__device__ __forceinline__ bool consume_tiles(const ConsumerParams& p, int64_t first_tile, int64_t stride) {
    const uint64_t sequence = layout::pass_sequence(p.control->step, p.pass);
    const bool backward = p.pass == layout::TransportPass::kBackwardGrads;
    const int64_t num_tiles = p.owner_padded_rows[p.rank] / kTileRows;
    for (int64_t tile = first_tile; tile < num_tiles; tile += stride) {
        const bool ok = threadIdx.x == 0 ? wait_consumer_inputs(p, tile, sequence) : true;
        if (!__syncthreads_and(ok)) {
            return false;
        }
        const int32_t expert = p.first_expert + p.tile_expert[tile];
        for (int64_t i = threadIdx.x; i < kTileRows * p.hidden; i += blockDim.x) {
            const int64_t row = tile * kTileRows + i / p.hidden;
            const int64_t column = i % p.hidden;
            const uint16_t value = p.ring_rows[(row % p.ring_rows_count) * p.hidden + column];
            p.captured[row * p.hidden + column] = value;
            if (!p.row_source[row].is_padding()) {
                p.out_rows[(row % p.out_ring_rows) * p.hidden + column] =
                    backward ? backward_output(value, expert) : forward_output(value, expert);
            }
        }
        if (backward) {
            for (int64_t r = threadIdx.x; r < kTileRows; r += blockDim.x) {
                const int64_t row = tile * kTileRows + r;
                if (!p.row_source[row].is_padding()) {
                    p.out_weight_grads[row % p.out_ring_rows] =
                        weight_grad(p.ring_rows[(row % p.ring_rows_count) * p.hidden], expert);
                }
            }
        }
        // Every thread's reads of the ring and writes of the outputs come before thread 0's releases.
        __syncthreads();
        if (threadIdx.x == 0) {
            release_ring_tile(p.ring_free, tile, sequence);
            ptx::st_release_gpu(&p.out_ready[tile], sequence);
        }
    }
    return true;
}

}  // namespace mok::comm::testing
