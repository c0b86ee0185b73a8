// The pipelined path's hand-off from the down projection to the combine (docs/layer.md, "Kernel sequence"): once
// every N tile of row tile m is stored, the part that completes it publishes the row tile --
//   to the push:     out_ready[m] carries this step's number, which the push's load gate
//                    (comm::PushParams::out_ready) waits for;
//   to the sources:  when the rows went straight to their tokens' ranks (epilogue::RowStoreOutput::sources), each
//                    data row's combine flag (its rank's combine_ready[token * k + slot]) carries the number,
//                    which that rank's combine waits for, as it would for the push's.
// Plain pointers, shared by the host API and the kernel's Params.
#pragma once

#include <cstdint>

#include "common/device_status.hpp"
#include "plan/routing_plan.hpp"

namespace mok::gemm {

struct RowTilePublish {
    uint32_t* tile_counts = nullptr;     // [max tiles] N tiles stored per row tile; the launch zeroes it first
    uint64_t* tile_ready = nullptr;      // [max tiles] written: the push's out_ready flags, or nullptr
    const uint64_t* sequence = nullptr;  // [1] the number this step's flags carry (the row gate's)
    // With the rows sent to their sources: the plan's row sources and each rank's combine flags (as this GPU
    // addresses them). Null: the rows stay here for the push.
    const plan::RowSource* sources = nullptr;  // [rows]
    uint64_t* const* rank_flags = nullptr;     // [R]
    // With rank_flags: the step's error record. Once it is claimed (an earlier kernel of the step, or this one,
    // failed) no flag is stored, so that another rank's combine never takes rows of a failed step: it times out
    // instead, as it does when a failed step's push sends nothing.
    const DeviceStatus* step_status = nullptr;  // [1]

    // Whether the launch publishes anything.
    MOK_HOST_DEVICE bool enabled() const { return tile_ready != nullptr || rank_flags != nullptr; }
};

}  // namespace mok::gemm
