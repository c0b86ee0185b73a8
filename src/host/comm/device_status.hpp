// Turning the record a failed kernel leaves (DeviceStatus, common/device_status.hpp) into a mok::Status.
//
// Kernels never trap: a wait that ran out, a schedule that overflowed or invalid routing writes one record per
// rank and the step's remaining kernels do nothing. After the stream completes, the host reads the records and
// reports the first failure with the rank, the block and what was awaited.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "common/device_status.hpp"
#include "mok/status.hpp"

namespace mok::comm {

// kOk for an unclaimed record; otherwise kPeerTimeout, kScheduleOverflow or kInvalidArgument (invalid routing)
// with a message naming the rank, the block and the wait site.
Status status_from_device(const DeviceStatus& record);

// Zeroes the records of a step's ranks (stream-ordered, graph-capturable): call before each step.
Status clear_device_status(std::span<DeviceStatus* const> records, cudaStream_t stream);

// Waits for `stream`, then reads the records (device pointers) and returns the first failure, in rank order.
Status read_device_status(std::span<DeviceStatus* const> records, cudaStream_t stream);

}  // namespace mok::comm
