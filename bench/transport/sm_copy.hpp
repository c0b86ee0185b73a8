// The same-run reference for the transport's bandwidth: a plain SM copy kernel that pulls bytes from the peer
// rank's symmetric window with 16-byte loads, the way the brief's ceiling measurement did (1024 threads per
// block, four loads in flight per thread), on the same number of SMs as the transport.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/device_status.hpp"
#include "device/comm/peers.hpp"

namespace mok::bench::transport {

// Copies `bytes` (a multiple of 16) from byte `src_offset` of rank `peer`'s window into local `dst`.
void enqueue_sm_pull_copy(const comm::NcclPeers& peers, int32_t peer, uint64_t src_offset, void* dst, size_t bytes,
                          int32_t num_blocks, cudaStream_t stream);

// The same kernel's loop over scattered rows: row i of `num_rows` comes from byte `row_offsets[i]` (device
// memory) of rank `peer`'s window and lands densely in `dst`. The dispatch's access pattern without its tiles,
// gates and flags: how much of the dispatch's gap to the SM copy is the pattern, and how much the engine.
void enqueue_sm_gather_copy(const comm::NcclPeers& peers, int32_t peer, const uint64_t* row_offsets, int64_t num_rows,
                            uint32_t row_bytes, void* dst, int32_t num_blocks, cudaStream_t stream);

// The same rows pulled by bulk copies (the TMA unit) through rings of row-sized shared-memory stages: `num_issuers`
// threads per block (1-8), each with a ring of its own. A row that does not land within `timeout_ns` is reported in
// `status` (as rank `rank`'s).
void enqueue_sm_bulk_gather_copy(const comm::NcclPeers& peers, int32_t peer, const uint64_t* row_offsets,
                                 int64_t num_rows, uint32_t row_bytes, void* dst, int32_t num_blocks,
                                 int32_t num_issuers, DeviceStatus* status, int32_t rank, uint64_t timeout_ns,
                                 cudaStream_t stream);

}  // namespace mok::bench::transport
