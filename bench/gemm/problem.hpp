// The problems mok-bench-gemm times: one (model shape, rows per expert) point, with every buffer its forms read
// and write filled on the device.
//
// The experts of a point are the local experts of EP 8 (E / 8), capped at kMaxRows rows in all -- the same groups
// as the torch._grouped_mm baseline, whose cases pair with these by name. Every expert gets the same rows, a
// multiple of the row tile, so the row space has no padding.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "bench/common/buffers.hpp"
#include "common/device_status.hpp"
#include "device/gemm/grouped_gemm.hpp"
#include "mok/models.hpp"
#include "mok/status.hpp"

namespace mok::bench::gemm_bench {

// The row tile: rows per expert are a multiple of it, and a point's row-tile table has one entry per tile.
constexpr int32_t kRowAlignment = 128;

// The experts of a point of `shape` (a model preset, mok/models.hpp): min(E / 8, kMaxRows / rows per expert), at least
// one.
int32_t groups_for(const ModelPreset& shape, int32_t rows_per_expert);

// Throws std::runtime_error with the status's text unless it is ok.
void check_status(const Status& s);

template <typename T>
std::vector<T> download(const T* device, size_t offset, size_t count) {
    std::vector<T> host(count);
    MOK_BENCH_CHECK_CUDA(cudaMemcpy(host.data(), device + offset, count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
}

// All buffers of one (shape, rows per expert) point, filled with seeded uniform values on `stream` (synchronized
// before the constructor returns).
struct Problem {
    Problem(const ModelPreset& shape, int32_t rows_per_expert, cudaStream_t stream);

    int32_t hidden;
    int32_t width;
    int32_t num_experts;
    int32_t rows;
    DeviceBuffer<__nv_bfloat16> x, dy, dys, out, gu, dgu, h, w_gate, w_up, w_down;
    DeviceBuffer<__nv_bfloat16> fresh, fresh_up;  // bf16 weight gradients of the checks before timing
    DeviceBuffer<float> d_gate, d_up, d_down, row_weight, partials, d_router;
    DeviceBuffer<int32_t> tables;
    DeviceBuffer<DeviceStatus> status;
    DeviceBuffer<uint32_t> wave_counter;  // the launches align their waves, as the layer's do
    gemm::GroupedRowSpace space{};
};

}  // namespace mok::bench::gemm_bench
