// The row space of the M-grouped GEMMs, shared by host launchers and device schedulers.
#pragma once

#include <cstdint>

namespace mok::gemm {

// The expert-major row space as the routing plan lays it out (device memory, read by the kernels at run time
// so that nothing needs a host sync). Segments are padded to 128 rows, so each 128-row tile belongs to one
// expert.
struct RowGroups {
    const int32_t* num_padded_rows;  // [1]           rows of the row space in use, a multiple of 128
    const int32_t* tile_expert;      // [max tiles]   local expert of each 128-row tile
    const int32_t* segment_begin;    // [E_local]     first row of each local expert's segment
    const int32_t* segment_rows;     // [E_local]     routed rows of each local expert (the rest is padding)
    // The layer's pipelined path (docs/layer.md, "Pipelined dispatch"): the rows are still arriving, and the
    // dispatch publishes each 128-row tile as it lands. When set, a form whose A operand is these rows
    // (kGatedRows) waits for tile_ready[m] >= *ready_sequence before it loads row tile m. Null: rows are in place.
    const uint64_t* tile_ready = nullptr;      // [max tiles]   the transport's ring_ready flags
    const uint64_t* ready_sequence = nullptr;  // [1]           the number this step's flags carry
};

}  // namespace mok::gemm
