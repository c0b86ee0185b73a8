// The pipelined path's hand-off from the down projection to the push (docs/layer.md, "Kernel sequence"): once
// every N tile of row tile m is stored, out_ready[m] carries this step's number, which the push's load gate
// (comm::PushParams::out_ready) waits for. Plain pointers, shared by the host API and the kernel's Params.
#pragma once

#include <cstdint>

namespace mok::gemm {

struct RowTilePublish {
    uint32_t* tile_counts = nullptr;     // [max tiles] N tiles stored per row tile; the launch zeroes it first
    uint64_t* tile_ready = nullptr;      // [max tiles] written: the push's out_ready flags; nullptr: no hand-off
    const uint64_t* sequence = nullptr;  // [1] the number this step's flags carry (the row gate's)
};

}  // namespace mok::gemm
