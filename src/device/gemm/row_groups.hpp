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
};

}  // namespace mok::gemm
