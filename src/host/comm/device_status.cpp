#include "host/comm/device_status.hpp"

#include <string>

#include "host/cuda/cuda_status.hpp"

namespace mok::comm {

Status status_from_device(const DeviceStatus& record) {
    const auto code = static_cast<DeviceErrorCode>(record.code);
    // The record's rank field holds the rank plus one, so that zero means "unclaimed".
    const std::string rank = std::to_string(record.rank - 1);
    const std::string block = std::to_string(record.block);
    switch (code) {
        case DeviceErrorCode::kNone:
            return Status::ok();
        case DeviceErrorCode::kTimeout:
            return {StatusCode::kPeerTimeout, "rank " + rank + ", block " + block + ": timed out waiting for " +
                                                  to_string(static_cast<WaitSite>(record.site)) + " (observed " +
                                                  std::to_string(record.observed) + ", expected " +
                                                  std::to_string(record.expected) +
                                                  "); a peer rank did not arrive within Config::peer_timeout_ms"};
        case DeviceErrorCode::kScheduleOverflow:
            return {StatusCode::kScheduleOverflow,
                    "rank " + rank + " needs " + std::to_string(record.observed) + " padded rows, the schedule holds " +
                        std::to_string(record.expected) + " (raise Config::schedule_capacity_factor)"};
        case DeviceErrorCode::kInvalidRouting:
            return Status::invalid_argument(
                "expert_ids / router_weights of rank " + rank + ", token " + std::to_string(record.observed) +
                    ", slot " + std::to_string(record.expected),
                "an expert id in [-1, E), no expert twice in a token, and a finite router weight");
    }
    return {StatusCode::kInternal, "unknown device error code " + std::to_string(record.code) + " on rank " + rank};
}

Status clear_device_status(std::span<DeviceStatus* const> records, cudaStream_t stream) {
    for (DeviceStatus* record : records) {
        const cudaError_t error = cudaMemsetAsync(record, 0, sizeof(DeviceStatus), stream);
        MOK_RETURN_IF_ERROR(host::cuda_status(error, "clearing a DeviceStatus"));
    }
    return Status::ok();
}

Status read_device_status(std::span<DeviceStatus* const> records, cudaStream_t stream) {
    cudaError_t error = cudaStreamSynchronize(stream);
    MOK_RETURN_IF_ERROR(host::cuda_status(error, "waiting for the transport's stream"));
    for (DeviceStatus* record : records) {
        DeviceStatus host{};
        error = cudaMemcpy(&host, record, sizeof(host), cudaMemcpyDeviceToHost);
        MOK_RETURN_IF_ERROR(host::cuda_status(error, "reading a DeviceStatus"));
        MOK_RETURN_IF_ERROR(status_from_device(host));
    }
    return Status::ok();
}

}  // namespace mok::comm
