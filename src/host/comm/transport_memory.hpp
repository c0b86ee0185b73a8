// What the transport allocates per rank, and the one copy a rank makes into its own window each pass.
//
// docs/transport.md ("Memory") gives the formulas; this is their single implementation, used by the layer to
// size its workspace, by the benchmark to report it, and by the tests to check the documented budget.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device/layout/transport_layout.hpp"
#include "mok/status.hpp"

namespace mok::comm {

struct TransportMemory {
    uint64_t symmetric_bytes = 0;          // the window: peers read and write it
    uint64_t symmetric_rows_bytes = 0;     // of which x and dy rows: 2 T H 2
    uint64_t symmetric_combine_bytes = 0;  // of which combine rows: T k H 2 (forward outputs and dx rows share them)
    uint64_t local_bytes = 0;              // the local block
    uint64_t local_ring_bytes = 0;         // of which the two token rings: 2 ring_rows H 2
    uint64_t local_plan_bytes = 0;         // of which the plan tables
};

TransportMemory transport_memory(const layout::SymmetricLayout& window, const layout::LocalLayout& local);

// Which of a rank's row regions a staging copy fills.
enum class SourceRows : uint8_t {
    kTokens,  // x, before the routing exchange (which announces them)
    kGrads,   // dy, before enqueue_grads_announce
};

// Copies this rank's [T, H] bf16 rows (row stride in elements, a multiple of 8) into its own window;
// stream-ordered, graph-capturable.
Status stage_rows(char* window, const layout::SymmetricLayout& layout, SourceRows which, const void* rows,
                  int64_t row_stride, cudaStream_t stream);

}  // namespace mok::comm
